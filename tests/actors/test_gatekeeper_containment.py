"""The gatekeeper and the sandbox: no sandbox refuses process tools, the sandbox off asks a
person for every shell command, and the network is granted only with the verdict."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from tether.actors.gatekeeper.actor import Containment, Judgement, judge
from tether.actors.gatekeeper.deny_lists import DenyLists, action_hash
from tether.actors.gatekeeper.security import PipelineConfig
from tether.events.messages import ToolProposal

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def decide(tool: str, tool_input: dict[str, object], workspace: Path,
           containment: Containment | None = None) -> Judgement:
    proposal = ToolProposal(session_id="s", call_id="c", tool=tool, input=tool_input,
                            workspace=str(workspace), action_hash=action_hash(tool, tool_input))
    return judge(proposal, DenyLists.from_settings({}), PipelineConfig(home=str(workspace)), NOW,
                 containment)


def test_without_a_sandbox_process_tools_are_refused_and_file_tools_are_not(
        tmp_path: Path) -> None:
    missing = Containment("missing", "bubblewrap (bwrap) is not on the PATH")
    for tool, args in (("run_shell", {"command": "ls"}), ("git_status", {}),
                       ("run_shell", {"command": "git push origin main"})):
        judged = decide(tool, args, tmp_path, missing)
        assert judged.decision == "deny" and judged.tier == "sandbox"
        assert "bwrap" in judged.reason and judged.stages[-1].stage == "sandbox"
    assert decide("read_file", {"path": "a"}, tmp_path, missing).decision == "allow"


def test_with_the_sandbox_off_every_shell_command_needs_a_person(tmp_path: Path) -> None:
    off = Containment("off")
    plain = decide("run_shell", {"command": "ls"}, tmp_path, off)
    assert plain.decision == "escalate" and plain.required_tier == 3
    assert "sandbox is off" in plain.reason
    push = decide("run_shell", {"command": "git push origin main"}, tmp_path, off)
    assert push.decision == "escalate" and push.required_tier == 3
    denied = decide("run_shell", {"command": "echo x > SOUL.md"}, tmp_path, off)
    assert denied.decision == "deny"
    assert decide("git_status", {}, tmp_path, off).decision == "allow"
    assert decide("run_shell", {"command": "ls"}, tmp_path).decision == "allow"


def test_the_network_is_granted_only_to_network_calls(tmp_path: Path) -> None:
    assert not decide("run_shell", {"command": "ls -la"}, tmp_path).network
    push = decide("run_shell", {"command": "git push origin main"}, tmp_path)
    assert push.decision == "escalate" and push.network


def test_kernel_and_system_settings_need_a_person(tmp_path: Path) -> None:
    for command in ("sysctl -w kernel.core_pattern='|/bin/sh x'", "unshare -Urm true",
                    "mount -t cgroup2 none /tmp/cg"):
        judged = decide("run_shell", {"command": command}, tmp_path)
        assert judged.decision != "allow", command
