"""Plan reviews decided by the coordinator's core: what the chat is shown, the choices,
free text as feedback, and that a review never times out.

(What the session does with the choice: tests/actors/session/test_plan_mode.py and
test_review.py.)
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.actors.chat.driver import OWNER, Desk
from tether.events.interactions import Interaction
from tether.events.messages import InteractionOpened


def test_a_plan_is_stored_and_shown_with_the_choices() -> None:
    desk = Desk()
    fed = desk.plan()
    (opened,) = fed.recorded(Interaction.Opened)
    assert (opened.kind, opened.tool, opened.text, opened.reason, opened.deadline) == (
        "plan_review", "ExitPlanMode", "1. write hello.txt", "file", "")
    assert fed.replies() == [InteractionOpened(interaction_id="i1", call_id="p1")]
    assert fed.told() == [("plan", (
        "plan i1 is ready for review:\n\n1. write hello.txt\n\nReply /proceed to implement "
        "it, /clean to implement it with a fresh context, /default to implement it with "
        "every escalated call asked, or /adjust (or any other text) with what to change."))]


@pytest.mark.parametrize(("choice", "feedback", "said"), [
    ("proceed", "", "proceed"),
    ("clean_proceed", "", "proceed with a fresh context"),
    ("default", "", "proceed in the default mode"),
    ("adjust", "greet in French", "adjust"),
])
def test_each_choice_settles_the_review(choice: Any, feedback: str, said: str) -> None:
    desk = Desk()
    desk.plan()
    fed = desk.choose(choice, feedback)
    (settled,) = fed.settled()
    assert (settled.kind, settled.call_id, settled.outcome, settled.answer, settled.by) == (
        "plan_review", "p1", choice, feedback, OWNER)
    assert settled.reason == f"{choice} chosen by ana"
    assert [(e.choice, e.feedback, e.by) for e in fed.recorded(Interaction.Chosen)] == [
        (choice, feedback, OWNER)]
    assert fed.told() == [("plan", f"plan i1: {said} (ana)")]


def test_free_text_is_feedback_even_ok() -> None:
    desk = Desk()
    desk.plan()
    (settled,) = desk.text("  ok ").settled()
    assert (settled.outcome, settled.answer) == ("adjust", "ok")


def test_a_choice_with_no_plan_waiting_is_told_and_settles_nothing() -> None:
    desk = Desk()
    desk.approval()
    fed = desk.choose("proceed")
    assert fed.told() == [("approval", "no plan is waiting for review")]
    assert fed.settled() == [] and desk.pending == ["i1"]


def test_an_approval_of_the_session_takes_text_before_its_plan() -> None:
    desk = Desk()
    desk.plan()
    desk.approval()
    (settled,) = desk.text("no").settled()
    assert settled.kind == "approval" and desk.pending == ["i1"]


def test_a_review_never_expires() -> None:
    desk = Desk()
    desk.plan()
    assert desk.advance(10 ** 7).settled() == [] and desk.pending == ["i1"]
