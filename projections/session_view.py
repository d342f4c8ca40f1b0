"""The session view: one row per session (name, status, turns, tokens, cost, activity).

Exactly once: each event's row change and its tracking record are written in one
transaction of a tracking recorder (eventsourcing's single-row tracking refuses a position
already applied), so a crash between the two cannot count an event twice or skip it.
:func:`apply_event` is the pure rule; the recorders only store rows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
from eventsourcing.persistence import InfrastructureFactory, IntegrityError, Tracking
from eventsourcing.postgres import PostgresTrackingRecorder
from eventsourcing.sqlite import SQLiteTrackingRecorder
from eventsourcing.utils import Environment
from psycopg.sql import SQL, Identifier

from events.application import TetherApplication
from events.messages import SessionSummary
from events.session import Session

APPLICATION = TetherApplication.name

ROW_FIELDS = tuple(SessionSummary.__struct_fields__)


def apply_event(row: SessionSummary | None, event: Any) -> SessionSummary | None:
    """The session row after ``event`` (a Session domain event); None if no row yet."""
    stamp = _stamp(getattr(event, "timestamp", None))
    kind = session_event_name(event)
    if kind == "Created":
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
    if kind == "StatusChanged":
        return msgspec.structs.replace(row, status=event.status)
    if kind == "AssistantMessageAppended":
        return msgspec.structs.replace(
            row,
            input_tokens=row.input_tokens + event.usage.input_tokens,
            output_tokens=row.output_tokens + event.usage.output_tokens,
        )
    if kind == "TurnCompleted":
        return msgspec.structs.replace(
            row, turns=row.turns + 1, cost_usd=row.cost_usd + event.cost_usd
        )
    if kind == "TurnFailed":
        return msgspec.structs.replace(row, turns=row.turns + 1)
    return row


def session_event_name(event: Any) -> str:
    """The event's name (``Created``, ``TurnCompleted``...) if it is a Session event, else ""."""
    if not isinstance(event, Session.Event):
        return ""
    return type(event).__name__


def _stamp(value: Any) -> str:
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat(timespec="seconds")
    return ""


Update = Callable[[SessionSummary | None], SessionSummary | None]


class SQLiteSessionViewRecorder(SQLiteTrackingRecorder):
    """Session rows and their tracking records in one SQLite file."""

    def construct_create_table_statements(self) -> list[str]:
        statements = super().construct_create_table_statements()
        statements.append(
            "CREATE TABLE IF NOT EXISTS session_view ("
            "session_id TEXT PRIMARY KEY, name TEXT, status TEXT, turns INTEGER, "
            "input_tokens INTEGER, output_tokens INTEGER, cost_usd REAL, last_activity TEXT)"
        )
        return statements

    def apply(self, session_id: str | None, update: Update, tracking: Tracking) -> None:
        """Update one row (if any) and record ``tracking`` in the same transaction."""
        with self.datastore.transaction(commit=True) as c:
            # Write first: the tracking insert takes the write lock before anything is
            # read, so another process's commit cannot invalidate what we read (SQLite
            # would answer "database is locked" to a read-then-write in a plain BEGIN).
            self._insert_tracking(c, tracking)
            if session_id is not None:
                c.execute("SELECT * FROM session_view WHERE session_id = ?", (session_id,))
                found = c.fetchone()
                row = update(_row(dict(found)) if found else None)
                if row is not None:
                    c.execute(
                        "INSERT OR REPLACE INTO session_view VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        msgspec.structs.astuple(row),
                    )

    def rows(self) -> list[SessionSummary]:
        """Every session, most recently active first."""
        with self.datastore.transaction(commit=False) as c:
            c.execute("SELECT * FROM session_view ORDER BY last_activity DESC, session_id")
            return [_row(dict(r)) for r in c.fetchall()]


