"""The event store and the view recorder, as every backend must keep them.

Each contract is an abstract test class (its name does not start with ``Test``, so pytest
does not collect it), subclassed once per backend with the fixture that opens it: SQLite,
PostgreSQL. A new backend passes these before it is trusted, as the eventsourcing library's
own recorder test cases are meant to be used.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from eventsourcing.domain import EventSourcingError
from eventsourcing.persistence import IntegrityError, OperationalError, Tracking

from tether.adapters.config import Settings
from tether.adapters.store import open_application, open_view
from tether.events.application import TetherApplication
from tether.events.messages import TextBlock, Usage
from tether.events.session import Session
from tether.projections.tables import Change, Row, Table
from tether.projections.view import APPLICATION, TrackedView


def a_session(sid: str = "contract") -> Session:
    session = Session(session_id=sid, name="contract", workspace="/ws", model="m", channel="c")
    session.receive_user_message(text="hello", channel="c", user="ana")
    session.append_assistant_message(content=[TextBlock("hi")], stop_reason="end_turn",
                                     usage=Usage(3, 1), generation=1)
    return session


class EventStoreContract:
    """What Tether needs of an event store: typed round trips, optimistic concurrency,
    notifications in order, listeners told after each save, historical versions."""

    @pytest.fixture
    def settings(self) -> Settings:
        raise NotImplementedError

    @pytest.fixture
    def app(self) -> TetherApplication:
        raise NotImplementedError

    def test_a_saved_aggregate_loads_back_equal_and_typed(self, app: TetherApplication) -> None:
        session = a_session()
        app.save(session)
        loaded = app.session("contract")
        assert loaded == session and loaded is not session
        assert isinstance(loaded.history[1].content[0], TextBlock)

    def test_a_stale_copy_cannot_overwrite_newer_events(self, app: TetherApplication) -> None:
        app.save(a_session())
        first, second = app.session("contract"), app.session("contract")
        assert first is not None and second is not None
        first.change_status(status="running", reason="one writer")
        app.save(first)
        second.change_status(status="killed", reason="another writer")
        with pytest.raises(IntegrityError):
            app.save(second)
        stored = app.session("contract")
        assert stored is not None and stored.status == "running"

    def test_notifications_are_numbered_in_the_order_saved(self, app: TetherApplication) -> None:
        told: list[int] = []
        app.add_listener(told.append)
        for sid in ("a", "b", "c"):
            app.save(a_session(sid))
        notes = app.recorder.select_notifications(start=1, limit=100)
        assert [n.id for n in notes] == sorted(n.id for n in notes)
        assert len(notes) == 9 and told == [notes[2].id, notes[5].id, notes[8].id]
        assert app.max_notification_id() == notes[-1].id

    def test_processes_opening_it_at_once_all_open_it(self, settings: Settings) -> None:
        # An engine starting while a command reads, or two engines: each opens the store
        # (and makes its tables if missing) on its own connections, as threads do here.
        for round_ in ("tables made by the first", "tables there already"):
            opened, failed = _open_at_once(settings, 6)
            try:
                assert failed == [], round_
                opened[0].save(a_session(round_))
                assert opened[-1].session(round_) is not None
            finally:
                for application in opened:
                    application.close()

    def test_an_earlier_version_is_a_replay_up_to_it(self, app: TetherApplication) -> None:
        app.save(a_session())
        early = app.session("contract", version=2)
        assert early is not None and early.version == 2 and len(early.history) == 1
        beyond = app.session("contract", version=99)  # past the end: as it stands
        assert beyond is not None and beyond == app.session("contract")
        assert app.session("missing") is None


def _open_at_once(settings: Settings, n: int) -> tuple[list[TetherApplication],
                                                      list[Exception]]:
    """Open the application from ``n`` threads at the same moment: those opened, and
    what the others raised."""
    opened: list[TetherApplication] = []
    failed: list[Exception] = []
    together = threading.Barrier(n)

    def open_it() -> None:
        together.wait()
        try:
            opened.append(open_application(settings))
        except Exception as exc:
            failed.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return opened, failed


def _saved_session_notes(view: TrackedView) -> list[Any]:
    """Save a session's three events; their notifications, in order."""
    view.app.save(a_session())
    return list(view.app.recorder.select_notifications(start=1, limit=100))


