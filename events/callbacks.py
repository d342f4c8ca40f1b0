"""Callbacks that threads add, remove and call: a save's listeners, a settler's followers."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, ParamSpec

__all__ = ["Callbacks"]

P = ParamSpec("P")


class Callbacks(Generic[P]):
    """Callbacks added and removed from any thread; :meth:`call` calls those added, in
    order, outside the lock (one may add or remove callbacks)."""

    def __init__(self) -> None:
        self._callbacks: list[Callable[P, None]] = []
        self._lock = threading.Lock()

    def add(self, callback: Callable[P, None]) -> Callable[[], None]:
        """Add ``callback``; returns a remover."""
        with self._lock:
            self._callbacks.append(callback)

        def remove() -> None:
            with self._lock:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)

        return remove

    def call(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Call each callback added, in the order added."""
        with self._lock:
            callbacks = list(self._callbacks)
        for callback in callbacks:
            callback(*args, **kwargs)