class PostgresSessionViewRecorder(PostgresTrackingRecorder):
    """Session rows and their tracking records in PostgreSQL."""

    def __init__(self, datastore: Any, **kwargs: Any) -> None:
        super().__init__(datastore, **kwargs)
        self.view_table = kwargs.get("tracking_table_name", "sessionview_tracking").replace(
            "_tracking", "_rows"
        )
        self.sql_create_statements.append(
            SQL(
                "CREATE TABLE IF NOT EXISTS {0}.{1} ("
                "session_id text PRIMARY KEY, name text, status text, turns integer, "
                "input_tokens bigint, output_tokens bigint, cost_usd double precision, "
                "last_activity text)"
            ).format(Identifier(self.datastore.schema), Identifier(self.view_table))
        )

    def _table(self) -> Any:
        return SQL("{0}.{1}").format(Identifier(self.datastore.schema), Identifier(self.view_table))

    def apply(self, session_id: str | None, update: Update, tracking: Tracking) -> None:
        """Update one row (if any) and record ``tracking`` in the same transaction."""
        with self.datastore.transaction(commit=True) as c:
            self._insert_tracking(c, tracking)  # first, as on SQLite
            if session_id is not None:
                c.execute(
                    SQL("SELECT * FROM {0} WHERE session_id = %s FOR UPDATE").format(
                        self._table()
                    ),
                    (session_id,),
                )
                found = c.fetchone()
                row = update(_row(dict(found)) if found else None)
                if row is not None:
                    c.execute(
                        SQL(
                            "INSERT INTO {0} VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
                            "ON CONFLICT (session_id) DO UPDATE SET name = EXCLUDED.name, "
                            "status = EXCLUDED.status, turns = EXCLUDED.turns, "
                            "input_tokens = EXCLUDED.input_tokens, "
                            "output_tokens = EXCLUDED.output_tokens, "
                            "cost_usd = EXCLUDED.cost_usd, last_activity = EXCLUDED.last_activity"
                        ).format(self._table()),
                        msgspec.structs.astuple(row),
                    )

    def rows(self) -> list[SessionSummary]:
        """Every session, most recently active first."""
        with self.datastore.transaction(commit=False) as c:
            c.execute(
                SQL("SELECT * FROM {0} ORDER BY last_activity DESC, session_id").format(
                    self._table()
                )
            )
            return [_row(dict(r)) for r in c.fetchall()]


def _row(values: dict[str, Any]) -> SessionSummary:
    return SessionSummary(**{k: values[k] for k in ROW_FIELDS})


class SessionView:
    """The session-view projection over a Tether application's log."""

    def __init__(self, app: TetherApplication, env: dict[str, str]) -> None:
        self.app = app
        factory = InfrastructureFactory.construct(Environment("SessionView", env))
        recorder_class: type[Any] = (
            PostgresSessionViewRecorder
            if env.get("PERSISTENCE_MODULE") == "eventsourcing.postgres"
            else SQLiteSessionViewRecorder
        )
        self.factory = factory
        self.recorder: Any = factory.tracking_recorder(recorder_class)
        self._sessions: dict[Any, str] = {}

    def position(self) -> int:
        """The last notification id applied (0 before the first)."""
        return self.recorder.max_tracking_id(APPLICATION) or 0

    def consume(self, notifications: Sequence[Any]) -> None:
        """Apply a batch of notifications, each exactly once."""
        for notification in notifications:
            tracking = Tracking(APPLICATION, notification.id)
            domain_event = self.app.mapper.to_domain_event(notification)
            session_id = self._session_id(domain_event)
            try:
                self.recorder.apply(
                    session_id, lambda row, e=domain_event: apply_event(row, e), tracking
                )
            except IntegrityError:
                continue  # already applied (another follower got there first)

    def _session_id(self, domain_event: Any) -> str | None:
        # Session events other than Created carry only the aggregate's UUID.
        if session_event_name(domain_event) == "Created":
            self._sessions[domain_event.originator_id] = domain_event.session_id
            return domain_event.session_id
        if not isinstance(domain_event, Session.Event):
            return None
        sid = self._sessions.get(domain_event.originator_id)
        if sid is None:
            first = next(iter(self.app.events.get(domain_event.originator_id, lte=1)), None)
            sid = getattr(first, "session_id", None)
            if sid is not None:
                self._sessions[domain_event.originator_id] = sid
        return sid

    def rows(self) -> list[SessionSummary]:
        """The view's rows, most recently active first."""
        rows: list[SessionSummary] = self.recorder.rows()
        return rows

    def close(self) -> None:
        """Release the view's database connections."""
        self.factory.close()
