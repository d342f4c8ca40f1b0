"""The sandbox inside real sessions: an engine killed mid-call leaves no writer behind and
records the call as interrupted; runaway commands are stopped by the limits and the
session goes on; an approved network call gets the network, an unapproved one does not.

The kill test starts its own NATS server (a fault test never touches the shared one) and
stops only the processes it started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.conftest import ChannelWatcher
from tests.helpers import need_sandbox, say
from tests.integration.test_serve_restart import TETHER, Serve
from tether.actors.runtime import ask
from tether.adapters.anthropic_provider import AnthropicProvider
from tether.adapters.config import Settings
from tether.adapters.fake_llm import FakeLLM, parse_script
from tether.adapters.host import Host
from tether.adapters.nats_bus import NatsBus
from tether.adapters.nats_server import EmbeddedNats
from tether.events.messages import Accepted, ToolResultBlock, UserMessage
from tether.events.sandbox import SandboxLimits
from tether.events.subjects import Subjects


@pytest.fixture(autouse=True)
def _sandbox() -> None:
    need_sandbox()


TICKS = """
responses:
  - match: "tick"
    blocks:
      - text: "Ticking."
      - tool_use:
          name: run_shell
          input: {command: "while :; do date +%s%N >> ticks.txt; sleep 0.1; done"}
  - match: "what happened"
    blocks:
      - text: "The ticking call was interrupted."
"""


def _lines(path: Path) -> int:
    return path.read_text().count("\n") if path.exists() else 0


def test_a_killed_engine_leaves_no_writer_and_the_call_is_recorded_interrupted(
        tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    ticks = workspace / "ticks.txt"
    nats = EmbeddedNats(tmp_path / "nats").start()
    with FakeLLM(parse_script(TICKS)) as llm:
        env = {
            **os.environ,
            "TETHER_NATS_URL": nats.url,
            "TETHER_STATE_DIR": str(tmp_path / "state"),
            "TETHER_NAMESPACE": "sandboxkill",
            "TETHER_WORKSPACE": str(workspace),
            "TETHER_RULES_DIR": str(tmp_path / "rules"),
            "TETHER_SHELL_TIMEOUT": "120",
            "ANTHROPIC_BASE_URL": llm.base_url,
        }
        env.pop("ANTHROPIC_API_KEY", None)
        env.pop("TETHER_DATABASE_URL", None)
        subjects = Subjects("sandboxkill")
        bus = NatsBus(nats.url)
        watcher = ChannelWatcher(bus, subjects.channel_out("cli"))
        serve = Serve(env, tmp_path / "serve.log")
        try:
            sid = ask(bus, subjects.inbox, UserMessage(text="tick please", channel="cli"),
                      Accepted, timeout=15).session_id
            deadline = time.monotonic() + 30
            while _lines(ticks) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _lines(ticks) >= 3, "the command never started ticking"
            serve.kill()
            at_kill = _lines(ticks)
            time.sleep(0.6)  # six ticks' worth: a surviving writer would have added lines
            assert _lines(ticks) == at_kill

            serve = Serve(env, tmp_path / "serve.log")
            ask(bus, subjects.inbox, UserMessage(text="what happened?", channel="cli",
                                                 session_id=sid), Accepted, timeout=15)
            watcher.wait_for("completed", timeout=30)
            timeline = subprocess.run([*TETHER, "events", sid], env=env, capture_output=True,
                                      text=True, timeout=60, check=True).stdout
            assert "ToolCallStarted" in timeline and "ToolCallInterrupted" in timeline
            assert "ToolCallRefused" not in timeline and "ToolCallExecuted" not in timeline
            audit = subprocess.run([*TETHER, "audit", "--session", sid], env=env,
                                   capture_output=True, text=True, timeout=60,
                                   check=True).stdout
            assert "interrupted (outcome unknown)" in audit
            assert "contained: bubblewrap, network off, workspace writable" in audit
            # The model was told the call's outcome is unknown.
            told = str(llm.requests[-1]["messages"])
            assert "the engine stopped while this call ran" in told
            assert "outcome is unknown" in told
            assert _lines(ticks) == at_kill
        finally:
            assert serve.stop() in (0, -signal.SIGKILL)
            watcher.close()
            bus.close()
            nats.stop()


def _approve_all_until_completed(host: Host, channel: Any, sid: str) -> list[str]:
    """Approve every call the judge sends to a person until the turn completes (so the
    sandbox alone stands between each command and the machine); the questions asked."""
    asked: list[str] = []
    while True:
        message = channel.messages.get(timeout=60)
        channel.seen.append(message)
        if message.kind == "completed":
            return asked
        if message.kind == "approval" and message.text.startswith("approval "):
            asked.append(message.text)
            say(host, f"/approve {message.text.split()[1].rstrip(':')}", sid)


RUNAWAY = """
responses:
  - match: "run away"
    blocks:
      - tool_use: {name: run_shell, input: {command: "f(){ f | f & }; f; sleep 20"}}
  - match: "process limit"
    blocks:
      - tool_use:
          name: run_shell
          input: {command: "python3 -c 'b = bytearray(2 * 1024 ** 3)'"}
  - match: "MemoryError"
    blocks:
      - tool_use: {name: run_shell, input: {command: "while :; do :; done"}}
  - match: "CPU time limit"
    blocks:
      - text: "All three were stopped; I am still here."
  - match: "still there"
    blocks:
      - tool_use: {name: run_shell, input: {command: "echo alive"}}
  - match: "alive"
    blocks:
      - text: "Yes."
"""


def test_runaway_commands_are_stopped_and_the_session_goes_on(
        make_settings: Callable[..., Settings], fake_llm: Callable[[str], FakeLLM],
        watch_channel: Callable[..., Any]) -> None:
    llm = fake_llm(RUNAWAY)
    settings = make_settings(anthropic_base_url=llm.base_url, shell_timeout=60.0,
                             limits=SandboxLimits(cpu_seconds=3, memory_mb=512,
                                                  processes=64))
    host = Host(settings, provider=AnthropicProvider(None, llm.base_url)).start()
    try:
        channel = watch_channel(host, "test")
        sid = say(host, "run away, please")
        approved = _approve_all_until_completed(host, channel, sid)
        assert any("f(){" in text for text in approved)  # the judge sent the bomb to a person
        session = host.app.session(sid)
        assert session is not None
        results = [b for t in session.history for b in t.content
                   if isinstance(b, ToolResultBlock)]
        assert len(results) == 3 and all(r.is_error for r in results)
        assert "process limit" in results[0].content
        assert "MemoryError" in results[1].content
        assert "the CPU time limit" in results[2].content
        say(host, "are you still there?", sid)
        channel.wait_for("completed", timeout=30)
        session = host.app.session(sid)
        assert session is not None
        last = [b for t in session.history for b in t.content
                if isinstance(b, ToolResultBlock)][-1]
        assert last.content == "exit code: 0\nalive\n"
        started = [e for e in host.app.session_events(sid)
                   if type(e).__name__ == "ToolCallStarted"]
        assert msgspec.structs.asdict(started[0].sandbox.limits) == {
            "cpu_seconds": 3, "memory_mb": 512, "file_size_mb": 1024, "processes": 64,
            "scratch_mb": 256}
    finally:
        host.stop()
