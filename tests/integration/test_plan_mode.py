"""Plan mode: the model plans into its plan file, the chat reviews, the session implements.

Each test drives a real engine (NATS, the store, the gatekeeper, the coordinator) with the
local model server; session ids are sequential so the scripts can name the plan file.
"""

from __future__ import annotations

import json
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


def test_proceed_keeps_the_context_and_implements_in_auto_mode(
    engine: Callable[..., Engine], workspace: Path,
    watch_channel: Callable[..., Any],
) -> None:
    host, _, llm = engine(planning_script(workspace, IMPLEMENT.format(workspace=workspace)),
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
    first = llm.requests[0]
    assert "You are in plan mode" in first["system"] and str(plan_file(workspace)) in first[
        "system"]
    assert {t["name"] for t in first["tools"]} >= {"ExitPlanMode", "AskUserQuestion"}

    say(host, "/proceed", sid, user="ana")
    channel.wait_for("completed")  # the planning turn
    channel.wait_for("completed")  # the implementation turn
    assert (workspace / "hello.txt").read_text() == "hello"

    proposed = events_named(host, "PlanProposed")
    assert [(p.source, p.plan) for p in proposed] == [
        ("file", LONG_PLAN.replace("\\n", "\n"))]
    assert [(r.choice, r.by) for r in events_named(host, "PlanReviewed")] == [("proceed", "ana")]
    modes = [(m.mode, m.reason) for m in events_named(host, "ModeChanged")]
    assert modes == [("plan", "the configured starting mode"), ("auto", "plan approved by ana")]
    exit_result = next(r for r in results(host) if "approved the plan" in r.content)
    assert not exit_result.is_error

    implementation = next(r for r in llm.requests
                          if "plan below is approved" in json.dumps(r["messages"]))
    sent = json.dumps(implementation["messages"])
    assert "add a greeting file" in sent  # proceed keeps the context
    assert "1. write hello.txt" in sent  # the prompt carries the plan
    assert "plan mode" not in implementation["system"]
    assert "ExitPlanMode" not in {t["name"] for t in implementation["tools"]}
    session = host.app.session(sid)
    assert session is not None and session.mode == "auto"
    assert session.auto_approve == ["write_file", "edit_file"]


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
    host, _, llm = engine(script, mode="plan")
    channel = watch_channel(host, "test")
    sid = say(host, "plan the greeting")
    assert "1. greet" in review(channel)
    assert not events_named(host, "TurnCompleted")  # the turn waits for the review
    say(host, "/proceed", sid)
    channel.wait_for("completed")
    assert channel.wait_for("completed").text
    assert [p.source for p in events_named(host, "PlanProposed")] == ["file"]
    assert [p.call_id for p in events_named(host, "PlanProposed")] == [""]
    # Seed 000: a plan of 50 characters or fewer is not embedded; the plain instruction.
    implementation = next(r for r in llm.requests
                          if "Implement it now" in json.dumps(r["messages"]))
    asked = json.dumps(implementation["messages"][-1])
    assert "The plan is approved. Implement it now." in asked and "<plan>" not in asked


def test_a_kill_cancels_a_pending_plan_review(
    engine: Callable[..., Engine], workspace: Path,
    watch_channel: Callable[..., Any],
) -> None:
    from tether.actors.runtime import ask
    from tether.events.messages import Killed, KillSession

    host, _, _ = engine(planning_script(workspace, ""), mode="plan")
    channel = watch_channel(host, "test")
    sid = say(host, "add a greeting file")
    review(channel)
    ask(host.bus, host.subjects.manager, KillSession(session_id=sid, reason="enough"), Killed)
    cancelled = channel.wait_for("plan").text
    assert "was cancelled: enough" in cancelled
    exit_call = results(host, sid)[-1]
    assert exit_call.is_error and "killed" in exit_call.content


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


def test_ok_is_feedback_and_default_implements_with_every_escalation_asked(
    engine: Callable[..., Engine], workspace: Path,
    watch_channel: Callable[..., Any],
) -> None:
    """Seed 000: free text during a review is feedback, even "ok"; /default is the third
    choice: implement the plan in the default mode, without auto-approvals."""
    host, _, llm = engine(planning_script(workspace, IMPLEMENT.format(workspace=workspace))
                          + """  - match: "wants the plan changed"
    blocks:
      - tool_use: {name: ExitPlanMode, input: {}}
""", mode="plan")
    channel = watch_channel(host, "test")
    sid = say(host, "add a greeting file", user="ana")
    review(channel)
    say(host, "ok", sid, user="ana")
    review(channel)  # sent back, then offered again
    say(host, "/default", sid, user="ana")
    channel.wait_for("completed")
    channel.wait_for("completed")
    assert [(r.choice, r.feedback) for r in events_named(host, "PlanReviewed")] == [
        ("adjust", "ok"), ("default", "")]
    modes = [(m.mode, m.auto_approve) for m in events_named(host, "ModeChanged")]
    assert modes[-1] == ("default", [])
    session = host.app.session(sid)
    assert session is not None and session.mode == "default"
    assert any("plan below is approved" in json.dumps(r["messages"]) for r in llm.requests)
