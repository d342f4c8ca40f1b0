"""Plan mode decided on plain values: the model plans into its plan file, the plan goes to
review, and an approved plan is implemented in a new turn.

(The gatekeeper's refusing every write but the plan file and the files really written are
end to end in tests/integration/test_plan_mode.py; the other review answers are in
test_review.py; the coordinator's side of a review in tests/actors/chat/test_plan_reviews.py.)
"""

from __future__ import annotations

import json
from typing import Any

from tests.actors.session.driver import SID, Core, Fed
from tether.actors.modes import plan_file_for
from tether.actors.ports import ToolOutput
from tether.actors.session.effects import CallModel, RunTool
from tether.actors.session.inputs import ToolFinished
from tether.events.messages import (
    InteractionSettled,
    PlanReviewRequest,
    TextBlock,
    ToolProposal,
    ToolResultBlock,
    ToolUseBlock,
)
from tether.events.session import Session

PLAN_FILE = plan_file_for("/work/ws", SID)
LONG_PLAN = "1. write hello.txt with a friendly greeting\n2. read it back to check it"
"""A plan over 50 characters, so it is embedded in the implementation prompt."""


def events_named(core: Core, kind: type) -> list[Any]:
    return [e for e in core.log if isinstance(e, kind)]


def results(core: Core) -> list[ToolResultBlock]:
    return [b for t in core.session.history for b in t.content if isinstance(b, ToolResultBlock)]


def names(call: CallModel) -> set[str]:
    return {tool["name"] for tool in call.request.tools}


def write_plan(core: Core, call_id: str, content: str) -> Fed:
    """The model writes ``content`` to the plan file, which the gatekeeper allows: the
    shell runs it and says it wrote the plan file."""
    write = ToolUseBlock(id=call_id, name="write_file",
                         input={"path": PLAN_FILE, "content": content})
    core.call_tools(write)
    (run,) = core.verdict(write, writes=[PLAN_FILE]).of(RunTool)
    assert run.plan_file == PLAN_FILE
    return core.feed(ToolFinished(core.generation, call_id, "write_file", ToolOutput("ok"),
                                  wrote_plan=True))


def settle(core: Core, outcome: str) -> Fed:
    return core.feed(InteractionSettled(
        session_id=SID, call_id=core.state.turn.waiting_call, interaction_id="i1",
        kind="plan_review", outcome=outcome, by="alice"))  # type: ignore[arg-type]


def test_proceed_keeps_the_context_and_implements_in_auto_mode() -> None:
    core = Core()
    core.plan_text = LONG_PLAN  # what the shell reads from the plan file
    core.say("/plan")
    (first,) = core.say("add a greeting file").of(CallModel)
    assert "You are in plan mode" in first.request.system and PLAN_FILE in first.request.system
    assert names(first) >= {"ExitPlanMode", "AskUserQuestion"}

    greet = ToolUseBlock(id="w1", name="write_file",
                         input={"path": "/work/ws/hello.txt", "content": "hi"})
    (proposal,) = core.call_tools(greet).sent(ToolProposal)
    # What the gatekeeper needs to refuse every write but the plan file.
    assert (proposal.mode, proposal.plan_file) == ("plan", PLAN_FILE)
    core.verdict(greet, "deny", reason="plan mode: only the plan file may be written")
    refused = results(core)[0]
    assert refused.is_error and "plan mode: only the plan file" in refused.content
    write_plan(core, "w2", LONG_PLAN)

    core.stream([TextBlock("The plan is ready."),
                 ToolUseBlock(id="x1", name="ExitPlanMode", input={})], stop="tool_use")
    (shown,) = core.barrier().sent(PlanReviewRequest)
    assert "1. write hello.txt" in shown.plan
    proceeded = settle(core, "proceed")

    proposed = events_named(core, Session.PlanProposed)
    assert [(p.source, p.plan) for p in proposed] == [("file", LONG_PLAN)]
    assert [(r.choice, r.by) for r in events_named(core, Session.PlanReviewed)] == [
        ("proceed", "alice")]
    modes = [(m.mode, m.reason) for m in events_named(core, Session.ModeChanged)]
    assert modes == [("plan", "/plan"), ("auto", "plan approved by alice")]
    exit_result = next(r for r in results(core) if "approved the plan" in r.content)
    assert not exit_result.is_error

    (implementation,) = proceeded.of(CallModel)
    sent = json.dumps(implementation.request.messages)
    assert "plan below is approved" in sent
    assert "add a greeting file" in sent  # proceed keeps the context
    assert "1. write hello.txt" in sent  # the prompt carries the plan
    assert "plan mode" not in implementation.request.system
    assert "ExitPlanMode" not in names(implementation)
    assert core.session.mode == "auto"
    assert core.session.auto_approve == ["write_file", "edit_file"]


def test_a_plan_file_written_without_exit_plan_mode_waits_for_its_review() -> None:
    core = Core()
    core.plan_text = "1. greet"
    core.say("/plan")
    core.say("plan the greeting")
    write_plan(core, "w1", "1. greet")
    core.stream([TextBlock("I wrote the plan.")])
    (shown,) = core.barrier().sent(PlanReviewRequest)
    assert "1. greet" in shown.plan
    assert not events_named(core, Session.TurnCompleted)  # the turn waits for the review
    proceeded = settle(core, "proceed")
    assert [p.source for p in events_named(core, Session.PlanProposed)] == ["file"]
    assert [p.call_id for p in events_named(core, Session.PlanProposed)] == [""]
    # Seed 000: a plan of 50 characters or fewer is not embedded; the plain instruction.
    (implementation,) = proceeded.of(CallModel)
    asked = json.dumps(implementation.request.messages[-1])
    assert "The plan is approved. Implement it now." in asked and "<plan>" not in asked
