"""What the session asks its chat (through the interaction coordinator): approving an
escalated call, the model's question, and the plan review with its three answers."""

from __future__ import annotations

from typing import Any

from tether.actors import engine_tools
from tether.actors.runtime import AskResult
from tether.actors.session import endings, intake, tools
from tether.actors.session import turn as turns
from tether.actors.session.effects import Continue, ReadPlan
from tether.actors.session.inputs import PlanRead
from tether.actors.session.state import WAITING, Phase
from tether.actors.session.step import Step
from tether.events.messages import (
    ApprovalRequest,
    InteractionOpened,
    InteractionSettled,
    PlanReviewRequest,
    ToolUseBlock,
    Verdict,
)
from tether.projections.notices import full_input


def ask_approval(step: Step, call: ToolUseBlock, verdict: Verdict) -> None:
    """Tier 3: ask the session's chat; the answer comes back as InteractionSettled."""
    session = step.session
    step.turn.awaiting = verdict
    open_interaction(step, Phase.APPROVAL, call.id, ApprovalRequest(
        session_id=step.session_id, call_id=call.id, tool=call.name,
        summary=full_input(call.input), reason=verdict.reason, channel=session.channel,
        owner=session.owner, home_channel=session.home_channel))


def open_review(step: Step, call_id: str, *, is_call: bool) -> None:
    """Put the plan to the chat, once the plan file is read (:func:`on_plan_read`)."""
    turn = step.turn
    turn.plan.exited = True
    turn.review_is_call = is_call
    turn.waiting_call = call_id
    turn.phase = Phase.READING_PLAN
    step.effects.append(ReadPlan(step.plan_file()))


def on_plan_read(step: Step, read: PlanRead) -> None:
    """The plan goes to review: from the plan file, else what was written to it, else the
    streamed reply, else a fallback line."""
    turn, session = step.turn, step.session
    if turn.phase is not Phase.READING_PLAN:
        return
    call_id, plan_file = turn.waiting_call, step.plan_file()
    plan, source = engine_tools.resolve_plan(read.text, turn.plan.written,
                                             turn.plan.streamed)
    session.propose_plan(plan=plan, source=source,
                         call_id=call_id if turn.review_is_call else "", plan_file=plan_file)
    open_interaction(step, Phase.REVIEW, call_id, PlanReviewRequest(
        session_id=step.session_id, call_id=call_id, plan=plan, source=source,
        channel=session.channel, owner=session.owner, home_channel=session.home_channel))


def open_interaction(step: Step, phase: Phase, call_id: str, request: Any) -> None:
    """Wait in ``phase`` for the chat's answer about ``call_id``."""
    step.turn.phase = phase
    step.turn.waiting_call = call_id
    step.ask(step.subjects.interactions, request, InteractionOpened, tag=f"opened:{call_id}")


def on_opened(step: Step, call_id: str, result: AskResult) -> None:
    """The coordinator could not open the interaction: settled as cancelled."""
    turn = step.turn
    if result.error and turn.phase in WAITING and call_id == turn.waiting_call:
        kind = {Phase.APPROVAL: "approval", Phase.QUESTION: "question"}.get(
            turn.phase, "plan_review")
        on_settled(step, InteractionSettled(
            session_id=step.session_id, call_id=call_id, interaction_id="",
            kind=kind,  # type: ignore[arg-type]
            outcome="cancelled", by="tether", reason=f"nobody could be asked ({result.error})"))


def on_settled(step: Step, settled: InteractionSettled) -> None:
    """The chat answered (or the interaction ended without an answer)."""
    turn = step.turn
    if turn.phase not in WAITING or settled.call_id != turn.waiting_call:
        return  # an answer to something this session no longer waits on
    phase, turn.phase, turn.waiting_call = turn.phase, Phase.TOOLS, ""
    if phase is Phase.REVIEW:
        _on_review(step, settled)
        return
    call = turn.tool_queue[0]
    if phase is Phase.QUESTION:
        if settled.outcome == "answered":
            tools.finish_engine_call(step, call, f"The user answered: {settled.answer}", False)
        else:
            tools.finish_engine_call(step, call, f"No answer: {settled.reason}. Go on without "
                                                 "it, or ask again later.", True)
        return
    verdict = turn.awaiting
    approved = settled.outcome == "approved"
    step.session.decide_tool_call(
        call_id=call.id, decision="allow" if approved else "deny", reason=settled.reason,
        tier="human" if settled.by not in ("timeout", "tether") else f"approval-{settled.by}")
    if not approved or verdict is None:
        turn.awaiting = None
        tools.refuse(step, call, settled.reason)
        return
    step.effects.append(Continue("execute"))  # the person's answer is saved before the run


def _on_review(step: Step, settled: InteractionSettled) -> None:
    """Proceed (auto mode), clean proceed (and a fresh context), default (every
    escalation asked), or adjust (feedback: the model revises the plan)."""
    turn, session = step.turn, step.session
    choice = settled.outcome
    session.review_plan(choice=choice, feedback=settled.answer, by=settled.by)
    if choice not in ("proceed", "clean_proceed", "default", "adjust"):
        why = f"the plan review ended without an answer: {settled.reason}"
        endings.refuse_pending(step, why)
        endings.record_failure(step, why)
        return
    if turn.review_is_call:
        call = turn.tool_queue[0]
        output, is_error = engine_tools.plan_result(choice, settled.answer)
        if choice == "adjust":
            turn.plan.exited = False  # a revised plan is reviewed again
            tools.finish_engine_call(step, call, output, is_error)  # the model revises it
            return
        session.record_tool_result(call_id=call.id, tool=call.name, output=output,
                                   is_error=False)
        turn.tool_queue.popleft()
        endings.refuse_pending(step, "not run: the plan was approved, so implementation "
                               "starts with the next message")
    # Proceed, clean proceed, or feedback for a plan offered without ExitPlanMode: this
    # turn ends and the next starts with the implementation prompt (or the feedback).
    plan = session.plan
    user, channel = settled.by, session.channel
    endings.complete_turn(step, "plan_review", take_queued=False)
    if choice == "adjust":
        intake.receive(step, settled.answer or "Please revise the plan.", channel, user)
    elif choice == "default":  # implemented with every escalation asked
        session.change_mode(mode="default", auto_approve=[],
                            reason=f"plan approved by {user}, in the default mode")
        intake.receive(step, engine_tools.implementation_prompt(plan), channel, user)
    else:
        session.change_mode(mode="auto", auto_approve=step.config.auto_list("auto"),
                            reason=f"plan approved by {user}")
        if choice == "clean_proceed":
            session.clear_context()
        intake.receive(step, engine_tools.implementation_prompt(plan), channel, user)
    turns.begin_turn(step)