W = TypeVar("W", bound=TrackedView)


def _as(kind: type[W], view: TrackedView) -> W:
    """``view`` (its application and recorder) with the changes of ``kind``."""
    other = kind.__new__(kind)
    vars(other).update(vars(view))
    return other


COUNTS = Table("counts", (("name", "text"), ("n", "int")), key=("name",))


class Counter(TrackedView):
    """A view of one table: how many events each aggregate kind recorded."""

    NAME = "ContractCounter"
    TABLES = (COUNTS,)

    def changes(self, domain_event: Any, position: int) -> list[Change]:
        name = type(domain_event).__qualname__.split(".")[0]
        return [Change(COUNTS.name, (name,), lambda row: {
            "name": name, "n": (row["n"] if row else 0) + 1})]


class ViewRecorderContract:
    """What a view recorder must keep: each position applied exactly once, its row changes
    and its tracking record in one transaction."""

    @pytest.fixture
    def view(self) -> TrackedView:
        raise NotImplementedError

    def test_changes_apply_with_their_position_once(self, view: TrackedView) -> None:
        bump = Change(COUNTS.name, ("x",), lambda row: {"name": "x",
                                                         "n": (row["n"] if row else 0) + 1})
        view.recorder.apply([bump, bump], Tracking(APPLICATION, 1))
        assert view.rows(COUNTS.name) == [{"name": "x", "n": 2}]
        assert view.position() == 1
        with pytest.raises(IntegrityError):
            view.recorder.apply([bump], Tracking(APPLICATION, 1))
        assert view.rows(COUNTS.name) == [{"name": "x", "n": 2}]

    def test_a_change_that_fails_leaves_neither_rows_nor_position(
            self, view: TrackedView) -> None:
        def broken(row: Row | None) -> Row:
            raise RuntimeError("the change failed")

        good = Change(COUNTS.name, ("y",), lambda row: {"name": "y", "n": 1})
        with pytest.raises(RuntimeError):
            view.recorder.apply([good, Change(COUNTS.name, ("z",), broken)],
                                Tracking(APPLICATION, 7))
        assert view.rows(COUNTS.name) == [] and view.position() == 0

    def test_consume_applies_each_notification_once(self, view: TrackedView) -> None:
        notes = _saved_session_notes(view)
        view.consume(notes)
        view.consume(notes)  # again, as a second follower would
        assert view.rows(COUNTS.name) == [{"name": "Session", "n": 3}]
        assert view.position() == notes[-1].id

    def test_an_event_no_change_can_be_made_of_is_passed_over_and_said(
            self, view: TrackedView, caplog: pytest.LogCaptureFixture) -> None:
        notes = _saved_session_notes(view)
        choosy = _as(_Choosy, view)  # the same recorder, failing on one event
        with caplog.at_level(logging.ERROR, logger="tether.projections.view"):
            choosy.consume(notes)
        assert view.rows(COUNTS.name) == [{"name": "Session", "n": 2}]
        assert view.position() == notes[-1].id
        [passed] = view.passed_over()  # recorded with the view: a query can say so
        assert passed["position"] == notes[1].id and "cannot count this one" in passed["error"]
        assert passed["topic"].endswith("UserMessageReceived")
        assert any(f"position {notes[1].id}" in r.getMessage() for r in caplog.records)

    def test_a_batch_partly_applied_already_applies_the_rest_once(
            self, view: TrackedView) -> None:
        notes = _saved_session_notes(view)
        view.consume(notes[:2])
        view.consume(notes)  # a follower that read its batch before another applied some
        assert view.rows(COUNTS.name) == [{"name": "Session", "n": 3}]
        assert view.position() == notes[-1].id

    def test_a_row_the_view_cannot_make_is_passed_over_and_the_rest_applied(
            self, view: TrackedView) -> None:
        notes = _saved_session_notes(view)
        failing = _as(_FailingRow, view)
        failing.consume(notes)  # one batch: its one transaction cannot hold them all
        assert view.rows(COUNTS.name) == [{"name": "Session", "n": 2}]
        assert view.position() == notes[-1].id
        [passed] = view.passed_over()
        assert passed["position"] == notes[1].id and "no row for this" in passed["error"]

    def test_a_batch_that_repeats_a_position_applies_it_once(
            self, view: TrackedView) -> None:
        notes = _saved_session_notes(view)
        view.consume([notes[0], notes[1], notes[1], notes[2]])
        assert view.rows(COUNTS.name) == [{"name": "Session", "n": 3}]
        assert view.position() == notes[-1].id

    def test_a_store_read_that_fails_while_planning_is_not_passed_over(
            self, view: TrackedView) -> None:
        notes = _saved_session_notes(view)
        reading = _as(_FailingRead, view)  # changes() reads the store, which fails once
        with pytest.raises(OperationalError):
            reading.consume(notes)
        assert view.passed_over() == [] and view.position() == 0  # raised, to be tried again
        view.consume(notes)
        assert view.rows(COUNTS.name) == [{"name": "Session", "n": 3}]

    def test_a_row_the_table_refuses_is_kept_or_passed_over_never_lost(
            self, view: TrackedView) -> None:
        notes = _saved_session_notes(view)
        keyless = _as(_KeylessRow, view)  # one event's row has no key (NULL)
        keyless.consume(notes)
        assert view.position() == notes[-1].id
        kept = [r for r in view.rows(COUNTS.name) if r["name"] is None]
        passed = [p["position"] for p in view.passed_over()]
        assert (kept, passed) in (([{"name": None, "n": 1}], []), ([], [notes[1].id]))
        assert {"name": "Session", "n": 2} in view.rows(COUNTS.name)

    def test_a_store_that_fails_is_not_passed_over(self, view: TrackedView) -> None:
        notes = _saved_session_notes(view)
        view.consume(notes[:1])
        view.close()  # the view's database is gone from under it
        with pytest.raises(EventSourcingError):
            view.consume(notes[1:])


