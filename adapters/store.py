"""Event-store configuration: the Tether application on SQLite or PostgreSQL.

SQLite (the default) keeps the event log in ``<state_dir>/events.db`` and each read model
in its own file beside it (the library's SQLite table names are fixed, so two models in
one file would share a ``tracking`` table). PostgreSQL, chosen by a ``postgresql://``
``database_url``, names its tables per application and per projection, so one database
holds everything; a ``?schema=`` parameter puts it all in one schema.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TypeVar

from tether.adapters.config import Settings, postgres_env, sqlite_path
from tether.events.application import TetherApplication
from tether.projections.view import TrackedView


def is_postgres(settings: Settings) -> bool:
    """True when the settings ask for PostgreSQL."""
    return settings.database_url.startswith(("postgresql://", "postgres://"))


def store_env(settings: Settings, purpose: str = "events") -> dict[str, str]:
    """eventsourcing environment for the event log (``events``) or a read model."""
    if is_postgres(settings):
        env = postgres_env(settings.database_url)
        env["PERSISTENCE_MODULE"] = "eventsourcing.postgres"
        return env
    if settings.database_url:
        events_path = sqlite_path(settings.database_url)
        os.makedirs(os.path.dirname(events_path) or ".", exist_ok=True)
    else:
        os.makedirs(settings.state_dir, exist_ok=True)
        events_path = os.path.join(settings.state_dir, "events.db")
    path = events_path if purpose == "events" else _beside(events_path, purpose)
    return {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "SQLITE_DBNAME": path,
        "SQLITE_LOCK_TIMEOUT": "30",
    }


def _beside(events_path: str, purpose: str) -> str:
    folder = os.path.dirname(events_path) or "."
    stem = os.path.splitext(os.path.basename(events_path))[0]
    return os.path.join(folder, f"{stem}-{purpose}.db")


V = TypeVar("V", bound=TrackedView)


def open_view(kind: type[V], app: TetherApplication, settings: Settings, purpose: str) -> V:
    """A read model of ``kind`` over ``app``, in its own SQLite file (``events-<purpose>``)
    or its own PostgreSQL tables."""
    with _one_at_a_time(settings):
        return kind(app, {**store_env(settings, purpose), "CREATE_TABLE": "true"})


def open_application(settings: Settings) -> TetherApplication:
    """The event-sourced application for these settings (tables created if missing)."""
    env = store_env(settings)
    env["CREATE_TABLE"] = "true"
    with _one_at_a_time(settings):
        return TetherApplication(env=env)


CREATING_TABLES = 0x7465746865720001
"""The PostgreSQL advisory lock (a bigint: "tether" and 1) held while tables are made."""


@contextlib.contextmanager
def _one_at_a_time(settings: Settings) -> Iterator[None]:
    """Make the tables of one store at a time across processes: on PostgreSQL, under a
    session advisory lock of the database. Its ``CREATE TABLE IF NOT EXISTS`` and ``CREATE
    OR REPLACE FUNCTION`` are not safe from two sessions at once: processes opening the
    store together (an engine starting while a command reads, two engines) failed with a
    duplicate key in its catalogue or "tuple concurrently updated". SQLite serialises them
    itself."""
    if not is_postgres(settings):
        yield
        return
    import psycopg

    env = postgres_env(settings.database_url)
    with psycopg.connect(
        dbname=env["POSTGRES_DBNAME"], host=env["POSTGRES_HOST"], port=env["POSTGRES_PORT"],
        user=env["POSTGRES_USER"], password=env["POSTGRES_PASSWORD"] or None,
        connect_timeout=int(env.get("POSTGRES_CONNECT_TIMEOUT") or 30), autocommit=True,
    ) as connection:
        connection.execute("SELECT pg_advisory_lock(%s)", (CREATING_TABLES,))
        yield  # the lock goes with the connection
