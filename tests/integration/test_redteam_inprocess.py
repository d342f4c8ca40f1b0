"""Red-team attempts on in-process delivery and the provider's new refusals, judged by
what a user would notice: files in the workspace, the chat, the store."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import Engine
from tests.helpers import say
from tests.integration.test_ttsr import rule
from tether.adapters.nats_bus import NatsBus
from tether.events.codec import encode
from tether.events.messages import (
    BarrierCheck,
    BarrierResult,
)


def _violating_write(tmp_path: Path) -> str:
    rule(tmp_path / "rules", "no-evil", "EVIL", "No evil.")
    return """
responses:
  - match: "go"
    chunk: 3
    blocks:
      - tool_use: {name: write_file, input: {path: pwned.txt, content: "pwned"}}
      - text: "ok then EVIL"
  - match: "No evil"
    blocks: [{text: "Sorry, I will not."}]
"""


def test_a_rule_broken_at_the_last_delta_stops_the_call_before_it(
    tmp_path: Path, workspace: Path, engine: Callable[..., Engine],
    watch_channel: Callable[..., Any],
) -> None:
    host = engine(_violating_write(tmp_path)).host
    test = watch_channel(host, "test")
    say(host, "go")
    test.wait_for("completed")
    assert not (workspace / "pwned.txt").exists()


def test_an_outsider_spraying_local_reply_addresses_clears_no_barrier(
    tmp_path: Path, workspace: Path, engine: Callable[..., Engine],
    watch_channel: Callable[..., Any], nats_url: str,
) -> None:
    host = engine(_violating_write(tmp_path)).host
    test = watch_channel(host, "test")
    process = host.system.process
    outsider = NatsBus(nats_url, name="outsider")
    stop = threading.Event()
    sid_box: list[str] = []

    def spray() -> None:
        while not stop.is_set():
            for n in range(1, 60):
                token = f"_LOCAL.{process}.{n}"
                for gen in range(0, 4):
                    outsider.publish(token, encode(BarrierResult(generation=gen, clear=True)))
                if sid_box:
                    sid = sid_box[0]
                    outsider.publish(host.subjects.ttsr(sid), encode(BarrierCheck(
                        session_id=sid, generation=1, seq=0)), reply=token)
            time.sleep(0.02)

    thread = threading.Thread(target=spray, daemon=True)
    thread.start()
    try:
        sid = say(host, "go")
        sid_box.append(sid)
        test.wait_for("completed")
        say(host, "go", sid)
        test.wait_for("completed")
    finally:
        stop.set()
        thread.join(timeout=5)
        outsider.close()
    assert not (workspace / "pwned.txt").exists()


def test_a_monitor_gone_does_not_let_an_outsider_answer_the_barrier(
    tmp_path: Path, workspace: Path, engine: Callable[..., Engine],
    watch_channel: Callable[..., Any], nats_url: str,
) -> None:
    """The monitor stops for good (repeated failures): its routes go with it. The
    session's barrier must not then be asked over the bus, where anyone may answer."""
    rule(tmp_path / "rules", "no-evil", "EVIL", "No evil.")
    script = """
responses:
  - match: "hello"
    blocks: [{text: "hi"}]
  - match: "go"
    blocks:
      - tool_use: {name: write_file, input: {path: pwned.txt, content: "EVIL"}}
  - blocks: [{text: "done"}]
"""
    host = engine(script).host
    test = watch_channel(host, "test")
    sid = say(host, "hello")
    test.wait_for("completed")
    # The monitor's handle: the one whose actor is a TtsrMonitorActor of this session.
    from tether.actors.ttsr.monitor import TtsrMonitorActor
    handles = [h for h in host.system._handles
               if isinstance(h.ref.actor_class, type)
               and issubclass(h.ref.actor_class, TtsrMonitorActor)]
    assert handles
    for h in handles:
        host.system.gave_up(h.ref, "TtsrMonitorActor", "test: failed too often")
    outsider = NatsBus(nats_url, name="outsider")

    def answer(msg: Any) -> None:
        if msg.reply:
            for gen in range(0, 8):
                outsider.publish(msg.reply, encode(BarrierResult(generation=gen, clear=True)))

    sub = outsider.subscribe(host.subjects.ttsr(sid), answer)
    outsider.flush()
    try:
        say(host, "go", sid)
        time.sleep(3)
    finally:
        sub.close()
        outsider.close()
    assert not (workspace / "pwned.txt").exists()
