"""How an interaction ends without an answer, decided by the coordinator's core: an
approval or a question expires at its deadline on the injected clock (a no), and a
session that fails or is killed has what it waits on cancelled.
"""

from __future__ import annotations

import pytest

from tests.actors.chat.driver import CHAT, Desk
from tether.events.interactions import Interaction
from tether.events.messages import CancelInteractions


@pytest.mark.parametrize(("ask", "call"), [("approval", "c1"), ("question", "q1")])
def test_no_answer_by_the_deadline_is_a_no(ask: str, call: str) -> None:
    desk = Desk()
    getattr(desk, ask)()
    early = desk.advance(299.999)
    assert early.settled() == [] and early.events == [] and desk.pending == ["i1"]
    fed = desk.advance(0.001)  # exactly at the deadline
    (settled,) = fed.settled()
    assert (settled.kind, settled.call_id, settled.outcome, settled.by, settled.reason) == (
        ask, call, "expired", "timeout", "no answer within 300 s")
    assert len(fed.recorded(Interaction.Expired)) == 1
    assert fed.told() == [(ask, f"{ask} i1 expired: no answer within 300 s, so no")]
    assert desk.pending == []
    assert desk.text("too late").settled() == []


def test_the_deadline_follows_the_configured_timeout() -> None:
    desk = Desk(timeout=60)
    assert desk.approval().told()[0][1].endswith("No answer in 60 s is a no.")
    assert desk.advance(59).settled() == []
    assert desk.advance(1).settled()[0].reason == "no answer within 60 s"


def test_any_input_expires_what_is_due_not_only_the_tick() -> None:
    desk = Desk()
    desk.approval(sid="s1")
    desk.now = desk.now.replace(minute=5)  # 300 s later, no tick yet
    fed = desk.question(sid="s2")
    assert [(s.session_id, s.outcome) for s in fed.settled()] == [("s1", "expired")]
    assert desk.pending == ["i2"]


def test_each_expires_at_its_own_deadline() -> None:
    desk = Desk()
    desk.approval(sid="s1")
    desk.advance(100)
    desk.question(sid="s2")
    assert [s.session_id for s in desk.advance(200).settled()] == ["s1"]
    assert [s.session_id for s in desk.advance(100).settled()] == ["s2"]


def test_a_kill_cancels_everything_the_session_waits_on_and_nothing_else() -> None:
    desk = Desk()
    desk.approval(sid="s1")
    desk.question(sid="s1", channel="ops")
    desk.plan(sid="s1")
    desk.approval(sid="s2", call="c2")
    fed = desk.feed(CancelInteractions(session_id="s1", reason="killed"))
    assert [(s.interaction_id, s.kind, s.outcome, s.by, s.reason) for s in fed.settled()] == [
        ("i1", "approval", "cancelled", "tether", "cancelled: killed"),
        ("i2", "question", "cancelled", "tether", "cancelled: killed"),
        ("i3", "plan_review", "cancelled", "tether", "cancelled: killed")]
    assert [e.reason for e in fed.recorded(Interaction.Cancelled)] == ["killed"] * 3
    assert fed.told(CHAT) == [("approval", "approval i1 was cancelled: killed"),
                              ("plan", "plan i3 was cancelled: killed")]
    assert fed.told("ops") == [("question", "question i2 was cancelled: killed")]
    assert desk.pending == ["i4"]
    assert desk.advance(300).settled()[0].session_id == "s2"  # the other still expires


def test_a_cancelled_interaction_takes_no_answer_and_does_not_expire() -> None:
    desk = Desk()
    desk.approval()
    desk.feed(CancelInteractions(session_id="s1", reason="the turn failed"))
    assert desk.approve("i1").settled() == [] and desk.advance(400).settled() == []
