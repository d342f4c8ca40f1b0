"""Follows the event log: reads new notifications in order and hands them to a consumer.

The SQLite recorder cannot push (no LISTEN/NOTIFY), so a follower is a small loop over
``select_notifications`` woken right after each save in this process (the application's
listener) and polling every ``poll_interval`` seconds for writes by other processes. A
follower off the chats' path may ``settle``: once woken, it waits that long before reading,
so a burst of saves (a turn makes several) is read and applied as one batch instead of
competing with the turn after each save. The engine's followers share a :class:`Settler`
instead: a save then wakes no thread at all (each wake-up on a save's path took the
interpreter from the turn that saved), and one thread wakes them all ``settle`` seconds
after the first save of a burst. The consumer owns the position: it says where to start
and records progress itself (tracking records, or JetStream for the relay), so a restart
resumes where it stopped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from tether.events.application import TetherApplication
from tether.events.callbacks import Callbacks

log = logging.getLogger(__name__)

BATCH = 200

SETTLE = 0.1
"""Seconds the followers off the chats' path (the views, the relay) let a burst of saves
land before reading it: they lag the log by about this much while it is busy."""


class Settler:
    """Wakes followers ``settle`` seconds after the first save of a burst, from one thread.

    A save notes when the burst began; the first save of a burst also wakes the settler's
    thread (no follower is woken on the saving thread), which sleeps until the burst is
    ``settle`` old, then wakes every follower added to it. Saves of the same burst are read
    in that one batch, later ones start the next burst. An idle engine's settler sleeps
    until the next save.
    """

    def __init__(self, app: TetherApplication, settle: float = SETTLE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.app = app
        self.settle = settle
        self.clock = clock
        self._since: float | None = None
        """When the first save not yet handed to the followers was made (None: none)."""
        self._wakes: Callbacks[[]] = Callbacks()
        self._burst = threading.Event()
        """Set by the first save of a burst (and by stop): the settler's thread goes on."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._remove_listener: Callable[[], None] | None = None

    def add(self, wake: Callable[[], None]) -> Callable[[], None]:
        """Call ``wake`` once each burst has settled; returns a remover."""
        return self._wakes.add(wake)

    def listen(self) -> Settler:
        """Note the application's saves, without the thread that acts on them: then
        :meth:`look` does (what the tests drive on an injected clock)."""
        if self._remove_listener is None:
            self._remove_listener = self.app.add_listener(self._saved)
        return self

    def start(self) -> Settler:
        """Note the application's saves and wake the followers after each burst."""
        self.listen()
        self._thread = threading.Thread(target=self._run, name="settler", daemon=True)
        self._thread.start()
        return self

    def _saved(self, _: int) -> None:
        if self._since is None:
            self._since = self.clock()
            self._burst.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._burst.wait()
            # Cleared before looking: a burst that begins after the look below set it
            # again, so it is not missed (a burst always sets it while _since is None).
            self._burst.clear()
            try:
                delay = self.look()
                while delay is not None and not self._stop.wait(delay):
                    delay = self.look()
            except Exception:  # a wake-up that failed must not end the wake-ups to come
                log.exception("settler: waking the followers failed")

    def look(self) -> float | None:
        """Wake the followers if a burst began ``settle`` seconds ago or more; returns the
        seconds until the next look, or None when no burst waits (the next save's)."""
        since = self._since
        if since is None:
            return None
        left = since + self.settle - self.clock()
        if left > 0:
            return left
        # Cleared before the wake-ups: a save noted after this is read by these
        # followers or, if they read before it, starts the next burst.
        self._since = None
        self.wake_all()
        return None

    def wake_all(self) -> None:
        """Wake every follower now."""
        self._wakes.call()

    def stop(self) -> None:
        """Stop noting saves and waking followers."""
        _end(self._stop, self._burst, self._remove_listener, self._thread)


class Follower:
    """Runs ``consume(notifications)`` for every batch after ``position()``: woken after
    each save (after ``settle`` seconds), or by ``settler`` when one is given."""

    def __init__(
        self,
        app: TetherApplication,
        *,
        name: str,
        position: Callable[[], int],
        consume: Callable[[Sequence[Any]], None],
        poll_interval: float = 0.5,
        settle: float = 0.0,
        settler: Settler | None = None,
    ) -> None:
        self.app = app
        self.settle = 0.0 if settler is not None else settle
        self.settler = settler
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
        self._remove_listener = (self.settler.add(self._wake.set) if self.settler is not None
                                 else self.app.add_listener(lambda _: self._wake.set()))
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
        _end(self._stop, self._wake, self._remove_listener, self._thread)


def _end(stop: threading.Event, wake: threading.Event, remove: Callable[[], None] | None,
         thread: threading.Thread | None) -> None:
    """End a waking thread: tell it to stop, wake it from its wait, stop what woke it,
    and wait for it (at most 10 s)."""
    stop.set()
    wake.set()
    if remove is not None:
        remove()
    if thread is not None:
        thread.join(timeout=10)
