"""The session a log line concerns, carried by the context rather than by each call.

An actor binds the session it is working for (:func:`bound_session`): a session's own
actors for their whole life, shared actors (the manager, the gatekeeper) while they handle
a message about one session. :class:`SessionFilter`, on a handler, stamps each record
with that ``session_id`` (a record given ``extra={"session_id": ...}`` keeps its own).
Threads do not inherit the binding: start one with ``contextvars.copy_context().run``
to keep it, as asyncio tasks do by themselves.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from contextvars import ContextVar

__all__ = ["SessionFilter", "bind_session", "bound_session", "current_session"]

_SESSION: ContextVar[str] = ContextVar("tether_log_session", default="")


def current_session() -> str:
    """The session bound in this context ("" when none is)."""
    return _SESSION.get()


def bind_session(session_id: str) -> None:
    """Bind ``session_id`` for the rest of this context (an actor's thread)."""
    _SESSION.set(session_id)


@contextlib.contextmanager
def bound_session(session_id: str) -> Iterator[None]:
    """Bind ``session_id`` inside the ``with`` block (nothing changes when it is "")."""
    if not session_id:
        yield
        return
    token = _SESSION.set(session_id)
    try:
        yield
    finally:
        _SESSION.reset(token)


class SessionFilter(logging.Filter):
    """Gives each record the ``session_id`` bound where it was logged, if any."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "session_id", "") and (session := _SESSION.get()):
            record.session_id = session
        return True
