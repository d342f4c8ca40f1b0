"""The event relay copies the store's log to JetStream exactly once, in order, across
restarts, on SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import msgspec
import pytest
from nats.js.api import StreamConfig
from nats.js.errors import NotFoundError
from prometheus_client import generate_latest

from tether.adapters.config import Settings
from tether.adapters.nats_bus import NatsBus
from tether.adapters.relay import DIGEST_HEADER, NOTIFICATION_HEADER, EventRelay
from tether.adapters.store import open_application
from tether.events.application import TetherApplication
from tether.events.decisions import ToolDecision, decision_uuid
from tether.events.messages import RelayedEvent
from tether.events.session import Session
from tether.events.subjects import Subjects
from tether.projections.prometheus import registry_with


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


FOREIGN = "X-Test-Foreign"
"""Marks the messages a test publishes as someone else (the relay never looks at it)."""


class Raw(NamedTuple):
    seq: int
    subject: str
    headers: dict[str, str]
    data: bytes


def _raw_stream(env: Env) -> list[Raw]:
    """Every message the stream holds, in stream order (read one by one: no waiting)."""
    stream = env.subjects.events_stream

    async def fetch() -> list[Raw]:
        info = await env.bus.js.stream_info(stream)
        out: list[Raw] = []
        if not info.state.messages:
            return out
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            try:
                msg = await env.bus.js.get_msg(stream, seq)
            except NotFoundError:
                continue
            out.append(Raw(seq, msg.subject or "", dict(msg.headers or {}), msg.data or b""))
        return out

    result: list[Raw] = env.bus.call(fetch, timeout=60)
    return result


def _publish_foreign(env: Env, subject: str, payload: bytes, headers: dict[str, str]) -> int:
    """Publish as another program would; returns the stream sequence it got."""

    async def publish() -> Any:
        return await env.bus.js.publish(subject, payload, headers={**headers, FOREIGN: "1"})

    ack = env.bus.call(publish)
    assert not ack.duplicate
    return int(ack.seq)


def _digest(nid: int, subject: str, payload: bytes) -> str:
    return hashlib.sha256(f"{nid}\n{subject}\n".encode() + payload).hexdigest()


def _check_stream(env: Env, *, in_order: bool = True) -> list[RelayedEvent]:
    """Every stored event is on the stream exactly once (in order unless told), with its
    headers; messages a test published as someone else are left out."""
    stored = env.app.recorder.select_notifications(start=1, limit=100_000)
    own = [raw for raw in _raw_stream(env) if FOREIGN not in raw.headers]
    events = [msgspec.json.decode(raw.data, type=RelayedEvent) for raw in own]
    ids = [event.id for event in events]
    expected = list(range(1, len(stored) + 1))
    assert [n.id for n in stored] == expected
    assert (ids if in_order else sorted(ids)) == expected  # no gap, no duplicate
    ns = env.subjects.namespace
    for raw, event in zip(own, events, strict=True):
        digest = _digest(event.id, raw.subject, raw.data)
        assert raw.headers[NOTIFICATION_HEADER] == str(event.id)
        assert raw.headers[DIGEST_HEADER] == digest
        assert raw.headers["Nats-Msg-Id"] in (str(event.id), f"{event.id}-{digest}")
        assert raw.subject == f"{ns}.evt.{event.aggregate}.{event.aggregate_id}.{event.event}"
    return events


def _relay_until_caught_up(env: Env) -> int:
    """Run a relay until it has relayed the whole log, stop it; returns the log's head."""
    relay = EventRelay(env.app, env.bus, env.subjects).start()
    total = env.app.max_notification_id()
    try:
        _wait_until(lambda: relay.position == total, "the relay to catch up")
    finally:
        relay.stop()
    return total


def _warnings(caplog: pytest.LogCaptureFixture, level: int, word: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "tether.adapters.relay" and r.levelno == level and word in r.getMessage()]


def _metric(relay: EventRelay, name: str) -> int:
    """A sample of the relay's counters, as a scrape of a registry holding it reads it."""
    text = generate_latest(registry_with(relay)).decode()
    [line] = [line for line in text.splitlines() if line.startswith(name + " ")]
    return int(float(line.split()[1]))