class _Backend:
    """Opens the application and the view on the backend ``url`` names."""

    url: str = ""

    @pytest.fixture
    def settings(self, make_settings: Callable[..., Settings]) -> Settings:
        return make_settings(database_url=self.url)

    @pytest.fixture
    def app(self, settings: Settings) -> Iterator[TetherApplication]:
        application = open_application(settings)
        yield application
        application.close()

    @pytest.fixture
    def view(self, app: TetherApplication, settings: Settings) -> Iterator[TrackedView]:
        counter = open_view(Counter, app, settings, "contract")
        yield counter
        counter.close()


class _PostgresBackend(_Backend):
    @pytest.fixture
    def settings(self, make_settings: Callable[..., Settings],
                 postgres_schema_url: str) -> Settings:
        return make_settings(database_url=postgres_schema_url)


class TestSQLiteEventStore(_Backend, EventStoreContract):
    pass


class TestPostgresEventStore(_PostgresBackend, EventStoreContract):
    pass


class TestSQLiteViewRecorder(_Backend, ViewRecorderContract):
    pass


class TestPostgresViewRecorder(_PostgresBackend, ViewRecorderContract):
    pass


class _Choosy(Counter):
    """A counter whose code fails on one kind of event."""

    def changes(self, domain_event: Any, position: int) -> list[Change]:
        if isinstance(domain_event, Session.UserMessageReceived):
            raise ValueError("cannot count this one")
        return super().changes(domain_event, position)


class _FailingRow(Counter):
    """A counter whose row update fails (inside the applying transaction) on one kind of
    event."""

    def changes(self, domain_event: Any, position: int) -> list[Change]:
        if not isinstance(domain_event, Session.UserMessageReceived):
            return super().changes(domain_event, position)

        def fail(row: Row | None) -> Row:
            raise ValueError("no row for this")

        return [Change(COUNTS.name, ("Session",), fail)]


class _FailingRead(Counter):
    """A counter whose ``changes`` reads the store (as the views' session lookups do),
    and the read fails: the store's fault, not the event's."""

    def changes(self, domain_event: Any, position: int) -> list[Change]:
        if isinstance(domain_event, Session.UserMessageReceived):
            raise OperationalError("database is locked")
        return super().changes(domain_event, position)


class _KeylessRow(Counter):
    """A counter that makes a row without a key for one kind of event (SQLite keeps it;
    PostgreSQL's key columns refuse a NULL)."""

    def changes(self, domain_event: Any, position: int) -> list[Change]:
        if isinstance(domain_event, Session.UserMessageReceived):
            return [Change(COUNTS.name, (None,), lambda row: {"name": None, "n": 1})]
        return super().changes(domain_event, position)
