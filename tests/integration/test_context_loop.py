"""The loop's context: the system prompt from the workspace, lazy tools, skills."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import Engine
from tests.helpers import say


def names(request: dict[str, Any]) -> set[str]:
    return {tool["name"] for tool in request["tools"]}


def test_tools_load_on_demand_and_the_prompt_comes_from_the_workspace(
    engine: Callable[..., Engine], workspace: Path, watch_channel: Callable[..., Any],
) -> None:
    (workspace / "IDENTITY.md").write_text("You are Wren, a careful engineer.\n")
    skill = workspace / ".tether" / "skills" / "deploy"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(
        "---\nname: deploy\ndescription: how this project ships\n---\nRun make release.\n")
    script = """
responses:
  - match: "ship it"
    blocks:
      - tool_use: {name: load_skills, input: {names: [deploy]}}
  - match: "make release"
    blocks:
      - tool_use: {name: load_tools, input: {groups: [files]}}
  - match: "loaded files"
    blocks:
      - tool_use: {name: list_dir, input: {path: "."}}
  - match: "IDENTITY.md"
    blocks: [{text: "Ready to ship."}]
  - match: "again"
    blocks: [{text: "Still here."}]
"""
    host, _, llm = engine(script)
    channel = watch_channel(host, "test")
    sid = say(host, "ship it")
    channel.wait_for("completed")

    first = llm.requests[0]
    assert "# Your Identity" in first["system"] and "You are Wren" in first["system"]
    assert "- deploy: how this project ships" in first["system"]
    assert names(first) == {"AskUserQuestion", "load_tools", "load_skills"}
    assert "Run make release." in str(llm.requests[1]["messages"])  # the skill's body
    assert {"read_file", "write_file", "edit_file", "list_dir"} <= names(llm.requests[3])
    assert "run_shell" not in names(llm.requests[3])  # only what was asked for

    say(host, "again", sid)
    channel.wait_for("completed")
    assert "list_dir" in names(llm.requests[-1])  # loaded for the rest of the session
    events = [type(e).__name__ for e in host.app.session_events(sid)]
    assert events.count("SystemPromptSet") == 1  # recorded once: it did not change
    loaded = [(e.groups, e.reason) for e in host.app.session_events(sid)
              if type(e).__name__ == "ToolsLoaded"]
    assert loaded == [(["files"], "load_tools")]


def test_transient_provider_errors_are_retried_and_recorded_others_end_the_turn(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any],
) -> None:
    from tether.actors.runtime import Tick

    host, clock, llm = engine("""
responses:
  - match: "busy"
    error: {status: 529, type: overloaded_error, message: "Overloaded"}
  - match: "busy"
    error: {status: 429, type: rate_limit_error, message: "Slow down"}
  - match: "busy"
    blocks: [{text: "Done at last."}]
  - match: "broken"
    error: {status: 400, type: invalid_request_error, message: "Bad request"}
""")
    channel = watch_channel(host, "test")
    sid = say(host, "are you busy")

    def retries() -> list[tuple[int, float]]:
        return [(e.attempt, e.delay) for e in host.app.session_events(sid)
                if type(e).__name__ == "ProviderRetried"]

    from tests.helpers import wait_until

    wait_until(lambda: retries() == [(1, 1.0)], "the first retry")
    host.manager.ref.ask(Tick(), timeout=10)  # a tick before the backoff has passed...
    assert len(llm.requests) == 1  # ...sends nothing: the retry waits for the clock
    clock.advance(1)
    host.manager.ref.ask(Tick(), timeout=10)
    wait_until(lambda: retries() == [(1, 1.0), (2, 2.0)], "the second retry")
    clock.advance(2)
    host.manager.ref.ask(Tick(), timeout=10)
    channel.wait_for("completed")
    assert len(llm.requests) == 3

    say(host, "something broken", sid)
    failed = channel.wait_for("failed").text
    assert "model API error 400 (invalid_request_error): Bad request" in failed
    assert len(retries()) == 2  # a bad request is not retried


def test_an_overload_in_the_middle_of_a_stream_is_retried(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any],
) -> None:
    """The API can answer 200 and then send an error event: an overload there is as
    transient as before the stream, so the session retries it and the turn goes on."""
    from tests.helpers import wait_until
    from tether.actors.runtime import Tick

    host, clock, llm = engine("""
responses:
  - match: "busy"
    blocks: [{text: "Starting to"}]
    stream_error: {type: overloaded_error, message: "Overloaded"}
  - match: "busy"
    blocks: [{text: "Done at last."}]
""")
    channel = watch_channel(host, "test")
    sid = say(host, "are you busy")
    wait_until(lambda: any(type(e).__name__ == "ProviderRetried"
                           for e in host.app.session_events(sid)), "the retry")
    retried = next(e for e in host.app.session_events(sid)
                   if type(e).__name__ == "ProviderRetried")
    assert "overloaded_error" in retried.error and retried.delay == 1.0
    clock.advance(1)
    host.manager.ref.ask(Tick(), timeout=10)
    channel.wait_for("completed")
    assert len(llm.requests) == 2
    session = host.app.session(sid)
    assert session is not None and [b.text for b in session.history[-1].content] == [  # type: ignore[union-attr]
        "Done at last."]


def test_current_date_tells_the_engine_clock(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any],
) -> None:
    """The time tool answers from the engine's (injected) clock, as every timer does, so
    a replayed or tested session sees one time."""
    import datetime as dt

    from tether.actors.ports import ManualClock

    clock = ManualClock(dt.datetime(2031, 7, 4, 9, 30, tzinfo=dt.UTC))
    host, _, llm = engine("""
responses:
  - match: "what day"
    blocks: [{tool_use: {name: current_date, input: {}}}]
  - match: "2031"
    blocks: [{text: "It is the fourth of July."}]
""", clock=clock)
    channel = watch_channel(host, "test")
    sid = say(host, "what day is it")
    channel.wait_for("completed")
    executed = [e for e in host.app.session_events(sid)
                if type(e).__name__ == "ToolCallExecuted"]
    assert len(executed) == 1 and "2031-07-04" in executed[0].output
    assert len(llm.requests) == 2