def _wait_until(predicate: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


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
    total = _relay_until_caught_up(env)

    _publish_foreign(env, f"{env.subjects.namespace}.evt.session.x.y", b"{}", {})
    resumed = EventRelay(app, env.bus, env.subjects).start()
    try:
        assert resumed.position == total
        assert resumed.foreign_messages == 1
    finally:
        resumed.stop()


def test_a_forged_notification_id_does_not_swallow_the_next_events(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 13: one message by someone else claiming notification 1000000, then a
    restart. The relay must not resume after it: the next 42 events all reach the
    stream, and the forged message is reported (WARNING naming it) and counted."""
    caplog.set_level(logging.WARNING, logger="tether.adapters.relay")
    app = env.app
    for i in range(3):
        _store_session(app, f"s{i}")
    total = _relay_until_caught_up(env)

    garbage = f"{env.subjects.namespace}.evt.session.x.Garbage"
    seq = _publish_foreign(env, garbage, b'{"id": 1000000}',
                           {NOTIFICATION_HEADER: "1000000", "Nats-Msg-Id": "1000000"})
    restarted = EventRelay(app, env.bus, env.subjects).start()
    try:
        assert restarted.resumed_from == total
        for i in range(21):
            _store_session(app, f"after{i}")
        head = app.max_notification_id()
        assert head - total == 42
        _wait_until(lambda: restarted.position == head, "the 42 new events relayed")
    finally:
        restarted.stop()

    events = _check_stream(env)
    assert len(events) == head
    assert restarted.foreign_messages == 1
    assert _metric(restarted, "tether_relay_foreign_messages_total") == 1
    [warning] = _warnings(caplog, logging.WARNING, "foreign")
    assert garbage in warning and f"sequence {seq}" in warning and "1000000" in warning


def test_a_genuine_id_on_other_content_is_foreign(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """A message naming a real notification but not carrying that event is not trusted:
    neither with a digest of its own content nor with the genuine message's digest."""
    caplog.set_level(logging.WARNING, logger="tether.adapters.relay")
    app = env.app
    for i in range(3):
        _store_session(app, f"s{i}")
    total = _relay_until_caught_up(env)

    genuine = _raw_stream(env)[1]  # notification 2: s0's first message
    event = msgspec.json.decode(genuine.data, type=RelayedEvent)
    assert event.id == 2 and event.event == "UserMessageReceived"
    forged = msgspec.json.encode(msgspec.structs.replace(event, data={"text": "forged"}))
    own_digest = _publish_foreign(env, genuine.subject, forged, {
        NOTIFICATION_HEADER: "2", DIGEST_HEADER: _digest(2, genuine.subject, forged)})
    copied_digest = _publish_foreign(env, genuine.subject, forged, {
        NOTIFICATION_HEADER: "2", DIGEST_HEADER: genuine.headers[DIGEST_HEADER]})

    restarted = EventRelay(app, env.bus, env.subjects).start()
    try:
        assert restarted.resumed_from == total  # not 2
        assert restarted.foreign_messages == 2
        assert _metric(restarted, "tether_relay_foreign_messages_total") == 2
    finally:
        restarted.stop()
    warnings = _warnings(caplog, logging.WARNING, "foreign")
    assert len(warnings) == 2
    assert f"sequence {copied_digest}" in warnings[0] and "does not match" in warnings[0]
    assert f"sequence {own_digest}" in warnings[1] and "differs" in warnings[1]
    assert all(genuine.subject in w for w in warnings)
    _check_stream(env)


def test_messages_relayed_before_the_digest_still_verify(env: Env) -> None:
    """A stream written by the relay before ``Tether-Digest`` existed (no such header)
    is resumed from its last event, not relayed again from the start."""
    app = env.app
    for i in range(3):
        _store_session(app, f"s{i}")
    total = _relay_until_caught_up(env)
    old = _raw_stream(env)
    stream = env.subjects.events_stream

    async def rewrite() -> None:
        await env.bus.js.delete_stream(stream)
        await env.bus.js.add_stream(StreamConfig(
            name=stream, subjects=[env.subjects.all_events], duplicate_window=120.0))
        for raw in old:
            await env.bus.js.publish(raw.subject, raw.data, headers={
                "Nats-Msg-Id": raw.headers["Nats-Msg-Id"],
                NOTIFICATION_HEADER: raw.headers[NOTIFICATION_HEADER]})

    env.bus.call(rewrite, timeout=60)
    restarted = EventRelay(app, env.bus, env.subjects).start()
    try:
        assert restarted.resumed_from == total
        assert restarted.foreign_messages == 0
    finally:
        restarted.stop()


def test_a_refused_publish_is_counted_and_retried(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """An event JetStream refuses (here: bigger than the stream allows) is an ERROR and a
    counted failure; the relay stays before it and does not skip it."""
    caplog.set_level(logging.WARNING, logger="tether.adapters.relay")
    app = env.app

    async def small_stream() -> None:
        await env.bus.js.add_stream(StreamConfig(
            name=env.subjects.events_stream, subjects=[env.subjects.all_events],
            duplicate_window=120.0, max_msg_size=2048))

    env.bus.call(small_stream)
    _store_session(app, "small")  # notifications 1 and 2
    big = Session(session_id="big", name="big", workspace="/w", model="m", channel="c")
    big.receive_user_message(text="x" * 5000, channel="c", user="u")
    app.save(big)  # 3 (Created) fits, 4 does not
    relay = EventRelay(app, env.bus, env.subjects, ack_timeout=1.0).start()
    try:
        _wait_until(lambda: relay.publish_failures >= 1, "the refusal to be counted")
        assert relay.position == 3
        assert _metric(relay, "tether_relay_publish_failures_total") >= 1
    finally:
        relay.stop()
    assert relay.position == 3
    assert relay.gaps == 0  # verifying the stream again found what JetStream acknowledged
    errors = _warnings(caplog, logging.ERROR, "event 4")
    assert errors and "message size exceeds maximum allowed" in errors[0]
    assert [raw.headers[NOTIFICATION_HEADER] for raw in _raw_stream(env)] == ["1", "2", "3"]


def test_a_stream_deleted_under_the_relay_is_a_gap_and_is_refilled(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """Publishing into a deleted stream fails; before retrying, the relay verifies the
    stream again, finds it behind what was acknowledged (a gap: alarm and counter),
    recreates it and relays every event again."""
    caplog.set_level(logging.WARNING, logger="tether.adapters.relay")
    app = env.app
    relay = EventRelay(app, env.bus, env.subjects, ack_timeout=1.0).start()
    try:
        for i in range(2):
            _store_session(app, f"s{i}")
        _wait_until(lambda: relay.position == 4, "the first events relayed")
        env.bus.call(lambda: env.bus.js.delete_stream(env.subjects.events_stream))
        _store_session(app, "s2")
        head = app.max_notification_id()
        _wait_until(lambda: relay.gaps == 1 and relay.position == head, "the stream refilled")
        assert relay.publish_failures >= 1
        assert _metric(relay, "tether_relay_gaps_total") == 1
    finally:
        relay.stop()
    _check_stream(env)
    [gap] = _warnings(caplog, logging.ERROR, "gap")
    assert "acknowledged up to 4" in gap


def test_an_event_whose_msg_id_was_taken_still_reaches_the_stream(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """Another program publishes with the next event's Nats-Msg-Id: JetStream would drop
    the real event as a duplicate. The relay sees the message under that id is not its
    event, raises the alarm and publishes the event under a qualified id."""
    caplog.set_level(logging.WARNING, logger="tether.adapters.relay")
    app = env.app
    relay = EventRelay(app, env.bus, env.subjects).start()
    try:
        _store_session(app, "s0")
        _wait_until(lambda: relay.position == 2, "the first events relayed")
        _publish_foreign(env, f"{env.subjects.namespace}.evt.session.x.Squat", b"{}",
                         {"Nats-Msg-Id": "3"})
        _store_session(app, "s1")
        _wait_until(lambda: relay.position == 4, "the next events relayed")
        assert relay.gaps == 1
        assert _metric(relay, "tether_relay_gaps_total") == 1
    finally:
        relay.stop()
    events = _check_stream(env, in_order=False)  # 3 comes after the rest of its batch
    [third] = [raw for raw in _raw_stream(env) if raw.headers.get(NOTIFICATION_HEADER) == "3"]
    assert third.headers["Nats-Msg-Id"] == f"3-{third.headers[DIGEST_HEADER]}"
    assert {e.id for e in events} == {1, 2, 3, 4}
    [error] = _warnings(caplog, logging.ERROR, "duplicate")
    assert "event 3" in error


def test_a_truncated_event_verifies_as_the_relays_own(env: Env) -> None:
    """An event relayed without its data (too big for the server's max_payload then) is
    still recognised as the relay's, whatever the limit is now; other content is not."""
    app = env.app
    _store_session(app, "s0")
    _relay_until_caught_up(env)
    genuine = _raw_stream(env)[1]
    event = msgspec.json.decode(genuine.data, type=RelayedEvent)
    truncated = msgspec.json.encode(msgspec.structs.replace(
        event, data={"truncated": True, "size": len(genuine.data)}))
    relay = EventRelay(app, env.bus, env.subjects)
    headers = {NOTIFICATION_HEADER: "2", DIGEST_HEADER: _digest(2, genuine.subject, truncated)}
    assert relay.check(genuine.subject, truncated, headers) is None
    assert relay.check(genuine.subject, genuine.data, genuine.headers) is None
    wrong_size = truncated.replace(str(len(genuine.data)).encode(), b"1")
    assert relay.check(genuine.subject, wrong_size, {NOTIFICATION_HEADER: "2"}) is not None
    assert relay.check(genuine.subject, genuine.data, {NOTIFICATION_HEADER: "1"}) is not None
    assert relay.check(genuine.subject, genuine.data, {NOTIFICATION_HEADER: "02"}) is not None
