"""A NoticesPlanned lost on the way (the session's actor failing between its save and
its tell; over core NATS, from a process without the router, at most once: a reconnect,
a slow consumer). The session tells the router in process here, so that is where it is
dropped.

docs/architecture.md: the outbox sends "a notice lost on the way"; "Notices of one
session reach a channel in seq order". docs/messages.md tells connectors to "drop one
not above the highest you have shown for that session" (terminal, Telegram do). The
notices told after the lost ones go at once; the lost ones come from the outbox after
its settle: behind them, so a connector drops them as repeats.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tests.conftest import Engine
from tests.helpers import delivered, notices_settled, say, wait_until
from tether.events.codec import encode


def test_a_told_notice_lost_on_the_way_still_comes_in_order(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any],
) -> None:
    host, _, _ = engine("""
responses:
  - blocks: [{tool_use: {name: list_dir, input: {path: "."}}}]
  - blocks: [{text: "Nothing here."}]
""")
    system = host.system
    deliver = system.deliver
    lost = threading.Event()

    def lossy(subject: str, message: Any, reply: str = "") -> bool:
        if (subject == host.subjects.notices and b"list_dir(" in encode(message)
                and not lost.is_set()):
            lost.set()  # the proposal's notice ("→ list_dir(path=.)") never arrives
            return True
        return deliver(subject, message, reply)

    system.deliver = lossy  # type: ignore[method-assign]
    test = watch_channel(host, "test")
    sid = say(host, "look around")
    test.wait_for("completed")
    assert lost.is_set()
    wait_until(lambda: notices_settled(host), "the outbox sends what was lost")
    sent = sum(1 for e in delivered(host.app, sid) if e.outcome == "sent")

    def arrived() -> bool:
        while not test.messages.empty():
            test.seen.append(test.messages.get())
        return sum(1 for m in test.seen if m.kind != "stream") >= sent

    wait_until(arrived, "every notice sent reaches the channel")
    told = [(m.seq, m.kind, m.text) for m in test.seen if m.kind != "stream"]
    seqs = [seq for seq, _, _ in told]
    assert seqs == sorted(seqs), told
