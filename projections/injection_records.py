"""The injection records: every TTSR rule that fired, in which session, turn and stream.

One row per rule per trigger, from the RuleLog aggregates' ``TtsrTriggered`` events, kept
exactly once. ``tether rules injections`` and audits read it; the monitor itself restores
from its own RuleLog, so this view is for people and other programs.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgspec

from tether.events.ttsr import RuleLog
from tether.projections.tables import Change, Row, Table, Update
from tether.projections.view import TrackedView

INJECTIONS = Table(
    "injections",
    (
        ("notification_id", "int"), ("rule", "text"), ("session_id", "text"),
        ("turn", "int"), ("generation", "int"), ("source", "text"), ("offset_end", "int"),
        ("deferred", "int"), ("at", "text"),
    ),
    key=("notification_id", "rule"),
)


class InjectionRecord(msgspec.Struct, frozen=True):
    """One rule injected into a session."""

    session_id: str
    rule: str
    turn: int
    generation: int
    source: str
    offset_end: int
    deferred: bool
    at: str
    notification_id: int


def _replace_with(row: Row) -> Update:
    def update(_current: Row | None) -> Row:
        return row

    return update


class InjectionRecords(TrackedView):
    """The injection-records projection."""

    NAME = "InjectionRecords"
    TABLES = (INJECTIONS,)

    def changes(self, event: Any, position: int) -> list[Change]:
        if not isinstance(event, RuleLog.TtsrTriggered):
            return []
        domain_event = event
        session_id = self.app.session_id_of(domain_event) or ""
        stamp = domain_event.timestamp
        at = stamp.astimezone(dt.UTC).isoformat() if isinstance(stamp, dt.datetime) else ""
        changes = []
        for rule in domain_event.rules:
            row: Row = {
                "notification_id": position,
                "rule": rule,
                "session_id": session_id,
                "turn": domain_event.turn,
                "generation": domain_event.generation,
                "source": domain_event.source,
                "offset_end": domain_event.offset,
                "deferred": int(domain_event.deferred),
                "at": at,
            }
            changes.append(Change(INJECTIONS.name, (position, rule), _replace_with(row)))
        return changes

    def records(self, session_id: str | None = None) -> list[InjectionRecord]:
        """Injections, oldest first, of one session or of all."""
        where = {"session_id": session_id} if session_id else None
        rows = self.rows(INJECTIONS.name, where, order="at,notification_id,rule")
        return [
            InjectionRecord(
                session_id=r["session_id"], rule=r["rule"], turn=r["turn"],
                generation=r["generation"], source=r["source"], offset_end=r["offset_end"],
                deferred=bool(r["deferred"]), at=r["at"],
                notification_id=r["notification_id"],
            )
            for r in rows
        ]
