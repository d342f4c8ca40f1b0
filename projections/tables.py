"""Read-model tables kept exactly once, on SQLite or PostgreSQL.

A view declares its :class:`Table` s; :func:`recorder_class` makes a tracking recorder of
the library (SQLite or PostgreSQL) that also owns those tables. :meth:`apply` writes the
tracking record first and then every row change in the same transaction: taking the
write lock before reading means another process's commit cannot invalidate what was read
(SQLite would answer "database is locked" to a read-then-write in a plain ``BEGIN``), and
a position already applied raises ``IntegrityError`` and changes nothing. A batch of
positions (:meth:`apply_all`) is one transaction: one commit for all of them.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import msgspec
import psycopg
from eventsourcing.persistence import DataError, Tracking
from eventsourcing.postgres import PostgresTrackingRecorder
from eventsourcing.sqlite import SQLiteTrackingRecorder
from psycopg.sql import SQL, Composed, Identifier

ColumnType = Literal["text", "int", "real"]

_SQLITE_TYPES = {"text": "TEXT", "int": "INTEGER", "real": "REAL"}
_POSTGRES_TYPES = {"text": "text", "int": "bigint", "real": "double precision"}


def _pg(value: Any) -> Any:
    """A value PostgreSQL's ``text`` takes: NUL (which it refuses, failing the whole
    transaction, so a view would retry that event forever) becomes U+FFFD. The events
    keep the original (bytea); only the view's copy differs."""
    return value.replace("\x00", "\ufffd") if isinstance(value, str) else value

Row = dict[str, Any]
Update = Callable[[Row | None], Row | None]
"""Given the current row (None if absent), the new row (None: leave it as it is)."""


class Table(msgspec.Struct, frozen=True):
    """A read-model table: its name, typed columns and key columns."""

    name: str
    columns: tuple[tuple[str, ColumnType], ...]
    key: tuple[str, ...]

    @property
    def column_names(self) -> list[str]:
        return [name for name, _ in self.columns]


class Change(msgspec.Struct, frozen=True):
    """One row change: the row of ``table`` with ``key`` values, updated by ``update``."""

    table: str
    key: tuple[Any, ...]
    update: Update


class RowRefused(DataError):
    """A table of the view refused a row an event made (a constraint: a key PostgreSQL
    will not hold, say). The event's doing, not the store's, so it is passed over; taken
    for the tracking record's refusal (the position applied already), it would be lost
    without a word."""


_BY_A_CONSTRAINT = (sqlite3.IntegrityError, psycopg.IntegrityError)


class _Common:
    """What the SQLite and PostgreSQL recorders share."""

    TABLES: tuple[Table, ...] = ()
    datastore: Any

    def _table(self, name: str) -> Table:
        for table in self.TABLES:
            if table.name == name:
                return table
        raise KeyError(f"no table {name!r} in this view")

    def apply(self, changes: Sequence[Change], tracking: Tracking) -> None:
        """Record ``tracking`` and apply ``changes`` in one transaction."""
        self.apply_all([(changes, tracking)])

    def apply_all(self, batch: Sequence[tuple[Sequence[Change], Tracking]]) -> None:
        """Record each tracking record and apply its changes, in order, all in one
        transaction: if one position was applied already, nothing is.

        With the library's single-row tracking (its default, and Tether's), a tracking
        record is refused when its position is not past the one recorded, so recording
        the batch's first position refuses a batch any of which was applied, and its
        last records the whole batch: the positions between need no record of their own.
        A batch whose positions do not rise (repeated, out of order) records each, so it
        is refused whole.
        """
        positions = [tracking.notification_id for _, tracking in batch]
        every = not self.datastore.single_row_tracking or any(
            later <= earlier for earlier, later in itertools.pairwise(positions))
        last = len(batch) - 1
        with self.datastore.transaction(commit=True) as c:
            for i, (changes, tracking) in enumerate(batch):
                if every or i in (0, last):
                    self._insert_tracking(c, tracking)  # first: see the module docstring
                for change in changes:
                    table = self._table(change.table)
                    try:
                        current = self._select(c, table, change.key)
                        row = change.update(current)
                        if row is not None:
                            self._upsert(c, table, row)
                    except _BY_A_CONSTRAINT as exc:
                        raise RowRefused(f"{table.name} refused the row of key "
                                         f"{change.key!r}: {exc}") from exc

    def rows(self, table_name: str, where: Row | None = None, order: str = "") -> list[Row]:
        """Rows of a table, optionally filtered by equal column values and ordered by the
        comma-separated ``order`` columns (a leading ``-`` sorts descending)."""
        table = self._table(table_name)
        with self.datastore.transaction(commit=False) as c:
            return self._fetch(c, table, where or {}, order)

    if TYPE_CHECKING:  # provided by the library's tracking recorders

        def _insert_tracking(self, c: Any, tracking: Tracking) -> None: ...

    def _select(self, c: Any, table: Table, key: tuple[Any, ...]) -> Row | None:
        raise NotImplementedError  # pragma: no cover

    def _upsert(self, c: Any, table: Table, row: Row) -> None:
        raise NotImplementedError  # pragma: no cover

    def _fetch(self, c: Any, table: Table, where: Row, order: str) -> list[Row]:
        raise NotImplementedError  # pragma: no cover


