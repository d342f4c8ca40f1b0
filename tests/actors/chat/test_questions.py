"""Questions of the model (AskUserQuestion) decided by the coordinator's core: what the
chat is asked, which text answers it, and which text goes to an approval first.

(What the session does with the answer: tests/actors/session/test_questions.py.)
"""

from __future__ import annotations

from tests.actors.chat.driver import CHAT, OWNER, SID, Desk
from tether.events.interactions import Interaction
from tether.events.messages import InteractionOpened


def test_a_question_is_stored_and_put_to_the_chat_with_its_options() -> None:
    desk = Desk()
    fed = desk.question()
    (opened,) = fed.recorded(Interaction.Opened)
    assert (opened.kind, opened.tool, opened.text, opened.summary, opened.call_id) == (
        "question", "AskUserQuestion", "Which colour?", "Which colour?", "q1")
    assert fed.replies() == [InteractionOpened(interaction_id="i1", call_id="q1")]
    assert fed.told() == [("question", "question i1: Which colour?\n  - blue\n  - red\n"
                                       "Reply with your answer (no answer in 300 s counts "
                                       "as none).")]


def test_text_answers_the_question() -> None:
    desk = Desk()
    desk.question()
    fed = desk.text("blue, please")
    (settled,) = fed.settled()
    assert (settled.kind, settled.call_id, settled.outcome, settled.by, settled.answer) == (
        "question", "q1", "answered", OWNER, "blue, please")
    assert settled.reason == "answered by ana"
    assert [(e.answer, e.by) for e in fed.recorded(Interaction.Replied)] == [
        ("blue, please", OWNER)]
    assert fed.told() == [("question", "question i1: answered by ana")]
    assert desk.pending == []


def test_text_goes_to_the_chats_approval_before_its_question() -> None:
    """Two sessions in one chat: the text sent to the asking session denies the other's
    approval; the question waits for the next text."""
    desk = Desk()
    desk.question(sid="asking")
    desk.approval(sid="publishing")
    fed = desk.text("not today", sid="asking")
    assert [(s.session_id, s.outcome, s.reason) for s in fed.settled()] == [
        ("publishing", "denied", "denied by ana: not today")]
    assert desk.pending == ["i1"]
    (answered,) = desk.text("green", sid="asking").settled()
    assert (answered.session_id, answered.answer) == ("asking", "green")


def test_a_question_comes_before_a_plan_review_then_age_decides() -> None:
    desk = Desk()
    desk.plan(sid="planning")
    desk.question(sid="first")
    desk.question(sid="second")
    settled = [desk.text(t).settled()[0] for t in ("a", "b", "c")]
    assert [(s.session_id, s.kind) for s in settled] == [
        ("first", "question"), ("second", "question"), ("planning", "plan_review")]


def test_text_from_another_chat_answers_the_sending_sessions_own() -> None:
    desk = Desk()
    desk.question(channel="ops")
    (settled,) = desk.text("red", channel=CHAT).settled()
    assert (settled.session_id, settled.answer) == (SID, "red")


def test_text_the_chat_s_other_session_cannot_take_goes_to_the_senders() -> None:
    """The chat's first pending interaction belongs to someone bo may not answer for; his
    own session's question takes his text."""
    desk = Desk()
    desk.approval(sid="anas")
    desk.question(sid="bos", owner="bo")
    fed = desk.text("blue", user="bo", sid="bos")
    assert [(s.session_id, s.answer) for s in fed.settled()] == [("bos", "blue")]
    assert fed.refusals() == [] and desk.pending == ["i1"]


def test_text_with_nothing_waiting_is_sent_back() -> None:
    desk = Desk()
    fed = desk.text("blue", channel="ops")
    assert fed.told("ops") == [("error", "nothing was waiting for an answer any more, so "
                                         "your message was not used; send it again")]
    assert fed.events == [] and fed.settled() == []
