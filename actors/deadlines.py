"""Deadlines: functions called at a monotonic time, on one thread of their own.

What the in-process asks use for their timeouts. Setting a deadline wakes nobody unless
it comes before the thread's next wake-up (which is at most :data:`IDLE` seconds away),
so an ask that is answered in time costs a heap push, not a task on the bus's loop and
two wake-ups of it. A deadline is never withdrawn: its function must do nothing when
it is no longer needed (an ask answered already is not answered again).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable

__all__ = ["IDLE", "Deadlines"]

log = logging.getLogger(__name__)

IDLE = 1.0
"""Seconds the thread sleeps at most between looks at its deadlines."""


class Deadlines:
    """Calls each function given to :meth:`at` once its deadline has passed, in deadline
    order, on a daemon thread started with the first deadline. A function that raises
    is logged; the others still run."""

    def __init__(self, name: str = "deadlines",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.clock = clock
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._changed = threading.Condition()
        self._wakes_at = math.inf
        self._thread: threading.Thread | None = None
        self._stopped = False

    def at(self, deadline: float, call: Callable[[], None]) -> None:
        """Call ``call`` once the clock (``time.monotonic`` unless another was given) has
        reached ``deadline``."""
        with self._changed:
            if self._stopped:
                return
            heapq.heappush(self._heap, (deadline, next(self._order), call))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name,
                                                 daemon=True)
                self._thread.start()
            elif deadline < self._wakes_at:
                self._changed.notify()

    def look(self) -> None:
        """Look at the deadlines now: for a clock that moves otherwise than time does."""
        with self._changed:
            self._changed.notify()

    def stop(self) -> None:
        """Call nothing more (what is due is dropped)."""
        with self._changed:
            self._stopped = True
            self._heap.clear()
            self._changed.notify()

    def _run(self) -> None:
        while True:
            with self._changed:
                now = self.clock()
                due = []
                while self._heap and self._heap[0][0] <= now:
                    due.append(heapq.heappop(self._heap)[2])
                if not due:
                    if self._stopped:
                        return
                    self._wakes_at = min(self._heap[0][0] if self._heap else math.inf,
                                         now + IDLE)
                    self._changed.wait(self._wakes_at - now)
                    continue
            for call in due:
                try:
                    call()
                except Exception:
                    log.exception("%s: a deadline's call failed", self.name)