def _order_terms(table: Table, order: str) -> list[tuple[str, bool]]:
    terms = []
    for part in filter(None, (p.strip() for p in order.split(","))):
        name = part.lstrip("-")
        if name not in table.column_names:
            raise KeyError(f"no column {name!r} in {table.name}")
        terms.append((name, part.startswith("-")))
    return terms


class SQLiteViewRecorder(_Common, SQLiteTrackingRecorder):
    """View tables and their tracking records in one SQLite file."""

    def construct_create_table_statements(self) -> list[str]:
        statements = super().construct_create_table_statements()
        for table in self.TABLES:
            columns = ", ".join(f"{n} {_SQLITE_TYPES[t]}" for n, t in table.columns)
            statements.append(
                f"CREATE TABLE IF NOT EXISTS {table.name} ({columns}, "
                f"PRIMARY KEY ({', '.join(table.key)}))"
            )
        return statements

    def _select(self, c: Any, table: Table, key: tuple[Any, ...]) -> Row | None:
        where = " AND ".join(f"{k} = ?" for k in table.key)
        c.execute(f"SELECT * FROM {table.name} WHERE {where}", key)
        found = c.fetchone()
        return dict(found) if found else None

    def _upsert(self, c: Any, table: Table, row: Row) -> None:
        names = table.column_names
        c.execute(
            f"INSERT OR REPLACE INTO {table.name} ({', '.join(names)}) "
            f"VALUES ({', '.join('?' for _ in names)})",
            [row[n] for n in names],
        )

    def _fetch(self, c: Any, table: Table, where: Row, order: str) -> list[Row]:
        sql = f"SELECT * FROM {table.name}"
        if where:
            sql += " WHERE " + " AND ".join(f"{k} = ?" for k in where)
        terms = _order_terms(table, order)
        if terms:
            sql += " ORDER BY " + ", ".join(f"{n} {'DESC' if d else 'ASC'}" for n, d in terms)
        c.execute(sql, list(where.values()))
        return [dict(r) for r in c.fetchall()]


class PostgresViewRecorder(_Common, PostgresTrackingRecorder):
    """View tables (``<view>_<table>``) and their tracking records in PostgreSQL."""

    def __init__(self, datastore: Any, **kwargs: Any) -> None:
        super().__init__(datastore, **kwargs)
        prefix = kwargs.get("tracking_table_name", "view_tracking").removesuffix("_tracking")
        self._names = {t.name: f"{prefix}_{t.name}" for t in self.TABLES}
        for table in self.TABLES:
            columns = SQL(", ").join(
                SQL("{} " + _POSTGRES_TYPES[t]).format(Identifier(n)) for n, t in table.columns
            )
            key = SQL(", ").join(Identifier(k) for k in table.key)
            self.sql_create_statements.append(
                SQL("CREATE TABLE IF NOT EXISTS {0} ({1}, PRIMARY KEY ({2}))").format(
                    self._qualified(table), columns, key
                )
            )

    def _qualified(self, table: Table) -> Composed:
        return SQL("{0}.{1}").format(
            Identifier(self.datastore.schema), Identifier(self._names[table.name])
        )

    def _select(self, c: Any, table: Table, key: tuple[Any, ...]) -> Row | None:
        where = SQL(" AND ").join(SQL("{} = %s").format(Identifier(k)) for k in table.key)
        c.execute(
            SQL("SELECT * FROM {0} WHERE {1} FOR UPDATE").format(self._qualified(table), where),
            [_pg(k) for k in key],
        )
        found = c.fetchone()
        return dict(found) if found else None

    def _upsert(self, c: Any, table: Table, row: Row) -> None:
        names = table.column_names
        others = [n for n in names if n not in table.key]
        update = SQL(", ").join(
            SQL("{0} = EXCLUDED.{0}").format(Identifier(n)) for n in others
        )
        statement = SQL("INSERT INTO {0} ({1}) VALUES ({2}) ON CONFLICT ({3}) DO ").format(
            self._qualified(table),
            SQL(", ").join(Identifier(n) for n in names),
            SQL(", ").join(SQL("%s") for _ in names),
            SQL(", ").join(Identifier(k) for k in table.key),
        )
        statement += SQL("UPDATE SET ") + update if others else SQL("NOTHING")
        c.execute(statement, [_pg(row[n]) for n in names])

    def _fetch(self, c: Any, table: Table, where: Row, order: str) -> list[Row]:
        sql = SQL("SELECT * FROM {0}").format(self._qualified(table))
        if where:
            sql += SQL(" WHERE ") + SQL(" AND ").join(
                SQL("{} = %s").format(Identifier(k)) for k in where
            )
        terms = _order_terms(table, order)
        if terms:
            sql += SQL(" ORDER BY ") + SQL(", ").join(
                SQL("{} " + ("DESC" if d else "ASC")).format(Identifier(n)) for n, d in terms
            )
        c.execute(sql, [_pg(v) for v in where.values()])
        return [dict(r) for r in c.fetchall()]


def recorder_class(base: type[Any], tables: tuple[Table, ...]) -> type[Any]:
    """A recorder class of ``base`` (:class:`SQLiteViewRecorder` or
    :class:`PostgresViewRecorder`) owning ``tables``."""
    return type(f"{base.__name__}For{'_'.join(t.name for t in tables)}", (base,),
                {"TABLES": tables})
