"""A session's lifecycle as its core decides it, on plain values: how a turn's end leaves
it, what its budget refuses, what the clock does to it, and what /stop ends.

(Which sessions exist, their names, the active limit, a restart and a fork are the
manager's: tests/integration/test_lifecycle.py.)
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.actors.session.driver import Core, calls_model, eager, runs
from tether.actors.ports import TextDelta
from tether.actors.session import Phase, SessionConfig
from tether.actors.session.effects import CallModel
from tether.actors.session.inputs import ModelDelta, SessionTick
from tether.events.messages import (
    ChannelMessage,
    ErrorReply,
    TextBlock,
    ToolProposal,
    ToolUseBlock,
    Usage,
)
from tether.events.session import Session


def statuses(core: Core) -> list[tuple[str, str]]:
    return [(e.status, e.reason) for e in core.log if isinstance(e, Session.StatusChanged)]


def logged(core: Core, kind: type) -> list[Any]:
    return [e for e in core.log if isinstance(e, kind)]


def test_multi_turn_sessions_stay_running_and_wait_for_input() -> None:
    core = Core()
    core.say("hello there")
    core.answer("Hi.")
    assert core.session.status == "running" and core.session.waiting
    assert statuses(core) == [("running", "user message")]
    assert [e.reason for e in logged(core, Session.WaitingForInput)] == ["the turn is done"]

    single = Core(multi_turn=False)
    single.say("one thing only")
    single.answer("Done.")
    assert statuses(single) == [("running", "user message"), ("completed", "the turn is done")]


def test_going_over_the_budget_fails_the_session_and_says_so() -> None:
    core = Core(budget_usd=0.2)  # claude-sonnet-4-5: $3 in, $15 out per million tokens
    asked = core.say("an expensive question")
    core.stream([TextBlock("Reading."), ToolUseBlock(id="c1", name="list_dir", input={})],
                stop="tool_use", usage=Usage(input_tokens=100_000, output_tokens=1000))
    fed = core.barrier()
    (failed,) = fed.recorded(Session.TurnFailed)  # told as "the turn failed: ..."
    assert "budget exhausted" in failed.error and "$0.20" in failed.error
    assert core.session.status == "failed" and core.session.budget_exhausted
    # One model call, nothing more asked, no tool proposed or run.
    assert len(asked.of(CallModel) + fed.of(CallModel)) == 1
    assert not runs(fed) and not fed.sent(ToolProposal)
    refused = [e.reason for e in logged(core, Session.ToolCallRefused)]
    assert refused and "budget is spent" in refused[0]
    assert core.session.cost_usd == pytest.approx(0.315)  # the failed turn's cost counts
    again = core.say("one more")
    assert [e.error for e in again.sent(ErrorReply)] == ["budget_exhausted"]
    assert not calls_model(again)


def test_the_idle_timeout_kills_and_the_safety_net_signals_once() -> None:
    quiet = Core(SessionConfig(model="m", idle_timeout=600.0, safety_net=15.0))
    quiet.say("hello")
    quiet.answer("Hi.")
    quiet.advance(599)
    quiet.feed(SessionTick())
    assert "killed" not in [s for s, _ in statuses(quiet)]
    quiet.advance(20)
    quiet.feed(SessionTick())
    assert statuses(quiet)[-1] == ("killed", "idle for 10 minutes")  # "session killed: ..."
    assert quiet.phase is Phase.IDLE

    busy = eager(idle_timeout=600.0, safety_net=15.0)  # waits for an approval: no activity at all
    busy.say("publish it")
    push = ToolUseBlock(id="c1", name="run_shell", input={"command": "git push origin main"})
    busy.call_tools(push)
    busy.verdict(push, "escalate")
    assert busy.phase is Phase.APPROVAL

    def signals() -> list[str]:
        return [e.reason for e in logged(busy, Session.WaitingForInput)]

    busy.advance(20)
    busy.feed(SessionTick())
    assert signals() == ["nothing has happened for 15 s"]
    busy.advance(20)
    busy.feed(SessionTick())
    busy.advance(600)
    busy.feed(SessionTick())
    assert signals() == ["nothing has happened for 15 s"]  # once
    assert "killed" not in [s for s, _ in statuses(busy)]  # mid-turn: not idle


def test_stop_ends_the_running_turn_only() -> None:
    core = Core()
    core.say("tell me a long story")
    core.feed(ModelDelta(core.generation, TextDelta(0, "Once upon a time")))
    stopped = core.say("/stop")
    (failed,) = stopped.recorded(Session.TurnFailed)  # "the turn failed: stopped by alice"
    assert failed.error == "stopped by alice"
    assert core.session.status == "running" and core.session.waiting
    # The rest of the stopped stream (a tool call) arrives and is dropped.
    core.stream([TextBlock("Once upon a time there was a very long story."),
                 ToolUseBlock(id="c1", name="list_dir", input={"path": "."})], stop="tool_use")
    assert not logged(core, Session.ToolCallProposed)  # nothing of it was kept or run
    assert not logged(core, Session.AssistantMessageAppended)
    fed = core.say("now something short")
    (call,) = fed.of(CallModel)
    assert call.request.messages[-1]["content"][-1]["text"].endswith("now something short")
    core.answer("Short.")
    again = core.say("/stop")
    assert [m.text for m in again.sent(ChannelMessage)] == ["no turn is running"]
