"""The session view: one row per session (name, status, turns, tokens, cost, activity).

:func:`apply_event` is the pure rule; :class:`SessionView` keeps the rows exactly once
(see :mod:`projections.view`). ``tether sessions`` reads it.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgspec

from tether.events.lifecycle import LEGACY_STATUSES
from tether.events.messages import SessionSummary
from tether.events.session import Session
from tether.projections.tables import Change, Row, Table
from tether.projections.view import TrackedView

ROW_FIELDS = tuple(SessionSummary.__struct_fields__)

SESSIONS = Table(
    "session_view",
    (
        ("session_id", "text"), ("name", "text"), ("status", "text"), ("turns", "int"),
        ("input_tokens", "int"), ("output_tokens", "int"), ("cost_usd", "real"),
        ("last_activity", "text"),
    ),
    key=("session_id",),
)


def apply_event(row: SessionSummary | None, event: Any) -> SessionSummary | None:
    """The session row after ``event`` (a Session domain event); None if no row yet."""
    if not isinstance(event, Session.Event):
        return row
    stamp = _stamp(getattr(event, "timestamp", None))
    if isinstance(event, Session.Created):
        return SessionSummary(
            session_id=event.session_id,
            name=event.name,
            status="starting",
            turns=0,
            input_tokens=0,
            output_tokens=0,
            cost_usd=0.0,
            last_activity=stamp,
        )
    if row is None:
        return None
    row = msgspec.structs.replace(row, last_activity=stamp or row.last_activity)
    match event:
        case Session.StatusChanged():
            return msgspec.structs.replace(
                row, status=LEGACY_STATUSES.get(event.status, event.status))
        case Session.AssistantMessageAppended():
            return msgspec.structs.replace(
                row,
                input_tokens=row.input_tokens + event.usage.input_tokens,
                output_tokens=row.output_tokens + event.usage.output_tokens,
            )
        case Session.TurnCompleted() | Session.TurnFailed():
            return msgspec.structs.replace(
                row, turns=row.turns + 1, cost_usd=row.cost_usd + event.cost_usd)
        case Session.TitleSet() | Session.HistoryCompacted() | Session.CompactionFailed():
            return msgspec.structs.replace(row, cost_usd=row.cost_usd + event.cost_usd)
    return row


def _stamp(value: Any) -> str:
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat(timespec="seconds")
    return ""


def _summary(row: Row) -> SessionSummary:
    return SessionSummary(**{k: row[k] for k in ROW_FIELDS})


class SessionView(TrackedView):
    """The session-view projection over a Tether application's log."""

    NAME = "SessionView"
    TABLES = (SESSIONS,)

    def changes(self, domain_event: Any, position: int) -> list[Change]:
        session_id = self._session_id(domain_event)
        if session_id is None:
            return []

        def update(current: Row | None) -> Row | None:
            row = apply_event(_summary(current) if current else None, domain_event)
            return msgspec.structs.asdict(row) if row is not None else None

        return [Change(SESSIONS.name, (session_id,), update)]

    def _session_id(self, domain_event: Any) -> str | None:
        if not isinstance(domain_event, Session.Event):
            return None
        return self.app.session_id_of(domain_event)

    def summary(self, session_id: str) -> SessionSummary | None:
        """One session's row, if the view has it."""
        rows = self.rows(SESSIONS.name, {"session_id": session_id})
        return _summary(rows[0]) if rows else None

    def summaries(self) -> list[SessionSummary]:
        """Every session, most recently active first."""
        return [_summary(r) for r in self.rows(SESSIONS.name, order="-last_activity,session_id")]
