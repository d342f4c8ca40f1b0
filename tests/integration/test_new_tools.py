"""The grown built-in tools run through the whole engine: gatekeeper, executor, history."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import Engine
from tests.helpers import say


def test_edit_grep_and_glob_run_through_the_gatekeeper(
    engine: Callable[..., Engine], workspace: Path, watch_channel: Callable[..., Any],
) -> None:
    (workspace / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    script = f"""
responses:
  - match: "fix"
    blocks:
      - tool_use: {{name: grep, input: {{pattern: "return a - b"}}}}
  - match: "calc.py:2"
    blocks:
      - tool_use:
          name: edit_file
          input: {{path: "{workspace}/calc.py", old_text: "a - b", new_text: "a + b"}}
  - match: "edited"
    blocks:
      - tool_use: {{name: glob, input: {{pattern: "*.py"}}}}
  - match: "calc.py"
    blocks: [{{text: "Fixed."}}]
  - match: "protected"
    blocks:
      - tool_use:
          name: edit_file
          input: {{path: "{workspace}/SOUL.md", old_text: "x", new_text: "y"}}
  - match: "refused"
    blocks: [{{text: "Not allowed."}}]
"""
    host, _, _ = engine(script)
    channel = watch_channel(host, "test")
    sid = say(host, "fix the sign")
    channel.wait_for("completed")
    assert (workspace / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    decided = [(e.decision, e.tier) for e in host.app.session_events(sid)
               if type(e).__name__ == "ToolCallDecided"]
    assert [d for d, _ in decided] == ["allow", "allow", "allow"]

    (workspace / "SOUL.md").write_text("x\n")
    say(host, "try the protected file", sid)
    channel.wait_for("completed")
    assert (workspace / "SOUL.md").read_text() == "x\n"
    refused = [e.reason for e in host.app.session_events(sid)
               if type(e).__name__ == "ToolCallRefused"]
    assert refused and "identity or guardrail file" in refused[-1]
