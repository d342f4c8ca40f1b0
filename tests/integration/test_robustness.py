"""Input that decodes but is wrong, oversized calls, and actors that give up."""

from __future__ import annotations

import json
import queue
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tether.actors.ports import BusError, RequestTimeout
from tether.actors.runtime import ActorSystem, Binding, RemoteError, TetherActor, ask
from tether.adapters.fake_llm import FakeLLM
from tether.adapters.host import Host
from tether.events.codec import Decoder, encode
from tether.events.messages import (
    Accepted,
    DeadLetter,
    ErrorReply,
    ListSessions,
    SessionList,
    UserMessage,
)

SCRIPT = """
responses:
  - match: "hello"
    blocks: [{text: "Hello back."}]
  - match: "write a big file"
    chunk: 65536
    blocks:
      - tool_use: {name: write_file, input: {path: big.txt, content: "BIG"}}
  - match: "big.txt"
    blocks: [{text: "Written."}]
"""


def test_a_channel_that_cannot_be_a_subject_is_refused_at_the_door(
    fake_llm: Callable[[str], FakeLLM], make_host: Callable[..., Host],
    watch_channel: Callable[..., Any],
) -> None:
    host = make_host(fake_llm(SCRIPT))
    letters: queue.Queue[DeadLetter] = queue.Queue()
    decoder: Decoder[DeadLetter] = Decoder(DeadLetter)
    host.bus.subscribe(host.subjects.deadletter, lambda m: letters.put(decoder.decode(m.data)))
    for bad in ("bad.chan", "a b", "x>", "*"):
        payload = json.dumps({"type": "user_message", "text": "hi", "channel": bad}).encode()
        reply = Decoder(ErrorReply).decode(host.bus.request_sync(host.subjects.inbox, payload, 5))
        assert reply.error == "bad_request" and "channel" in reply.reason
        assert "channel" in letters.get(timeout=5).reason
    for broken in (b'{"type": "user_message", "text": "\xff", "channel": "ok"}',
                   b'{"type": "user_message", "text": "a", "channel": "ok", "k": '
                   + b"[" * 20_000 + b"]" * 20_000 + b"}"):
        reply = Decoder(ErrorReply).decode(host.bus.request_sync(host.subjects.inbox, broken, 5))
        assert reply.error == "bad_request" and reply.reason
        assert letters.get(timeout=5).reason
    empty = json.dumps({"type": "user_message", "text": "", "channel": "ok"}).encode()
    assert "text" in Decoder(ErrorReply).decode(
        host.bus.request_sync(host.subjects.inbox, empty, 5)).reason
    # Nothing broke: a proper message still gets its reply.
    channel = watch_channel(host, "test")
    ask(host.bus, host.subjects.inbox, UserMessage(text="hello", channel="test"), Accepted)
    channel.wait_for("completed")
    assert host.system.failures == 0


def test_malformed_events_on_the_event_subjects_do_not_stop_the_router(
    fake_llm: Callable[[str], FakeLLM], make_host: Callable[..., Host],
    watch_channel: Callable[..., Any],
) -> None:
    host = make_host(fake_llm(SCRIPT))
    channel = watch_channel(host, "test")
    sid = ask(host.bus, host.subjects.inbox, UserMessage(text="hello", channel="test"),
              Accepted).session_id
    channel.wait_for("completed")
    # Well-formed envelopes with nonsense data, many times over the restart limit.
    for i in range(20):
        fake = {"id": 10_000 + i, "aggregate": "session", "aggregate_id": "x" + str(i),
                "originator_id": "u", "version": 1, "event": "ToolCallProposed",
                "timestamp": "now", "data": {"nothing": i}}
        host.bus.publish(f"{host.subjects.namespace}.evt.session.x{i}.ToolCallProposed",
                         json.dumps(fake).encode())
    host.bus.flush()
    ask(host.bus, host.subjects.inbox,
        UserMessage(text="hello again", channel="test", session_id=sid), Accepted)
    channel.wait_for("completed")
    assert host.system.stopped_for_good == []


def test_a_tool_call_bigger_than_the_bus_carries_is_judged_and_runs(
    fake_llm: Callable[[str], FakeLLM], make_host: Callable[..., Host],
    watch_channel: Callable[..., Any], workspace: Path,
) -> None:
    """A proposal goes to the gatekeeper in process, so a call with an input past the
    server's max_payload (1 MiB) is judged like any other, not refused for its size; the
    observers' copies that do not fit on the bus are dropped with a warning, and nothing
    hangs."""
    big = "x" * (1024 * 1024 + 10)
    llm = fake_llm(SCRIPT.replace('content: "BIG"', f'content: "{big}"'))
    host = make_host(llm)
    channel = watch_channel(host, "test")
    sid = ask(host.bus, host.subjects.inbox,
              UserMessage(text="please write a big file", channel="test"), Accepted).session_id
    channel.wait_for("completed", timeout=30)
    assert (workspace / "big.txt").read_text() == big
    decided = [(e.decision, e.tier) for e in host.app.session_events(sid)
               if type(e).__name__ == "ToolCallDecided"]
    assert decided == [("allow", "tier1")]
    session = host.app.session(sid)
    assert session is not None and session.status == "running"


def test_a_workspace_outside_the_engines_is_refused(
    fake_llm: Callable[[str], FakeLLM], make_host: Callable[..., Host]
) -> None:
    host = make_host(fake_llm(SCRIPT))
    with pytest.raises(RemoteError, match="not inside the engine's workspace"):
        ask(host.bus, host.subjects.inbox,
            UserMessage(text="hello", channel="test", workspace="/etc"), Accepted)
    assert host.list_sessions() == []


class Breaks(TetherActor):
    """Fails on every message, and cannot recover after the first failure."""

    def __init__(self, system: ActorSystem) -> None:
        super().__init__(system)
        self.recoveries = 0

    def recover(self) -> None:
        self.recoveries += 1
        if self.recoveries > 1:
            raise RuntimeError("the store is gone")

    def handle(self, message: Any, envelope: Any) -> None:
        raise RuntimeError("boom")


def test_an_actor_that_gives_up_is_recorded_and_unbound(
    fake_llm: Callable[[str], FakeLLM], make_host: Callable[..., Host]
) -> None:
    host = make_host(fake_llm(SCRIPT))
    subject = f"{host.subjects.namespace}.breaks"
    host.system.start(Breaks, [Binding(subject, ListSessions)])
    host.bus.publish(subject, encode(ListSessions()))
    host.bus.flush()
    refused = ""
    for _ in range(100):  # until the subscription is gone
        try:
            host.bus.request_sync(subject, encode(ListSessions()), timeout=0.1)
        except RequestTimeout:
            continue  # still bound, failing its way to giving up
        except BusError as exc:
            refused = str(exc)
            break
    assert "nobody is listening" in refused
    assert host.system.stopped_for_good == ["Breaks"]
    logs = [n for n in host.app.recorder.select_notifications(start=1, limit=1000)
            if "ActorLog" in n.topic]
    assert any(b"could not restart" in n.state for n in logs)
    # The engine's own actors are untouched.
    assert isinstance(ask(host.bus, host.subjects.manager, ListSessions(), SessionList),
                      SessionList)
