"""The time an aggregate's events are stamped with.

A library aggregate stamps each event with the wall clock. A decision that must give the
same events for the same inputs (the session's pure core) stamps them with the time it was
given instead: inside ``with stamped(now):`` the events an aggregate using
:func:`stamped_trigger` records carry ``now``; outside, the wall clock as before.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from eventsourcing.domain import Aggregate

_NOW: ContextVar[dt.datetime | None] = ContextVar("tether_event_time", default=None)


@contextlib.contextmanager
def stamped(now: dt.datetime) -> Iterator[None]:
    """Stamp the events recorded in this block (on this thread) with ``now``."""
    token = _NOW.set(now)
    try:
        yield
    finally:
        _NOW.reset(token)


def stamped_trigger(aggregate: Aggregate, event_class: Any, **kwargs: Any) -> None:
    """``Aggregate.trigger_event`` with the block's time, when one was given."""
    now = _NOW.get()
    if now is not None and kwargs.get("timestamp") is None:
        kwargs["timestamp"] = now
    Aggregate.trigger_event(aggregate, event_class, **kwargs)
