"""The tool loop decided on plain values: each call goes to the gatekeeper, runs only when
allowed (and still the call judged), gets a result either way, and the loop goes on."""

from __future__ import annotations

import math

from tests.actors.session.driver import Core, approved_run, calls_model, eager, read_call, runs
from tether.actors.ports import ToolOutput
from tether.actors.runtime import AskResult
from tether.actors.session import Phase
from tether.actors.session.effects import CallModel, RunTool
from tether.actors.session.inputs import ToolFinished
from tether.events.messages import (
    ApprovalRequest,
    InteractionSettled,
    ToolProposal,
    ToolResultBlock,
    ToolUseBlock,
)
from tether.events.session import Session


def results(core: Core) -> list[ToolResultBlock]:
    return [b for b in core.session.history[-1].content if isinstance(b, ToolResultBlock)]


def test_a_call_is_proposed_run_when_allowed_and_its_result_sent_back() -> None:
    core = eager()
    core.say("read my notes")
    call = read_call()
    fed = core.call_tools(call)
    assert [p.tool for p in fed.sent(ToolProposal)] == ["read_file"]
    assert "ToolCallProposed" in fed.names() and not runs(fed)
    allowed = core.verdict(call)
    assert allowed.names() == ["ToolCallDecided", "ToolCallStarted"]
    assert [r.call.id for r in runs(allowed)] == ["c1"] and core.phase is Phase.EXECUTING
    done = core.feed(ToolFinished(core.generation, "c1", "read_file", ToolOutput("notes")))
    assert done.names()[0] == "ToolCallExecuted"
    assert results(core) == [ToolResultBlock("c1", "notes")]
    assert calls_model(done)  # the loop goes on with the result


def test_a_denied_call_is_refused_and_the_next_one_proposed() -> None:
    core = eager()
    core.say("go")
    first, second = read_call("c1", "a"), read_call("c2", "b")
    core.call_tools(first, second)
    fed = core.verdict(first, "deny", reason="outside the workspace")
    assert "ToolCallRefused" in fed.names() and not runs(fed)
    assert [p.call_id for p in fed.sent(ToolProposal)] == ["c2"]


def test_no_verdict_in_time_is_a_denial() -> None:
    core = eager()
    core.say("go")
    core.call_tools(read_call())
    fed = core.feed(AskResult("verdict:c1", error="timeout"))
    assert not runs(fed)
    assert "the gatekeeper did not answer (timeout)" in results(core)[0].content


def test_a_call_changed_after_it_was_judged_never_runs() -> None:
    core = eager()
    core.say("go")
    call = read_call()
    core.call_tools(call)
    judged_other = core.verdict(ToolUseBlock(id="c1", name="read_file",
                                             input={"path": "/etc/shadow"}))
    assert not runs(judged_other)
    assert "action hash mismatch" in results(core)[0].content


def test_an_input_that_is_not_json_is_denied_without_asking() -> None:
    core = eager()
    core.say("go")
    fed = core.call_tools(ToolUseBlock(id="c1", name="read_file", input={"n": math.nan}))
    assert not fed.sent(ToolProposal) and not runs(fed)
    assert "not valid JSON" in results(core)[0].content


def test_an_escalation_asks_the_chat_and_runs_only_once_approved() -> None:
    core = eager()
    core.say("go")
    call = read_call()
    core.call_tools(call)
    asked = core.verdict(call, "escalate", reason="outside the usual")
    assert [r.call_id for r in asked.sent(ApprovalRequest)] == ["c1"]
    assert core.phase is Phase.APPROVAL and not runs(asked)
    approved = core.feed(InteractionSettled(session_id="s1", call_id="c1", interaction_id="i1",
                                            kind="approval", outcome="approved", by="alice"))
    assert [r.call.id for r in runs(approved)] == ["c1"]
    (decided,) = approved.recorded(Session.ToolCallDecided)
    assert (decided.decision, decided.tier) == ("allow", "human")


def test_a_denied_approval_refuses_the_call() -> None:
    core = eager()
    core.say("go")
    call = read_call()
    core.call_tools(call)
    core.verdict(call, "escalate")
    denied = core.feed(InteractionSettled(session_id="s1", call_id="c1", interaction_id="i1",
                                          kind="approval", outcome="denied", by="alice",
                                          reason="no"))
    assert not runs(denied) and results(core)[0].content.endswith("no")


