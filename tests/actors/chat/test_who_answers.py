"""Who may answer, decided by the coordinator's core: the session's owner and the
approvers named for its home channel. Anyone else's answer is refused, recorded as a
RefusedMessage and told to the chat it came from; what was asked stays pending.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.actors.chat.driver import CHAT, Desk, Fed
from tether.events.interactions import Interaction
from tether.events.messages import InteractionAnswer

RULE = "only its owner and the approvers the settings name for its home channel may"


def refused(fed: Fed, channel: str, what: str, excerpt: str) -> None:
    """``fed`` refused bo: recorded, told to ``channel``, nothing settled."""
    reason = f"bo may not {what} session s1: {RULE}"
    assert [(r.channel, r.user, r.kind, r.reason, r.excerpt, r.size)
            for r in fed.refusals()] == [
        (channel, "bo", "not_approver", reason, excerpt, len(excerpt.encode()))]
    assert fed.told(channel) == [("error", reason)]
    assert fed.settled() == [] and fed.recorded(Interaction.Event) == []


def test_only_the_owner_or_a_named_approver_decides() -> None:
    desk = Desk(approvers={CHAT: ["carol"], "bo-chat": ["bo"]})
    desk.approval()
    # bo approves for bo-chat, not for the home chat of ana's session.
    refused(desk.approve("i1", user="bo", channel="bo-chat"), "bo-chat",
            "approve or deny the calls of", "/approve i1")
    refused(desk.deny("i1 never", user="bo", channel="bo-chat"), "bo-chat",
            "approve or deny the calls of", "/deny i1 never")
    refused(desk.text("no, never", user="bo", channel="bo-chat"), "bo-chat",
            "answer the approvals of", "no, never")
    assert desk.pending == ["i1"] and desk.outcome("i1") == "pending"
    (settled,) = desk.approve("i1", user="carol").settled()
    assert (settled.outcome, settled.reason) == ("approved", "approved by carol: approved")


def test_approvers_count_for_the_sessions_home_channel_not_the_chat_it_asks_in() -> None:
    """ana's session started on "test" and now asks in "ops"; bo approves for "ops"."""
    desk = Desk(approvers={"ops": ["bo"]})
    desk.approval(channel="ops", home=CHAT)
    refused(desk.text("no, by bo", user="bo", channel="ops"), "ops",
            "answer the approvals of", "no, by bo")
    plan = desk.choose("proceed", user="bo", channel="ops")  # no plan waits: told so
    assert plan.told("ops") == [("approval", "no plan is waiting for review")]
    assert plan.events == [] and plan.settled() == []
    refused(desk.approve("i1", user="bo", channel="ops"), "ops",
            "approve or deny the calls of", "/approve i1")
    assert desk.approve("i1", channel="ops").settled()[0].by == "ana"


def test_without_a_home_channel_the_chat_asked_in_is_home() -> None:
    desk = Desk(approvers={"ops": ["bo"]})
    desk.approval(channel="ops")
    assert desk.approve("i1", user="bo", channel="ops").settled()[0].by == "bo"


def test_approvers_of_every_chat_may_decide_anywhere() -> None:
    desk = Desk(approvers={"*": ["root"]})
    desk.question()
    assert desk.text("red", user="root").settled()[0].by == "root"


@pytest.mark.parametrize("user", ["", "bo"])
def test_no_one_else_may_decide_not_even_a_nameless_sender(user: str) -> None:
    desk = Desk()
    desk.approval()
    fed = desk.approve("i1", user=user)
    assert fed.settled() == [] and len(fed.refusals()) == 1 and desk.pending == ["i1"]


@pytest.mark.parametrize(("ask", "what"), [
    ("question", "answer the questions of"),
    ("plan", "review the plans of"),
])
def test_text_refused_says_what_it_tried(ask: str, what: str) -> None:
    desk = Desk()
    getattr(desk, ask)()
    refused(desk.text("blue", user="bo"), CHAT, what, "blue")
    assert desk.pending == ["i1"]


def test_a_plan_choice_refused_keeps_its_feedback_in_the_record() -> None:
    desk = Desk()
    desk.plan()
    refused(desk.choose("adjust", "do less", user="bo"), CHAT, "review the plans of",
            "/adjust do less")
    refused(desk.choose("proceed", user="bo"), CHAT, "review the plans of", "/proceed")


def test_an_answer_from_no_chat_is_recorded_against_the_asking_chat_and_told_nowhere(
) -> None:
    """An answer published straight to the coordinator, naming no chat."""
    desk = Desk()
    desk.approval()
    fed: Any = desk.feed(InteractionAnswer(session_id="s1", approved=True, user="bo",
                                           interaction_id="i1"))
    assert [(r.channel, r.user) for r in fed.refusals()] == [(CHAT, "bo")]
    assert fed.effects == [] and desk.pending == ["i1"]
