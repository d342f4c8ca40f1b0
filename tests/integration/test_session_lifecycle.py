"""Messages that arrive mid-turn, and kills while a tool runs: nothing lost, history valid.

(A message stored before a restart answered first, and a killed session resumed with a
valid history, are decided on plain values in tests/actors/session/test_endings.py.)

The fake model refuses (HTTP 400) any conversation the real Messages API would refuse, so
a tool_use left without a tool_result fails these tests the way it would fail users.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.helpers import say
from tether.actors.runtime import ask
from tether.adapters.fake_llm import FakeLLM
from tether.adapters.host import Host
from tether.events.messages import Killed, KillSession, ToolResultBlock

SCRIPT = """
responses:
  - match: "first"
    chunk: 3
    delay_ms: 30
    blocks:
      - text: "A slow first answer, streamed in many small pieces."
  - match: "second"
    blocks:
      - text: "The second answer."
  - match: "run the slow job"
    blocks:
      - tool_use: {name: run_shell, input: {command: "touch started && sleep 8"}}
  - match: "continue"
    blocks:
      - text: "Picking up after the kill."
"""


def test_a_message_sent_mid_turn_is_stored_at_once_and_answered_after(
    database_url: str,
    fake_llm: Callable[[str], FakeLLM],
    make_host: Callable[..., Host],
    watch_channel: Callable[..., Any],
) -> None:
    host = make_host(fake_llm(SCRIPT), database_url=database_url)
    channel = watch_channel(host, "test")
    sid = say(host, "the first question")
    channel.wait_for("stream")
    assert say(host, "the second question", sid) == sid  # accepted once stored

    names = [type(e).__name__ for e in host.app.session_events(sid)]
    assert "UserMessageQueued" in names  # durable before the first turn ended
    channel.wait_for("completed")
    channel.wait_for("completed")
    session = host.app.session(sid)
    assert session is not None and session.turns == 2 and session.queued == []
    replies = [m.text for m in channel.seen if m.kind == "reply"]
    assert replies == ["A slow first answer, streamed in many small pieces.",
                       "The second answer."]


def test_kill_while_a_tool_runs_keeps_the_history_valid(
    workspace: Path,
    fake_llm: Callable[[str], FakeLLM],
    make_host: Callable[..., Host],
    watch_channel: Callable[..., Any],
) -> None:
    llm = fake_llm(SCRIPT)
    host = make_host(llm, shell_timeout=60.0)
    channel = watch_channel(host, "test")
    sid = say(host, "please run the slow job")
    tool = channel.wait_for("tool")
    assert "run_shell" in tool.text
    started = workspace / "started"
    deadline = time.monotonic() + 15
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.02)  # polling the file system: the tool runs in another process
    assert started.exists(), [m.text for m in channel.seen]

    killed = ask(host.bus, host.subjects.manager, KillSession(session_id=sid), Killed, 10)
    assert killed.found
    session = host.app.session(sid)
    assert session is not None and session.status == "killed"
    results = [b for t in session.history for b in t.content if isinstance(b, ToolResultBlock)]
    assert len(results) == 1 and results[0].is_error
    assert "killed" in results[0].content and "outcome is unknown" in results[0].content

    # The killed session can be continued, and the model accepts its history.
    say(host, "continue please", sid)
    channel.wait_for("completed")
    assert [m.text for m in channel.seen if m.kind == "reply"][-1] == "Picking up after the kill."

