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


def test_a_file_name_that_is_not_utf8_reaches_the_model_and_the_store(
    engine: Callable[..., Engine], workspace: Path, watch_channel: Callable[..., Any],
) -> None:
    """Python reads such a name as lone surrogates, which nothing can store or send: the
    listing shows U+FFFD for the bytes, and the turn ends as any other."""
    (workspace / "good.txt").write_text("x")
    with open(bytes(workspace) + b"/bad\xff.txt", "w") as handle:
        handle.write("x")
    script = """
responses:
  - match: "list"
    blocks:
      - tool_use: {name: list_dir, input: {path: "."}}
  - match: "good.txt"
    blocks: [{text: "Two files."}]
"""
    host, _, _ = engine(script)
    channel = watch_channel(host, "test")
    sid = say(host, "list the files")
    channel.wait_for("completed")
    session = host.app.session(sid)
    assert session is not None
    [result] = [b for t in session.history for b in t.content
                if type(b).__name__ == "ToolResultBlock"]
    assert "bad\ufffd.txt" in result.content and "good.txt" in result.content
    assert session.history[-1].content[0].text == "Two files."
