"""What the session asks its chat, decided on plain values: the model's question, and
the plan review with its answers (seed 000)."""

from __future__ import annotations

import json

from tests.actors.session.driver import SID, Core, Fed, eager
from tether.actors.modes import plan_file_for
from tether.actors.ports import ToolOutput
from tether.actors.session import Phase, SessionConfig
from tether.actors.session.effects import CallModel, ReadPlan, RunTool
from tether.actors.session.inputs import ToolFinished
from tether.events.messages import (
    CancelInteractions,
    ChannelMessage,
    ChatText,
    InteractionSettled,
    KillSession,
    PlanAnswer,
    PlanReviewRequest,
    QuestionRequest,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from tether.events.session import Session

PLAN = "1. Read the parser.\n2. Split the lexer out of it.\n3. Run the tests after each step."


def exit_plan_mode(call_id: str = "x1") -> ToolUseBlock:
    return ToolUseBlock(id=call_id, name="ExitPlanMode", input={})


def planning(core: Core) -> None:
    core.say("/plan")
    core.say("plan the refactor")


def settle(core: Core, outcome: str, answer: str = "") -> Fed:
    return core.feed(InteractionSettled(
        session_id="s1", call_id=core.state.turn.waiting_call, interaction_id="i1",
        kind="plan_review", outcome=outcome, by="alice", answer=answer))  # type: ignore[arg-type]


def test_exit_plan_mode_reads_the_plan_file_and_puts_it_to_review() -> None:
    core = Core()
    core.plan_text = PLAN
    planning(core)
    fed = core.call_tools(exit_plan_mode())
    assert [r.path for r in fed.of(ReadPlan)] == [plan_file_for("/work/ws", SID)]
    (request,) = fed.sent(PlanReviewRequest)
    assert (request.plan, request.source) == (PLAN, "file")
    assert fed.recorded(Session.PlanProposed) and core.phase is Phase.REVIEW


def test_without_a_plan_file_the_streamed_reply_is_the_plan() -> None:
    core = Core()
    planning(core)
    core.stream([TextBlock(PLAN), exit_plan_mode()], stop="tool_use")
    fed = core.barrier()
    (request,) = fed.sent(PlanReviewRequest)
    assert (request.plan, request.source) == (PLAN, "streamed")


def test_proceed_switches_to_auto_and_starts_the_implementation_turn() -> None:
    core = Core()
    core.plan_text = PLAN
    planning(core)
    core.call_tools(exit_plan_mode())
    fed = settle(core, "proceed")
    assert core.session.mode == "auto"
    assert fed.recorded(Session.PlanReviewed) and fed.recorded(Session.TurnCompleted)
    (call,) = fed.of(CallModel)
    assert "<plan>" in call.request.messages[-1]["content"][-1]["text"]


def test_default_implements_in_the_default_mode() -> None:
    core = Core()
    core.plan_text = PLAN
    planning(core)
    core.call_tools(exit_plan_mode())
    settle(core, "default")
    assert core.session.mode == "default" and core.session.auto_approve == []


def test_adjust_sends_the_feedback_to_the_model_as_the_call_s_result() -> None:
    core = Core()
    core.plan_text = PLAN
    planning(core)
    core.call_tools(exit_plan_mode())
    fed = settle(core, "adjust", "also update the docs")
    assert core.session.mode == "plan" and fed.of(CallModel)
    result = [b for b in core.session.history[-1].content if isinstance(b, ToolResultBlock)]
    assert "also update the docs" in result[0].content


def test_a_review_that_expired_fails_the_turn() -> None:
    core = Core()
    core.plan_text = PLAN
    planning(core)
    core.call_tools(exit_plan_mode())
    fed = settle(core, "expired")
    assert fed.recorded(Session.TurnFailed) and core.phase is Phase.IDLE


def test_a_question_is_asked_and_the_answer_becomes_the_result() -> None:
    core = Core(SessionConfig(model="m"))
    core.say("go")
    call = ToolUseBlock(id="q1", name="AskUserQuestion",
                        input={"question": "Which branch?", "options": ["main", "dev"]})
    fed = core.call_tools(call)
    (asked,) = fed.sent(QuestionRequest)
    assert asked.question == "Which branch?" and core.phase is Phase.QUESTION
    answered = core.feed(InteractionSettled(session_id="s1", call_id="q1", interaction_id="i",
                                            kind="question", outcome="answered", by="alice",
                                            answer="dev"))
    result = [b for b in core.session.history[-1].content if isinstance(b, ToolResultBlock)]
    assert result[0].content == "The user answered: dev" and answered.of(CallModel)


def test_a_plan_file_written_without_exit_plan_mode_is_reviewed_anyway() -> None:
    core = eager()
    planning(core)
    plan_file = plan_file_for("/work/ws", SID)
    write = ToolUseBlock(id="w1", name="write_file", input={"path": plan_file, "content": PLAN})
    core.call_tools(write)
    (run,) = core.verdict(write, writes=[plan_file]).of(RunTool)
    assert run.plan_file == plan_file  # the shell says whether the run writes it
    core.feed(ToolFinished(core.generation, "w1", "write_file", ToolOutput("ok"),
                           wrote_plan=True))
    core.stream([TextBlock("The plan is written.")])
    fed = core.barrier()  # no ExitPlanMode: the turn would end, but the plan is reviewed
    (request,) = fed.sent(PlanReviewRequest)
    assert request.plan == PLAN and core.phase is Phase.REVIEW


def test_exit_plan_mode_outside_plan_mode_is_refused_and_review_answers_need_a_plan() -> None:
    core = Core()
    core.say("go")
    fed = core.call_tools(exit_plan_mode())
    (result,) = [b for b in core.session.history[-1].content
                 if isinstance(b, ToolResultBlock)]
    assert result.is_error and "not in plan mode" in result.content
    assert not fed.sent(PlanReviewRequest)
    core.answer("ok")
    answered = core.say("/proceed")
    assert [m.text for m in answered.sent(ChannelMessage)] == ["no plan is waiting for review"]


def test_a_kill_cancels_a_pending_plan_review() -> None:
    core = Core()
    core.plan_text = PLAN
    planning(core)
    core.call_tools(exit_plan_mode())
    fed = core.feed(KillSession(session_id=SID, reason="enough"))
    (cancel,) = fed.sent(CancelInteractions)
    assert cancel.reason == "enough" and core.phase is Phase.IDLE
    exit_call = [b for b in core.session.history[-1].content
                 if isinstance(b, ToolResultBlock)][-1]
    assert exit_call.is_error and "killed" in exit_call.content


def test_clean_proceed_implements_with_a_fresh_context() -> None:
    core = Core()
    core.plan_text = PLAN
    planning(core)
    core.call_tools(exit_plan_mode())
    fed = settle(core, "clean_proceed")
    assert fed.recorded(Session.ContextCleared) and core.session.mode == "auto"
    (call,) = fed.of(CallModel)
    assert len(call.request.messages) == 1  # the implementation prompt alone
    assert "<plan>" in call.request.messages[0]["content"][-1]["text"]


def test_without_a_file_or_text_the_fallback_line_is_reviewed() -> None:
    core = Core()
    planning(core)
    fed = core.call_tools(exit_plan_mode())
    (request,) = fed.sent(PlanReviewRequest)
    assert request.source == "fallback" and "no plan text was found" in request.plan


def test_text_during_a_review_is_feedback_and_default_implements_asking_every_escalation() -> None:
    """Seed 000: what the chat types during a review goes to the coordinator (never to the
    model), even "ok", which sends the plan back; /default is the third choice. (That the
    coordinator makes any text feedback: tests/actors/chat/test_plan_reviews.py.)"""
    core = Core()
    core.plan_text = PLAN
    planning(core)
    core.call_tools(exit_plan_mode())
    typed = core.say("ok")
    assert [m.text for m in typed.sent(ChatText)] == ["ok"]
    assert typed.events == [] and not typed.of(CallModel)
    sent_back = settle(core, "adjust", "ok")
    assert [(r.choice, r.feedback) for r in sent_back.recorded(Session.PlanReviewed)] == [
        ("adjust", "ok")]
    core.call_tools(exit_plan_mode("x2"))  # the model offers the plan again
    assert core.phase is Phase.REVIEW

    (answer,) = core.say("/default").sent(PlanAnswer)
    assert (answer.choice, answer.user) == ("default", "alice")
    implemented = settle(core, "default")
    modes = [(m.mode, m.auto_approve) for m in implemented.recorded(Session.ModeChanged)]
    assert modes == [("default", [])]
    (call,) = implemented.of(CallModel)
    assert "plan below is approved" in json.dumps(call.request.messages)
    texts = [e.text for e in core.log if isinstance(e, Session.UserMessageReceived)]
    assert texts[0] == "plan the refactor" and len(texts) == 2  # and the implementation's
    assert "ok" not in texts and "/default" not in texts  # neither answer went to the model
