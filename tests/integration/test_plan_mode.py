"""Plan mode: the model plans into its plan file, the chat reviews, the session implements.

Each test drives a real engine (NATS, the store, the gatekeeper, the coordinator) with the
local model server; session ids are sequential so the scripts can name the plan file. What
the session decides (the prompt and tools while planning, the review opened, what an
answer does, the implementation's request) is tested on plain values in
tests/actors/session/test_plan_mode.py and test_review.py; what the coordinator makes of an
answer (free text is feedback, the choices) in tests/actors/chat/test_plan_reviews.py.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Engine
from tests.helpers import say
from tether.actors.ports import SequentialIds
from tether.adapters.host import Host
from tether.events.messages import ToolResultBlock

SID = "s1"
LONG_PLAN = "1. write hello.txt with a friendly greeting\\n2. read it back to check it"
"""A plan over 50 characters (so it is embedded in the implementation prompt), as YAML
writes it in the script."""


@pytest.fixture
def engine(engine: Callable[..., Engine]) -> Callable[..., Engine]:
    """The shared engine, with sequential ids so the scripts can name the plan file."""
    return lambda *args, **kwargs: engine(*args, ids=SequentialIds(), **kwargs)


def plan_file(workspace: Path) -> Path:
    return workspace / ".tether" / "plans" / f"{SID}.md"


def results(host: Host, sid: str = SID) -> list[ToolResultBlock]:
    """Every tool result the session recorded, in order (executed or refused)."""
    session = host.app.session(sid)
    assert session is not None
    return [b for e in host.app.session_events(sid)
            if type(e).__name__ in ("ToolCallExecuted", "ToolCallRefused")
            for b in [ToolResultBlock(e.call_id, e.output, e.is_error)
                      if type(e).__name__ == "ToolCallExecuted"
                      else ToolResultBlock(e.call_id, f"refused: {e.reason}", True)]]


def review(channel: Any) -> str:
    """The next plan put to the chat for review (skipping notices of answers)."""
    while True:
        text: str = channel.wait_for("plan").text
        if "is ready for review" in text:
            return text


def events_named(host: Host, name: str, sid: str = SID) -> list[Any]:
    return [e for e in host.app.session_events(sid) if type(e).__name__ == name]


def planning_script(workspace: Path, after_approval: str) -> str:
    plan = str(plan_file(workspace))
    return f"""
responses:
  - match: "add a greeting"
    blocks:
      - text: "Let me just write it."
      - tool_use: {{name: write_file, input: {{path: "{workspace}/hello.txt", content: "hi"}}}}
  - match: "plan mode"
    blocks:
      - tool_use:
          name: write_file
          input: {{path: "{plan}", content: "{LONG_PLAN}"}}
  - match: "wrote"
    blocks:
      - text: "The plan is ready."
      - tool_use: {{name: ExitPlanMode, input: {{}}}}
{after_approval}
"""


IMPLEMENT = """
  - match: "plan below is approved"
    blocks:
      - tool_use: {{name: write_file, input: {{path: "{workspace}/hello.txt", content: "hello"}}}}
  - match: "wrote"
    blocks: [{{text: "Done: hello.txt says hello."}}]
"""


def test_only_the_plan_file_is_written_while_planning_and_proceed_implements(
    engine: Callable[..., Engine], workspace: Path,
    watch_channel: Callable[..., Any],
) -> None:
    host, _, _ = engine(planning_script(workspace, IMPLEMENT.format(workspace=workspace)),
                        mode="plan")
    channel = watch_channel(host, "test")
    sid = say(host, "add a greeting file", user="ana")
    assert sid == SID

    shown = review(channel)
    assert "1. write hello.txt" in shown and "/proceed" in shown
    # While planning, only the plan file was written.
    assert not (workspace / "hello.txt").exists()
    refused = results(host)[0]
    assert refused.is_error and "plan mode: only the plan file" in refused.content
    assert plan_file(workspace).read_text() == LONG_PLAN.replace("\\n", "\n")

    say(host, "/proceed", sid, user="ana")
    channel.wait_for("completed")  # the planning turn
    channel.wait_for("completed")  # the implementation turn
    assert (workspace / "hello.txt").read_text() == "hello"  # auto mode let it write
    modes = [(m.mode, m.reason) for m in events_named(host, "ModeChanged")]
    assert modes[0] == ("plan", "the configured starting mode")


def test_a_plan_file_written_without_exit_plan_mode_is_reviewed_anyway(
    engine: Callable[..., Engine], workspace: Path,
    watch_channel: Callable[..., Any],
) -> None:
    plan = plan_file(workspace)
    script = f"""
responses:
  - match: "plan the greeting"
    blocks:
      - tool_use: {{name: write_file, input: {{path: "{plan}", content: "1. greet"}}}}
  - match: "wrote"
    blocks: [{{text: "I wrote the plan."}}]
  - match: "Implement it now"
    blocks: [{{text: "Implemented."}}]
"""
    host, _, _ = engine(script, mode="plan")
    channel = watch_channel(host, "test")
    sid = say(host, "plan the greeting")
    assert "1. greet" in review(channel)  # the shell saw the run write the plan file
    say(host, "/proceed", sid)
    channel.wait_for("completed")
    assert channel.wait_for("completed").text
    assert [p.source for p in events_named(host, "PlanProposed")] == ["file"]  # read from it


@pytest.mark.parametrize("typed", ["proceed", "/proceed"])
def test_the_terminal_reviews_the_plan_and_follows_the_implementation(
    engine: Callable[..., Engine], workspace: Path, typed: str,
) -> None:
    """The prompt's own word, or the command the notice names (it used to send the plan
    back with "/proceed" as the feedback)."""
    import io

    from tether.adapters.terminal import TerminalConnector

    host, _, _ = engine(planning_script(workspace, IMPLEMENT.format(workspace=workspace)),
                     mode="plan")
    out = io.StringIO()
    terminal = TerminalConnector(host.bus, host.subjects, channel="term", out=out,
                                 answer=lambda prompt: typed)
    terminal.say("add a greeting file")
    last = terminal.print_turn(timeout=30)
    assert last.kind == "completed"
    printed = out.getvalue()
    assert "1. write hello.txt" in printed and "Done: hello.txt says hello." in printed
    assert (workspace / "hello.txt").read_text() == "hello"
    terminal.close()

