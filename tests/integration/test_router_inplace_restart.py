"""The router restarting in place (a handler failed, e.g. one store error while
it saved its delivery records) in the middle of a burst.

docs/architecture.md ("Restarts"): after an in-place restart the router first records the
notices it sent whose records it could not save, then sends "exactly the notices not
recorded as delivered, in order"; only "a crash between publishing a notice and saving its
Delivered sends it again"; "Notices of one session reach a channel in seq order".
Connectors drop a notice whose seq is not above the highest shown (terminal, Telegram), so
one that arrives late is lost to them.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from tests.conftest import Engine
from tests.helpers import delivered, notices_settled, say, wait_until
from tether.events.deliveries import Deliveries, deliveries_uuid


def drain(watcher: Any) -> None:
    while not watcher.messages.empty():
        watcher.seen.append(watcher.messages.get())


def test_an_in_place_router_restart_sends_nothing_recorded_again_and_keeps_the_order(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any],
) -> None:
    calls = "\n".join(
        "      - tool_use: {name: list_dir, input: {path: \".\"}}" for _ in range(12))
    host, _, _ = engine(f"""
responses:
  - match: "burst"
    blocks:
{calls}
  - blocks: [{{text: "All listed."}}]
""")
    app = host.app
    save = app.save
    failed = threading.Event()
    recorded_before: set[str] = set()

    def flaky_save(*aggregates: Any, **kw: Any) -> Any:
        # One store error while the router saves its records, once some tool results
        # have gone out: the router restarts in place (recover).
        if (not failed.is_set() and aggregates
                and all(isinstance(a, Deliveries) for a in aggregates)
                and any(a.delivered >= 8 for a in aggregates)):
            failed.set()
            recorded_before.update(
                e.notice for a in aggregates for e in delivered(app, a.session_id))
            raise OSError("the store went away for a moment")
        return save(*aggregates, **kw)

    app.save = flaky_save  # type: ignore[method-assign]
    test = watch_channel(host, "test")
    sid = say(host, "burst")
    test.wait_for("completed", timeout=30)
    assert failed.is_set()
    wait_until(lambda: notices_settled(host), "every notice delivered", timeout=15)
    drain(test)
    seqs = [m.seq for m in test.seen if m.kind != "stream"]
    again = {seq: n for seq, n in Counter(seqs).items() if n > 1}
    # A notice whose Delivered was stored before the failure is never sent again.
    resent_recorded = [
        s for s in again if f"{s // 1000}.{s % 1000}" in recorded_before]
    assert not resent_recorded, f"sent again though recorded: {resent_recorded}"
    firsts: list[int] = []
    for seq in seqs:
        if seq not in firsts:
            firsts.append(seq)
    assert firsts == sorted(firsts), f"out of order: {firsts}"
    assert seqs == sorted(seqs), f"a later notice came before an earlier one: {seqs}"
    # The restart saved the records of the batch whose save failed: nothing went twice.
    assert not again, f"sent twice: {sorted(again)}"
    log = app.load(deliveries_uuid(sid), Deliveries)
    assert log is not None
