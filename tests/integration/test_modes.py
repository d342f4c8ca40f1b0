"""Auto mode approves the configured tools' escalations, and nothing more."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.helpers import say
from tether.actors.middleware import MiddlewareSettings
from tether.adapters.fake_llm import FakeLLM
from tether.adapters.host import Host

POLICY = """
version: 1
default: escalate
default_tier: 1
rules:
  - name: edits-need-a-person
    tool: write_file
    verdict: escalate
    tier: 3
    reason: edits are checked by a person
  - name: changes-need-a-person
    tool: edit_file
    verdict: escalate
    tier: 3
    reason: edits are checked by a person
"""


def script(workspace: Path) -> str:
    return f"""
responses:
  - match: "write notes"
    blocks:
      - tool_use: {{name: write_file, input: {{path: "{workspace}/notes.txt", content: "a"}}}}
  - match: "refused"
    blocks: [{{text: "Not written."}}]
  - match: "write notes"
    blocks:
      - tool_use: {{name: write_file, input: {{path: "{workspace}/notes.txt", content: "b"}}}}
  - match: "wrote"
    blocks: [{{text: "Written."}}]
  - match: "fix the notes"
    blocks:
      - tool_use: {{name: edit_file, input: {{path: "{workspace}/notes.txt", old_text: "b",
                                             new_text: "c"}}}}
  - match: "edited"
    blocks: [{{text: "Fixed."}}]
  - match: "remember"
    blocks:
      - tool_use: {{name: write_file, input: {{path: "{workspace}/MEMORY.md", content: "x"}}}}
  - match: "refused"
    blocks: [{{text: "Not remembered."}}]
"""


def decisions(host: Host, sid: str) -> list[tuple[str, str]]:
    return [(e.decision, e.tier) for e in host.app.session_events(sid)
            if type(e).__name__ == "ToolCallDecided"]


def test_auto_mode_approves_policy_escalations_of_its_tools_only(
    workspace: Path, tmp_path: Path, fake_llm: Callable[[str], FakeLLM],
    make_host: Callable[..., Host], watch_channel: Callable[..., Any],
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    # More than the default burst of five messages, in quick succession: not what this
    # test is about.
    host = make_host(fake_llm(script(workspace)), policy_file=str(policy),
                     middleware=MiddlewareSettings(burst=50))
    channel = watch_channel(host, "test")

    sid = say(host, "write notes")  # default mode: the policy's escalation asks a person
    assert "edits are checked by a person" in channel.wait_for("approval").text
    say(host, "no", sid)
    channel.wait_for("completed")
    assert not (workspace / "notes.txt").exists()

    say(host, "/edit", sid)
    channel.wait_for("status")
    say(host, "write notes again", sid)
    channel.wait_for("completed")
    assert (workspace / "notes.txt").read_text() == "b"
    assert decisions(host, sid)[-1] == ("allow", "auto")
    say(host, "fix the notes", sid)  # seed 000: auto mode accepts edits, Edit included
    channel.wait_for("completed")
    assert (workspace / "notes.txt").read_text() == "c"
    assert decisions(host, sid)[-1] == ("allow", "auto")

    # A memory file needs tier 1 from protection: auto mode does not answer for it.
    say(host, "remember this", sid)
    asked = channel.wait_for("approval").text
    assert "MEMORY.md" in asked
    say(host, "no", sid)
    channel.wait_for("completed")
    assert not (workspace / "MEMORY.md").exists()
    assert decisions(host, sid)[-2:] == [("escalate", "escalation"), ("deny", "human")]


def test_the_starting_mode_and_auto_approvals_come_from_the_settings(
    workspace: Path, tmp_path: Path, fake_llm: Callable[[str], FakeLLM],
    make_host: Callable[..., Host], watch_channel: Callable[..., Any],
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    host = make_host(fake_llm(script(workspace)), policy_file=str(policy), mode="auto",
                     auto_approve=["run_shell"])
    channel = watch_channel(host, "test")
    sid = say(host, "write notes")  # write_file is not in this auto-approve list
    channel.wait_for("approval")
    say(host, "/status", sid)
    status = channel.wait_for("status").text
    assert "mode auto" in status and "auto-approvals: run_shell" in status
