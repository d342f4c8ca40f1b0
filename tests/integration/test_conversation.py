"""A whole conversation through the fake model, over real NATS, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from tests.helpers import say
from tether.adapters.fake_llm import FakeLLM
from tether.adapters.host import Host
from tether.events.messages import RelayedEvent, TextBlock, ToolResultBlock

SCRIPT = """
responses:
  - match: "read the readme"
    blocks:
      - text: "Let me look at the readme."
      - tool_use: {name: read_file, input: {path: README.md}}
  - match: "hello from the readme"
    blocks:
      - text: "The readme says hello."
  - match: "password"
    blocks:
      - tool_use: {name: read_file, input: {path: /etc/passwd}}
  - match: "outside the workspace"
    blocks:
      - text: "I may not read that file."
  - match: "helper"
    chunk: 4
    blocks:
      - text: "Writing the helper now. TODO: finish it later."
  - match: "system-interrupt"
    blocks:
      - text: "Here is the finished helper."
"""

RULE = """---
name: no-todo
description: Never leave TODOs
trigger: "TODO"
---
Finish the work instead of leaving a TODO.
"""




def _relayed(host: Host, session_id: str, expected: int) -> list[RelayedEvent]:
    async def fetch() -> list[RelayedEvent]:
        sub = await host.bus.js.subscribe(
            host.subjects.session_events(session_id), ordered_consumer=True
        )
        out: list[RelayedEvent] = []
        try:
            while len(out) < expected:
                msg = await sub.next_msg(timeout=10)
                out.append(msgspec.json.decode(msg.data, type=RelayedEvent))
        finally:
            await sub.unsubscribe()
        return out

    result: list[RelayedEvent] = host.bus.call(fetch, timeout=30)
    return result


def test_whole_conversation(
    database_url: str,
    workspace: Path,
    tmp_path: Path,
    fake_llm: Callable[[str], FakeLLM],
    make_host: Callable[..., Host],
    watch_channel: Callable[..., Any],
) -> None:
    (workspace / "README.md").write_text("hello from the readme\n")
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "no-todo.md").write_text(RULE)
    llm = fake_llm(SCRIPT)
    host = make_host(llm, database_url=database_url)
    channel = watch_channel(host, "test")

    # 1. A streamed reply and an allowed tool call that runs in the workspace.
    sid = say(host, "please read the readme")
    channel.wait_for("completed")
    streamed = "".join(m.text for m in channel.seen if m.kind == "stream")
    assert "Let me look at the readme." in streamed
    replies = [m.text for m in channel.seen if m.kind == "reply"]
    assert replies == ["Let me look at the readme.", "The readme says hello."]
    assert any(m.kind == "tool" and "read_file" in m.text for m in channel.seen)

    # 2. A path outside the workspace is denied, and the model is told so.
    say(host, "now read the password file", sid)
    channel.wait_for("completed")
    denied = [m.text for m in channel.seen if m.kind == "tool" and "denied" in m.text]
    assert denied and "outside the workspace" in denied[-1]

    # 3. A TTSR rule interrupts the reply; the retried reply is what is stored.
    say(host, "write the helper", sid)
    channel.wait_for("completed")
    assert any(m.kind == "interrupted" and "no-todo" in m.text for m in channel.seen)

    session = host.app.session(sid)
    assert session is not None
    texts = [
        b.text for t in session.history if t.role == "assistant" for b in t.content
        if isinstance(b, TextBlock)
    ]
    assert texts[-1] == "Here is the finished helper."
    assert not any("TODO" in t for t in texts)
    results = [
        b for t in session.history for b in t.content if isinstance(b, ToolResultBlock)
    ]
    assert "hello from the readme" in results[0].content and not results[0].is_error
    assert results[1].is_error and "outside the workspace" in results[1].content
    # The retry's request carried the reminder naming the rule.
    last_request = llm.requests[-1]
    assert 'rule="no-todo"' in str(last_request["messages"])
    assert session.turns == 3 and session.status == "running" and session.waiting

    # The events are in the store and, in the same order, on the JetStream stream.
    stored = host.app.session_events(sid)
    names = [type(e).__name__ for e in stored]
    for expected in ("Created", "UserMessageReceived", "AssistantMessageAppended",
                     "ToolCallProposed", "ToolCallDecided", "ToolCallExecuted",
                     "ToolCallRefused", "TtsrInterrupted", "TurnCompleted", "StatusChanged"):
        assert expected in names
    host.relay.catch_up()
    relayed = _relayed(host, sid, len(stored))
    assert [r.event for r in relayed] == names
    assert [r.version for r in relayed] == [e.originator_version for e in stored]
    assert relayed[1].data["text"] == "please read the readme"

    # The session view shows it.
    rows = {r.session_id: r for r in host.list_sessions()}
    assert rows[sid].turns == 3 and rows[sid].status == "running"
    assert rows[sid].output_tokens > 0


