"""One NUL character in a notice's text must not wedge the notice outbox on PostgreSQL.

PostgreSQL ``text`` columns refuse NUL (0x00). The events are stored as bytea (fine),
but the outbox (and every view) copies strings from them into ``text`` columns: the
insert fails, the follower retries the same event forever, and the next engine start
fails in ``Host.start`` (it catches the outbox up before starting the router).

Two ways in, neither needs the engine role:
* a connector principal kills its own session with a reason holding a NUL
  (``<ns>.manager.<principal>``, the only manager subject it may publish on);
* the model reads a file whose first line holds a NUL (a SQLite database, a gzip or a
  UTF-16 file): the tool line "✓ read_file: SQLite format 3\\x00" is a notice.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import Engine
from tests.helpers import say, wait_until
from tether.actors.runtime import ask
from tether.events.messages import Killed, KillSession


def _outbox_reaches_the_head(host: Any) -> None:
    head = host.app.max_notification_id()
    wait_until(lambda: host.outbox.position() >= head, "the outbox reads every event",
               timeout=5)


def _engine_restarts(engine: Callable[..., Engine], host: Any) -> None:
    settings = host.settings
    host.stop()
    again, _, _ = engine(database_url=settings.database_url, state_dir=settings.state_dir)
    assert again.outbox.position() == again.app.max_notification_id()


def test_a_kill_reason_with_a_nul_does_not_wedge_the_outbox_on_postgres(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any],
    postgres_schema_url: str,
) -> None:
    host, _, _ = engine('responses:\n  - blocks: [{text: "hi"}]\n',
                        database_url=postgres_schema_url)
    test = watch_channel(host, "test")
    sid = say(host, "hello", user="mallory")  # mallory's own session
    test.wait_for("completed")
    # mallory's connector may publish on <ns>.manager.mallory only: that is enough.
    ask(host.bus, host.subjects.manager_for("mallory"),
        KillSession(session_id=sid, reason="bye\x00"), Killed)
    test.wait_for("status")
    _outbox_reaches_the_head(host)
    _engine_restarts(engine, host)


def test_reading_a_file_with_a_nul_does_not_wedge_the_outbox_on_postgres(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any],
    postgres_schema_url: str, workspace: Path,
) -> None:
    (workspace / "app.db").write_bytes(b"SQLite format 3\x00\x10\x00\x01\x01\x00@  \n")
    host, _, _ = engine("""
responses:
  - blocks: [{tool_use: {name: read_file, input: {path: "app.db"}}}]
  - blocks: [{text: "A SQLite database."}]
""", database_url=postgres_schema_url)
    test = watch_channel(host, "test")
    say(host, "what is app.db?")
    test.wait_for("completed")
    _outbox_reaches_the_head(host)
    _engine_restarts(engine, host)
