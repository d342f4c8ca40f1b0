"""The loop's context decided on plain values: the system prompt built from the workspace
texts the shell read, tools loaded on demand, skills, and model calls retried after a
transient error on the given clock.

(That the shell reads IDENTITY.md and the skills' files, and the provider's telling a
transient error from another, are tested end to end in
tests/integration/test_context_loop.py and in tests/adapters/test_anthropic_provider.py.)
"""

from __future__ import annotations

from typing import Any

from tests.actors.session.driver import Core
from tether.actors.model.prompt import Skill, WorkspaceTexts
from tether.actors.ports import TextDelta, ToolOutput
from tether.actors.session.effects import CallModel, ReadSkills
from tether.actors.session.inputs import (
    ModelDelta,
    ModelFailed,
    SessionTick,
    SkillsRead,
    ToolFinished,
)
from tether.events.messages import TextBlock, ToolUseBlock
from tether.events.session import Session

TEXTS = WorkspaceTexts(identity="You are Wren, a careful engineer.", skills=[
    Skill("deploy", "how this project ships", ".tether/skills/deploy/SKILL.md", 18)])


def names(call: CallModel) -> set[str]:
    return {tool["name"] for tool in call.request.tools}


def logged(core: Core, kind: type) -> list[Any]:
    return [e for e in core.log if isinstance(e, kind)]


def test_tools_load_on_demand_and_the_prompt_comes_from_the_workspace() -> None:
    core = Core(texts=TEXTS)
    requests = core.say("ship it").of(CallModel)
    first = requests[0].request
    assert "# Your Identity" in first.system and "You are Wren" in first.system
    assert "- deploy: how this project ships" in first.system
    assert names(requests[0]) == {"AskUserQuestion", "load_tools", "load_skills"}

    skills = ToolUseBlock(id="k1", name="load_skills", input={"names": ["deploy"]})
    (read,) = core.call_tools(skills).of(ReadSkills)
    assert (read.names, read.texts) == (["deploy"], TEXTS)
    requests += core.feed(SkillsRead("k1", "## deploy\n\nRun make release.")).of(CallModel)
    assert "Run make release." in str(requests[1].request.messages)  # the skill's body

    load = ToolUseBlock(id="t1", name="load_tools", input={"groups": ["files"]})
    requests += core.call_tools(load).of(CallModel)
    listing = ToolUseBlock(id="l1", name="list_dir", input={"path": "."})
    core.call_tools(listing)
    core.verdict(listing)
    requests += core.feed(ToolFinished(core.generation, "l1", "list_dir",
                                       ToolOutput("IDENTITY.md"))).of(CallModel)
    assert {"read_file", "write_file", "edit_file", "list_dir"} <= names(requests[3])
    assert "run_shell" not in names(requests[3])  # only what was asked for
    core.answer("Ready to ship.")

    again = core.say("again").of(CallModel)
    assert "list_dir" in names(again[-1])  # loaded for the rest of the session
    core.answer("Still here.")
    assert len(logged(core, Session.SystemPromptSet)) == 1  # recorded once: it did not change
    loaded = [(e.groups, e.reason) for e in logged(core, Session.ToolsLoaded)]
    assert loaded == [(["files"], "load_tools")]


def test_transient_provider_errors_are_retried_and_recorded_others_end_the_turn() -> None:
    core = Core()
    calls = core.say("are you busy").of(CallModel)

    def retries() -> list[tuple[int, float]]:
        return [(e.attempt, e.delay) for e in logged(core, Session.ProviderRetried)]

    core.feed(ModelFailed(core.generation, "model API error 529 (overloaded_error): Overloaded",
                          transient=True))
    assert retries() == [(1, 1.0)]
    calls += core.feed(SessionTick()).of(CallModel)  # a tick before the backoff has passed...
    assert len(calls) == 1  # ...sends nothing: the retry waits for the clock
    core.advance(1)
    calls += core.feed(SessionTick()).of(CallModel)
    core.feed(ModelFailed(core.generation, "model API error 429 (rate_limit_error): Slow down",
                          transient=True))
    assert retries() == [(1, 1.0), (2, 2.0)]
    core.advance(2)
    calls += core.feed(SessionTick()).of(CallModel)
    done = core.answer("Done at last.")
    assert done.recorded(Session.TurnCompleted)
    assert len(calls) == 3

    core.say("something broken")
    fed = core.feed(ModelFailed(core.generation,
                                "model API error 400 (invalid_request_error): Bad request"))
    (failed,) = fed.recorded(Session.TurnFailed)  # told as "the turn failed: ..."
    assert "model API error 400 (invalid_request_error): Bad request" in failed.error
    assert len(retries()) == 2  # a bad request is not retried


def test_an_overload_in_the_middle_of_a_stream_is_retried() -> None:
    """The API can answer 200 and then send an error event: an overload there is as
    transient as before the stream, so the session retries it and the turn goes on."""
    core = Core()
    calls = core.say("are you busy").of(CallModel)
    core.feed(ModelDelta(core.generation, TextDelta(0, "Starting to")))
    core.feed(ModelFailed(core.generation,
                          "model API error (overloaded_error, mid-stream): Overloaded",
                          transient=True))
    (retried,) = logged(core, Session.ProviderRetried)
    assert "overloaded_error" in retried.error and retried.delay == 1.0
    core.advance(1)
    calls += core.feed(SessionTick()).of(CallModel)
    assert core.answer("Done at last.").recorded(Session.TurnCompleted)
    assert len(calls) == 2
    assert core.session.history[-1].content == [TextBlock("Done at last.")]


def test_a_stream_cut_short_every_time_fails_the_turn_and_the_session_carries_on() -> None:
    """A stream that stops before message_stop is retried after 1, 2 and 4 s; when every
    attempt is cut short, the turn fails saying so, and the next message is served."""
    core = Core()
    cut = "the stream ended before message_stop"
    calls = core.say("please cut me short").of(CallModel)
    for attempt, delay in ((1, 1.0), (2, 2.0), (3, 4.0)):
        retried = core.feed(ModelFailed(core.generation, cut, transient=True))
        assert [(e.attempt, e.delay) for e in retried.recorded(Session.ProviderRetried)] == [
            (attempt, delay)]
        core.advance(delay)
        calls += core.feed(SessionTick()).of(CallModel)
    failed = core.feed(ModelFailed(core.generation, cut, transient=True))
    (turn_failed,) = failed.recorded(Session.TurnFailed)
    assert "ended before message_stop" in turn_failed.error
    assert turn_failed.error.endswith("(after 3 retries)")
    assert len(calls) == 4 and not failed.of(CallModel)
    assert "AssistantMessageAppended" not in [type(e).__name__ for e in core.log]
    assert core.session.status == "running"

    calls += core.say("please try again").of(CallModel)
    assert core.answer("This one is complete.").recorded(Session.TurnCompleted)
    assert len(calls) == 5 and core.session.turns == 2 and core.session.status == "running"
    assert core.session.history[-1].content == [TextBlock("This one is complete.")]
