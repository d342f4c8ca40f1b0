"""The event relay copies the store's log to JetStream exactly once, in order, across
restarts, on SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import pytest

from adapters.config import Settings
from adapters.nats_bus import NatsBus
from adapters.relay import NOTIFICATION_HEADER, EventRelay
from adapters.store import open_application
from events.application import TetherApplication
from events.decisions import ToolDecision, decision_uuid
from events.messages import RelayedEvent
from events.session import Session
from events.subjects import Subjects


class Env(msgspec.Struct):
    app: TetherApplication
    bus: NatsBus
    subjects: Subjects


@pytest.fixture
def env(
    database_url: str, make_settings: Callable[..., Settings], nats_url: str, namespace: str
) -> Iterator[Env]:
    settings = make_settings(database_url=database_url)
    app = open_application(settings)
    bus = NatsBus(nats_url, name="test-relay")
    subjects = Subjects(namespace)
    try:
        yield Env(app, bus, subjects)
    finally:

        async def drop() -> None:
            # The stream may not exist if a test failed early.
            with contextlib.suppress(Exception):
                await bus.js.delete_stream(subjects.events_stream)

        bus.call(drop)
        bus.close()
        app.close()


def _store_session(app: TetherApplication, sid: str) -> None:
    session = Session(session_id=sid, name=sid, workspace="/w", model="m", channel="c")
    session.receive_user_message(text=f"hello {sid}", channel="c", user="u")
    app.save(session)


def _store_decision(app: TetherApplication, call_id: str) -> None:
    app.save(
        ToolDecision(
            call_id=call_id,
            session_id="s",
            tool="read_file",
            tool_input={"path": "x"},
            action_hash="h",
            decision="allow",
            reason="ok",
            tier="policy",
        )
    )


def _stream_contents(env: Env) -> tuple[int, list[tuple[str, dict[str, str], RelayedEvent]]]:
    """(messages the stream holds, every message in stream order)."""

    async def fetch() -> tuple[int, list[tuple[str, dict[str, str], RelayedEvent]]]:
        info = await env.bus.js.stream_info(env.subjects.events_stream)
        count = info.state.messages
        out: list[tuple[str, dict[str, str], RelayedEvent]] = []
        sub = await env.bus.js.subscribe(env.subjects.all_events, ordered_consumer=True)
        try:
            while len(out) < count:
                msg = await sub.next_msg(timeout=10)
                event = msgspec.json.decode(msg.data, type=RelayedEvent)
                out.append((msg.subject, dict(msg.headers or {}), event))
        finally:
            await sub.unsubscribe()
        return count, out

    result: tuple[int, list[tuple[str, dict[str, str], RelayedEvent]]] = env.bus.call(
        fetch, timeout=60
    )
    return result


def _wait_until(predicate: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def _check_stream(env: Env) -> list[RelayedEvent]:
    stored = env.app.recorder.select_notifications(start=1, limit=100_000)
    count, messages = _stream_contents(env)
    ids = [event.id for _, _, event in messages]
    assert count == len(stored)
    assert ids == [n.id for n in stored]
    assert ids == list(range(1, len(stored) + 1))  # no gap, no duplicate, in order
    ns = env.subjects.namespace
    for subject, headers, event in messages:
        assert headers[NOTIFICATION_HEADER] == str(event.id)
        assert headers["Nats-Msg-Id"] == str(event.id)
        assert subject == f"{ns}.evt.{event.aggregate}.{event.aggregate_id}.{event.event}"
    return [event for _, _, event in messages]


def test_relay_resumes_after_stop_with_every_event_once_in_order(env: Env) -> None:
    app = env.app
    for i in range(3):
        _store_session(app, f"before{i}")

    # A writer keeps storing while the first relay runs; it is stopped midway.
    writing_done = threading.Event()

    def writer() -> None:
        try:
            for i in range(40):
                _store_session(app, f"during{i}")
        finally:
            writing_done.set()

    relay1 = EventRelay(app, env.bus, env.subjects).start()
    thread = threading.Thread(target=writer)
    thread.start()
    try:
        _wait_until(lambda: relay1.relayed >= 10, "the first relay to relay some events")
    finally:
        relay1.stop()
    stopped_at = relay1.position
    thread.join(timeout=60)
    assert writing_done.is_set()

    # More events while no relay runs, including another aggregate.
    for i in range(3):
        _store_session(app, f"after{i}")
    _store_decision(app, "call-1")
    total = app.max_notification_id()
    assert stopped_at < total

    relay2 = EventRelay(app, env.bus, env.subjects).start()
    try:
        assert relay2.resumed_from == stopped_at  # it resumes from what JetStream holds
        _wait_until(lambda: relay2.position == total, "the second relay to catch up")
        # And it keeps following new saves.
        _store_session(app, "live")
        _wait_until(
            lambda: relay2.position == app.max_notification_id(), "the live event relayed"
        )
    finally:
        relay2.stop()

    events = _check_stream(env)
    by_name = {(e.aggregate, e.event) for e in events}
    assert ("session", "Created") in by_name and ("session", "UserMessageReceived") in by_name
    first = events[0]
    assert first.aggregate_id == "before0" and first.event == "Created"
    assert first.data["session_id"] == "before0"
    second = events[1]
    assert second.event == "UserMessageReceived" and second.data["text"] == "hello before0"
    decision = [e for e in events if e.aggregate == "decision"]
    assert len(decision) == 1 and decision[0].event == "Evaluated"
    assert decision[0].aggregate_id == str(decision_uuid("s", "call-1", "h"))
    assert decision[0].data["tool_input"] == {"path": "x"}


def test_republishing_after_a_crash_adds_no_duplicate(env: Env) -> None:
    """A relay that published but died before its position moved sends the same
    notifications again: the Nats-Msg-Id header makes JetStream drop them."""
    app = env.app
    for i in range(5):
        _store_session(app, f"s{i}")
    relay = EventRelay(app, env.bus, env.subjects).start()
    total = app.max_notification_id()
    try:
        _wait_until(lambda: relay.position == total, "the relay to catch up")
    finally:
        relay.stop()

    crashed = EventRelay(app, env.bus, env.subjects)
    crashed._position = total - 4  # as if the last four acks were never recorded
    assert crashed.catch_up() == 4  # they are published again...
    assert crashed.position == total
    again = EventRelay(app, env.bus, env.subjects)
    again._position = 0  # ...or the whole log, from the start
    assert again.catch_up() == total

    _check_stream(env)  # ...and the stream still holds each one once


def test_a_foreign_message_on_the_event_subjects_does_not_reset_the_relay(env: Env) -> None:
    """JetStream captures any publish on ``<ns>.evt.>``; a relay started after such a
    message must still resume after the last relayed notification, not from 0."""
    app = env.app
    for i in range(3):
        _store_session(app, f"s{i}")
    relay = EventRelay(app, env.bus, env.subjects).start()
    total = app.max_notification_id()
    try:
        _wait_until(lambda: relay.position == total, "the relay to catch up")
    finally:
        relay.stop()

    async def foreign() -> Any:
        return await env.bus.js.publish(f"{env.subjects.namespace}.evt.session.x.y", b"{}")

    env.bus.call(foreign)
    resumed = EventRelay(app, env.bus, env.subjects).start()
    try:
        assert resumed.position == total
    finally:
        resumed.stop()
