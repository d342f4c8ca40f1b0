"""Approvals decided by the coordinator's core on plain values: what the chat is asked,
which answer settles which call, and that the first answer wins.

(What the session does with the outcome: tests/actors/session/test_approvals.py.)
"""

from __future__ import annotations

import datetime as dt

from tests.actors.chat.driver import CHAT, NOW, OWNER, SID, Desk
from tether.actors.chat.interactions import NewRequest
from tether.events.interactions import Interaction
from tether.events.messages import ApprovalRequest, InteractionOpened


def test_an_approval_is_stored_acknowledged_and_put_to_the_chat() -> None:
    desk = Desk()
    fed = desk.approval()
    (opened,) = fed.recorded(Interaction.Opened)
    assert (opened.interaction_id, opened.session_id, opened.call_id, opened.kind) == (
        "i1", SID, "c1", "approval")
    assert (opened.tool, opened.summary, opened.channel) == (
        "run_shell", "git push origin main", CHAT)
    assert opened.deadline == (NOW + dt.timedelta(seconds=300)).isoformat()
    assert fed.replies() == [InteractionOpened(interaction_id="i1", call_id="c1")]
    assert fed.told() == [("approval", (
        "approval i1: may I run run_shell git push origin main? (it needs approval by a "
        "person (tier 3)) Reply /approve i1 or /deny i1 [why]; any other message says no. "
        "No answer in 300 s is a no."))]
    assert fed.settled() == [] and desk.pending == ["i1"]


def test_approve_with_its_id_settles_it_for_the_session() -> None:
    desk = Desk()
    desk.approval()
    fed = desk.approve("i1")
    (settled,) = fed.settled()
    assert (settled.session_id, settled.call_id, settled.interaction_id, settled.kind) == (
        SID, "c1", "i1", "approval")
    assert (settled.outcome, settled.by, settled.reason) == (
        "approved", OWNER, "approved by ana: approved")
    assert [(e.approved, e.by, e.reason) for e in fed.recorded(Interaction.Answered)] == [
        (True, OWNER, "approved")]
    assert fed.told() == [("approval", "approval i1: approved by ana")]
    assert desk.pending == []


def test_the_first_answer_wins_and_a_second_settles_nothing() -> None:
    desk = Desk()
    desk.approval()
    desk.approve("i1")
    for again in (desk.approve("i1"), desk.deny("i1 changed my mind"),
                  desk.text("no after all")):
        assert again.settled() == [] and again.events == []
    desk.approval(call="c2")
    desk.text("no")  # a no...
    late = desk.approve("i2")  # ...then a yes: the no won
    assert late.settled() == [] and late.events == []
    assert late.told() == []


def test_a_wrong_id_approves_nothing_and_the_right_one_still_can() -> None:
    desk = Desk()
    desk.approval()
    fed = desk.approve("deadbeef", call="c1")
    assert fed.told() == [("approval", "no pending approval 'deadbeef'; nothing was approved")]
    assert fed.settled() == [] and fed.events == [] and desk.pending == ["i1"]
    assert desk.approve("i1").settled()[0].outcome == "approved"


def test_a_deny_needs_no_id_its_words_are_the_reason() -> None:
    """``/deny not today please``: "not" names no approval, so it is part of the why and
    the no goes to the call the session waits on."""
    desk = Desk()
    desk.approval()
    (settled,) = desk.deny("not today please", call="c1").settled()
    assert (settled.outcome, settled.reason) == ("denied", "denied by ana: not today please")


def test_a_deny_with_its_id_and_none_without_a_reason() -> None:
    desk = Desk()
    desk.approval()
    fed = desk.deny("i1", call="")
    assert [(s.outcome, s.reason) for s in fed.settled()] == [("denied", "denied by ana: denied")]
    assert fed.told() == [("approval", "approval i1: denied by ana")]


def test_an_answer_for_nothing_waiting_is_told_to_a_chat_of_the_session_if_any() -> None:
    desk = Desk()
    assert desk.deny("", call="c9").effects == []  # nothing of the session: the log only
    desk.question()
    fed = desk.deny("", call="c9")
    assert fed.told() == [("approval", "nothing is waiting for approval")]
    assert fed.settled() == [] and desk.pending == ["i1"]  # the question is not an approval


def test_plain_text_is_a_no_with_the_text_as_reason() -> None:
    desk = Desk()
    desk.approval()
    fed = desk.text("no, not on a Friday")
    (settled,) = fed.settled()
    assert (settled.outcome, settled.by, settled.reason) == (
        "denied", OWNER, "denied by ana: no, not on a Friday")
    assert [(e.approved, e.reason) for e in fed.recorded(Interaction.Answered)] == [
        (False, "no, not on a Friday")]


def test_text_goes_to_the_oldest_approval_of_the_chat_first() -> None:
    desk = Desk()
    desk.approval(sid="s1", call="c1")
    desk.approval(sid="s2", call="c2")
    fed = desk.text("no", sid="s2")
    assert [(s.session_id, s.interaction_id) for s in fed.settled()] == [("s1", "i1")]
    assert desk.pending == ["i2"]


def test_each_session_approves_only_its_own() -> None:
    desk = Desk()
    desk.approval(sid="s1", call="c1")
    desk.approval(sid="s2", call="c2")
    fed = desk.approve("i1", sid="s2")
    assert fed.told() == [("approval", "no pending approval 'i1'; nothing was approved")]
    assert fed.settled() == [] and desk.pending == ["i1", "i2"]


def test_age_not_the_id_decides_which_approval_text_goes_to() -> None:
    desk = Desk()
    for interaction_id, call in (("zz", "c1"), ("aa", "c2")):  # ids are random, not ordered
        desk.feed(NewRequest(ApprovalRequest(
            session_id=SID, call_id=call, tool="run_shell", summary="ls", reason="why",
            channel=CHAT, owner=OWNER), interaction_id))
    assert [s.interaction_id for s in desk.text("no").settled()] == ["zz"]
