"""The loop's context end to end: the workspace's files reach the model, and tools run on
the engine's clock. What the session decides of them (lazy tools, retries after a
transient error) is tested on plain values in tests/actors/session/test_context.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import Engine
from tests.helpers import say


def test_the_prompt_and_the_skills_come_from_the_workspace_files(
    engine: Callable[..., Engine], workspace: Path, watch_channel: Callable[..., Any],
) -> None:
    """The shell reads the workspace's files for the turn and a skill's body when asked;
    what the core makes of them (lazy tools, the prompt recorded once) is tested on plain
    values in tests/actors/session/test_context.py."""
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
    blocks: [{text: "Ready to ship."}]
"""
    host, _, llm = engine(script)
    channel = watch_channel(host, "test")
    say(host, "ship it")
    channel.wait_for("completed")

    first = llm.requests[0]
    assert "# Your Identity" in first["system"] and "You are Wren" in first["system"]
    assert "- deploy: how this project ships" in first["system"]
    assert "Run make release." in str(llm.requests[1]["messages"])  # the skill's body


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