def test_an_answer_for_another_call_is_ignored() -> None:
    core = eager()
    core.say("go")
    call = read_call()
    core.call_tools(call)
    core.verdict(call, "escalate")
    stray = core.feed(InteractionSettled(session_id="s1", call_id="other", interaction_id="i",
                                         kind="approval", outcome="approved", by="alice"))
    assert stray.events == [] and stray.effects == [] and core.phase is Phase.APPROVAL


def test_the_round_limit_ends_the_turn() -> None:
    core = eager(round_limit=1)
    call = read_call()
    approved_run(core, call)
    fed = core.feed(ToolFinished(core.generation, "c1", "read_file", ToolOutput("x")))
    assert not fed.of(CallModel)
    assert core.session.history and "TurnCompleted" in fed.names()
    assert core.phase is Phase.IDLE


def test_a_stale_result_is_dropped() -> None:
    core = eager()
    call = read_call()
    approved_run(core, call)
    stale = core.feed(ToolFinished(core.generation - 1, "c1", "read_file", ToolOutput("x")))
    assert stale.events == [] and core.phase is Phase.EXECUTING


def test_a_lazy_tool_used_by_name_loads_its_group() -> None:
    core = Core()
    core.say("go")
    fed = core.call_tools(read_call())
    (loaded,) = fed.recorded(Session.ToolsLoaded)
    assert (loaded.groups, loaded.reason) == (["files"], "read_file was used")
    assert "files" in core.session.loaded_groups


def test_ran_calls_carry_the_grant_the_verdict_gave() -> None:
    core = eager()
    core.say("go")
    call = ToolUseBlock(id="c1", name="write_file", input={"path": "a.txt", "content": "x"})
    core.call_tools(call)
    fed = core.verdict(call, writes=["/work/ws/a.txt"], network=False)
    (run,) = fed.of(RunTool)
    assert run.grant.writes == ("/work/ws/a.txt",) and not run.grant.network
    assert run.workspace == "/work/ws"


def test_auto_mode_says_the_mode_approves_its_tools_and_only_those() -> None:
    """The gatekeeper approves an escalation in auto mode only when the proposal says the
    session's mode covers the tool: /edit's list (write and edit), not the shell, and no
    tool once the session is back in the default mode. (The gatekeeper's side, and that
    protection's tiers are never auto-approved: tests/integration/test_modes.py.)"""
    core = eager()
    core.say("/edit")
    core.say("write the notes, then list them")
    write = ToolUseBlock(id="w1", name="write_file", input={"path": "notes.txt", "content": "b"})
    shell = ToolUseBlock(id="s1", name="run_shell", input={"command": "ls"})
    (first,) = core.call_tools(write, shell).sent(ToolProposal)
    assert (first.call_id, first.mode, first.auto_approve) == ("w1", "auto", True)
    core.verdict(write, tier="auto")
    ran = core.feed(ToolFinished(core.generation, "w1", "write_file", ToolOutput("wrote")))
    (second,) = ran.sent(ToolProposal)
    assert (second.call_id, second.mode, second.auto_approve) == ("s1", "auto", False)
    core.verdict(shell)
    core.feed(ToolFinished(core.generation, "s1", "run_shell", ToolOutput("notes.txt")))
    core.answer("Written.")

    core.say("/default")
    core.say("write them again")
    rewrite = ToolUseBlock(id="w2", name="write_file", input=write.input)
    (again,) = core.call_tools(rewrite).sent(ToolProposal)
    assert (again.mode, again.auto_approve) == ("default", False)


KEY = "sk-ant-api03-" + "Q" * 40


def test_a_secret_in_a_tool_s_output_is_masked_before_it_is_kept_or_sent() -> None:
    core = eager()
    approved_run(core, read_call(path="settings.env"))
    fed = core.feed(ToolFinished(core.generation, "c1", "read_file",
                                 ToolOutput(f"ANTHROPIC_API_KEY={KEY}\nMODE=dev\n")))
    (executed,) = fed.recorded(Session.ToolCallExecuted)
    assert KEY not in executed.output and "[REDACTED]" in executed.output
    assert "MODE=dev" in executed.output  # the rest of the file is kept
    (call,) = fed.of(CallModel)
    assert KEY not in str(call.request.messages)  # the model only sees the masked output
    assert "MODE=dev" in str(call.request.messages)
