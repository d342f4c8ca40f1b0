"""Follows the event log: reads new notifications in order and hands them to a consumer.

The SQLite recorder cannot push (no LISTEN/NOTIFY), so a follower is a small loop over
``select_notifications`` woken right after each save in this process (the application's
listener) and polling every ``poll_interval`` seconds for writes by other processes. A
follower off the chats' path may ``settle``: once woken, it waits that long before reading,
so a burst of saves (a turn makes several) is read and applied as one batch instead of
competing with the turn after each save. The consumer owns the position: it says where
to start and records progress itself (tracking records, or JetStream for the relay), so a
restart resumes where it stopped.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from tether.events.application import TetherApplication

log = logging.getLogger(__name__)

BATCH = 200

SETTLE = 0.1
"""Seconds the followers off the chats' path (the views, the relay) let a burst of saves
land before reading it: they lag the log by about this much while it is busy."""


class Follower:
    """Runs ``consume(notifications)`` for every batch after ``position()``."""

    def __init__(
        self,
        app: TetherApplication,
        *,
        name: str,
        position: Callable[[], int],
        consume: Callable[[Sequence[Any]], None],
        poll_interval: float = 0.5,
        settle: float = 0.0,
    ) -> None:
        self.app = app
        self.settle = settle
        self.name = name
        self._position = position
        self._consume = consume
        self.poll_interval = poll_interval
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._remove_listener: Callable[[], None] | None = None
        self.errors = 0

    def start(self) -> Follower:
        """Catch up in the background and keep following until stopped."""
        self._remove_listener = self.app.add_listener(lambda _: self._wake.set())
        self._thread = threading.Thread(target=self._run, name=f"follow-{self.name}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self.catch_up()
            except Exception:
                self.errors += 1
                log.exception("%s: catching up failed; will retry", self.name)
                self._stop.wait(min(5.0, self.poll_interval * 2 ** min(self.errors, 4)))
                continue
            if self._wake.wait(self.poll_interval) and self.settle:
                self._stop.wait(self.settle)

    def catch_up(self) -> int:
        """Process everything stored so far; returns how many notifications were handled."""
        handled = 0
        with self._lock:
            while not self._stop.is_set():
                start = self._position() + 1
                batch = self.app.recorder.select_notifications(start=start, limit=BATCH)
                if not batch:
                    break
                self._consume(batch)
                handled += len(batch)
                if len(batch) < BATCH:
                    break
        return handled

    def stop(self) -> None:
        """Stop following (the position stays recorded by the consumer)."""
        self._stop.set()
        self._wake.set()
        if self._remove_listener is not None:
            self._remove_listener()
        if self._thread is not None:
            self._thread.join(timeout=10)
