"""Typed snapshots of sessions and forests, through a real store (SQLite and PostgreSQL):
exact round trips, loads that read a snapshot and the events after it, and snapshots that
can neither break a load nor a save."""

from __future__ import annotations

import datetime as dt
import gc
import logging
import threading
import uuid
from collections.abc import Callable

import msgspec
import pytest
from eventsourcing.persistence import StoredEvent

from tests.events.test_store_roundtrip import full_session
from tether.events.application import SNAPSHOT_INTERVAL, TREE_RECORD_AGE, TetherApplication
from tether.events.conversation import Conversation
from tether.events.forest import Forest, ForestSnapshotState
from tether.events.messages import TextBlock, ToolResultBlock, ToolUseBlock, Usage
from tether.events.session import Session, SessionState, Turn, tree_uuid
from tether.events.tree_records import contents_uuid

ENVELOPE = {"_id", "_version", "_pending_events"}




def a_forest() -> Forest:
    forest = Forest(session_id="s1")
    root = forest.root_for("You are a coding agent.")
    ask = forest.append(root, "user", [TextBlock("fix the login")])
    forest.append(ask, "assistant", [TextBlock("Reading."),
                                     ToolUseBlock(id="t1", name="read_file", input={"p": 1})])
    forest.bookmark("start", ask)
    return forest


def test_every_attribute_is_in_the_snapshot_state() -> None:
    # _tree_at is where a snapshot says its tree is kept, not an attribute.
    assert set(vars(full_session())) - ENVELOPE == set(SessionState.__struct_fields__) - {
        "_tree_at"}
    assert set(vars(a_forest())) - ENVELOPE == set(ForestSnapshotState.__struct_fields__)


@pytest.mark.parametrize("make", [full_session, a_forest], ids=["session", "forest"])
def test_a_snapshot_round_trips_exactly_and_typed(
        app: TetherApplication, make: Callable[[], Session | Forest]) -> None:
    aggregate = make()
    app.save(aggregate)
    snapshot = type(aggregate).Snapshot.take(aggregate)
    stored = app.mapper.to_stored_event(snapshot)
    restored = app.mapper.to_domain_event(stored).mutate(None)

    if isinstance(restored, Session) and isinstance(aggregate, Session):
        # Taken outside the application, the tree in hand is kept in the snapshot.
        assert isinstance(vars(restored)["_tree"], Conversation)
        assert restored.conversation == aggregate.conversation
    assert restored == aggregate and restored.version == aggregate.version
    assert vars(restored).keys() == vars(aggregate).keys()
    assert isinstance(restored.created_on, dt.datetime)
    if isinstance(restored, Session):
        assert isinstance(restored.history[0].content[0], TextBlock)
        assert isinstance(restored.turn_usage, Usage)


def grow(session: Session, app: TetherApplication, events: int) -> None:
    """Record ``events`` more events on ``session``, saved a few at a time as a turn is."""
    for i in range(events):
        if i % 3 == 0:
            session.receive_user_message(text=f"message {i}", channel="c", user="ana")
        elif i % 3 == 1:
            session.append_assistant_message(content=[TextBlock(f"answer {i}")],
                                             stop_reason="end_turn", usage=Usage(10, 2),
                                             generation=i)
        else:
            session.complete_turn(rounds=1, usage=Usage(10, 2), cost_usd=0.001, stop="end_turn")
        if i % 7 == 6:
            app.save(session)
    app.save(session)


def replayed(app: TetherApplication, session: Session, version: int | None = None) -> Session:
    """The session from its events alone."""
    aggregate: Session | None = None
    for event in app.events.get(session.id, lte=version):
        aggregate = event.mutate(aggregate)
    assert aggregate is not None
    return aggregate


def test_a_long_session_loads_from_its_latest_snapshot(app: TetherApplication) -> None:
    session = Session(session_id="long", name="long", workspace="/ws", model="m", channel="c")
    grow(session, app, 2 * SNAPSHOT_INTERVAL + 40)
    assert app.snapshots is not None
    taken = [s.originator_version for s in app.snapshots.get(session.id)]
    assert taken == [SNAPSHOT_INTERVAL, 2 * SNAPSHOT_INTERVAL]

    assert app.session("long") == replayed(app, session) == session
    middle = SNAPSHOT_INTERVAL + 17  # the first snapshot and 17 events after it
    assert app.session("long", version=middle) == replayed(app, session, middle)
    early = app.session("long", version=5)  # before any snapshot: the events alone
    assert early is not None and early.version == 5 and early == replayed(app, session, 5)


def test_a_snapshot_that_does_not_decode_is_passed_over(
        app: TetherApplication, caplog: pytest.LogCaptureFixture) -> None:
    session = Session(session_id="odd", name="odd", workspace="/ws", model="m", channel="c")
    grow(session, app, 30)
    assert app.snapshots is not None
    app.snapshots.recorder.insert_events([StoredEvent(  # as an older release might have left
        originator_id=session.id, originator_version=20,
        topic="tether.events.session:Session.Snapshot",
        state=msgspec.json.encode({"topic": "tether.events.session:Session", "timestamp": 1,
                                   "state": {"history": "not a list"}}))])

    with caplog.at_level(logging.WARNING, logger="tether.events.application"):
        loaded = app.session("odd")

    assert loaded == replayed(app, session) == session
    assert any("could not be decoded" in r.getMessage() for r in caplog.records)


def test_a_snapshot_that_cannot_be_taken_does_not_fail_the_save(
        app: TetherApplication, caplog: pytest.LogCaptureFixture) -> None:
    session = Session(session_id="new", name="new", workspace="/ws", model="m", channel="c")
    app.save(session)
    assert app.snapshots is not None
    recorder = app.snapshots.recorder
    schema = getattr(recorder.datastore, "schema", "")  # PostgreSQL's
    table = f'"{schema}"."{recorder.events_table_name}"' if schema else \
        recorder.events_table_name
    with recorder.datastore.transaction(commit=True) as cursor:  # the snapshot table is lost
        cursor.execute(f"DROP TABLE {table} CASCADE" if schema else f"DROP TABLE {table}")
    with caplog.at_level(logging.WARNING, logger="tether.events.application"):
        grow(session, app, SNAPSHOT_INTERVAL + 5)

    assert any("no snapshot at version 200" in r.getMessage() for r in caplog.records)
    stored = replayed(app, session)
    assert stored == session and stored.version == SNAPSHOT_INTERVAL + 6


def stored_snapshot(app: TetherApplication, originator: uuid.UUID, version: int) -> StoredEvent:
    assert app.snapshots is not None
    [stored] = app.snapshots.recorder.select_events(originator, gt=version - 1, lte=version)
    return stored


def with_tree(session_id: str) -> Session:
    """A session whose messages are mirrored into its tree (a system prompt is set)."""
    session = Session(session_id=session_id, name=session_id, workspace="/ws", model="m",
                      channel="c")
    session.set_system_prompt(text="You are a coding agent.")
    return session


def test_the_tree_is_kept_apart_and_read_only_when_used(
        app: TetherApplication, caplog: pytest.LogCaptureFixture) -> None:
    session = with_tree("apart")
    grow(session, app, SNAPSHOT_INTERVAL + 10)
    nodes = len(session.conversation.tree.nodes)
    assert nodes > SNAPSHOT_INTERVAL // 2  # every message, under the prompt's root

    # The session's snapshot points at the tree's record; the record holds the tree.
    own = msgspec.json.decode(stored_snapshot(app, session.id, SNAPSHOT_INTERVAL).state)
    # (An older release needs _tree: it reads the events instead of such a snapshot.)
    assert own["state"]["_tree_at"] == SNAPSHOT_INTERVAL and "_tree" not in own["state"]
    # The record holds the tree's structure; the messages' blocks are in a content record
    # beside it (written once: later records point at it).
    record = stored_snapshot(app, tree_uuid(session.id), SNAPSHOT_INTERVAL)
    assert record.topic.endswith(":TreeRecord")
    contents = stored_snapshot(app, contents_uuid(session.id), SNAPSHOT_INTERVAL)
    assert contents.topic.endswith(":TreeContents")
    assert b"answer 100" in contents.state and b"answer 100" not in record.state

    loaded = app.session("apart")
    assert loaded is not None and not loaded.tree_in_hand  # nothing of the tree read yet
    assert loaded.history == session.history
    assert loaded.conversation == session.conversation  # read, and the tail mirrored
    assert len(loaded.conversation.tree.nodes) == nodes and loaded == session

    # A record lost (it is a cache): the tree is made from the events, the same.
    assert app.snapshots is not None
    with app.snapshots.recorder.datastore.transaction(commit=True) as cursor:
        cursor.execute(f"DELETE FROM {_table(app)} WHERE originator_id = {_param(app)}",
                       (_key(app, tree_uuid(session.id)),))
    assert list(app.snapshots.get(tree_uuid(session.id))) == []
    with caplog.at_level(logging.WARNING, logger="tether.events.application"):
        again = app.session("apart")
        assert again is not None and again.conversation == session.conversation
    assert any("no tree record" in r.getMessage() for r in caplog.records)


def test_a_tree_record_is_renewed_once_used_or_old(app: TetherApplication) -> None:
    session = with_tree("renewed")
    grow(session, app, TREE_RECORD_AGE + 2 * SNAPSHOT_INTERVAL)
    assert app.snapshots is not None
    renewed = [s.originator_version for s in app.snapshots.get(tree_uuid(session.id))]
    # The first snapshot's session was made from its events: its tree was in hand. Then
    # the record stays until it is older than TREE_RECORD_AGE.
    assert renewed == [SNAPSHOT_INTERVAL, SNAPSHOT_INTERVAL + TREE_RECORD_AGE]

    # A tree used after a snapshot (a compaction rewrites the history) is kept anew with
    # the next one, so the load after it reads its record and nothing of the old one.
    session.compact_history(summary="[Previous conversation summary: s]", replaced=10,
                            tokens_before=100, tokens_after=10, budget=200, cost_usd=0.0)
    top = session.version + SNAPSHOT_INTERVAL - session.version % SNAPSHOT_INTERVAL
    grow(session, app, top - session.version)
    assert [s.originator_version for s in app.snapshots.get(tree_uuid(session.id))][-1] == top
    loaded = app.session("renewed")
    assert loaded is not None and loaded == session and loaded.version == top


def test_a_snapshot_holding_its_tree_whole_still_loads(app: TetherApplication) -> None:
    """Snapshots stored before the tree was kept apart hold it in the session's state."""
    session = with_tree("inline")
    grow(session, app, 30)
    assert app.snapshots is not None
    inline = Session.Snapshot.take(session)  # a tree in hand is kept inline
    app.snapshots.put([inline])
    loaded = app.session("inline")
    assert loaded is not None and isinstance(vars(loaded)["_tree"], Conversation)
    assert loaded.conversation == session.conversation and loaded == session


def _table(app: TetherApplication) -> str:
    assert app.snapshots is not None
    recorder = app.snapshots.recorder
    schema = getattr(recorder.datastore, "schema", "")
    return (f'"{schema}"."{recorder.events_table_name}"' if schema
            else recorder.events_table_name)


def _postgres(app: TetherApplication) -> bool:
    assert app.snapshots is not None
    return bool(getattr(app.snapshots.recorder.datastore, "schema", ""))


def _param(app: TetherApplication) -> str:
    return "%s" if _postgres(app) else "?"


def _key(app: TetherApplication, originator: uuid.UUID) -> uuid.UUID | str:
    """An originator id as the store's table holds it (SQLite: its hex)."""
    return originator if _postgres(app) else originator.hex


def test_results_added_to_a_complete_message_load_as_they_replay(
        app: TetherApplication) -> None:
    """Two calls refused after a reminder (refuse_pending's way): the first refusal's
    message is complete at once, the second is added to it. With a snapshot, and the tree
    record it writes, between the two, the load and a replay agree."""
    session = with_tree("late")
    session.receive_user_message(text="do it", channel="c", user="u")
    while session.version < SNAPSHOT_INTERVAL - 3:
        session.change_status(status="running", reason="pad")
    app.save(session)
    session.append_assistant_message(
        content=[TextBlock("on it"), ToolUseBlock("a", "bash", {}), ToolUseBlock("b", "bash", {})],
        stop_reason="tool_use", usage=Usage(1, 1), generation=0)
    session.add_ttsr_reminder(rules=["r"], reminder="remember the rule")
    for call in session.pending_tool_calls():  # the snapshot comes between these two
        session.refuse_tool_call(call_id=call.id, reason="stopped")
    session.fail_turn(error="stopped", kind="aborted")
    app.save(session)

    loaded = app.session("late")
    assert loaded == replayed(app, session) == session
    assert loaded.conversation.cursor == session.conversation.cursor


def test_a_session_not_keeping_its_tree_moved_back_loads_as_it_replays(
        app: TetherApplication) -> None:
    session = Session(session_id="old", name="old", workspace="/ws", model="m", channel="c",
                      keeps_tree=False)
    session.set_system_prompt(text="P")
    for text in ("a", "b"):
        session.receive_user_message(text=text, channel="c", user="u")
        session.append_assistant_message(content=[TextBlock(text.upper())],
                                         stop_reason="end_turn", usage=Usage(1, 1),
                                         generation=0)
    session.move_to(node_id="anywhere", history=[Turn("user", [TextBlock("a")])], reason="r")
    session.add_ttsr_reminder(rules=["r"], reminder="mind the rule")  # 2 messages, 4 mirrored
    while session.version < SNAPSHOT_INTERVAL:  # the snapshot and its tree record come here
        session.change_status(status="running", reason="pad")
        app.save(session)
    grow(session, app, 2)  # 4 messages again
    assert app.session("old") == replayed(app, session) == session


def test_two_threads_using_one_loaded_session_see_one_tree(app: TetherApplication) -> None:
    session = with_tree("shared")
    grow(session, app, SNAPSHOT_INTERVAL + 30)
    want = session.conversation
    for _ in range(20):
        loaded = app.session("shared")
        assert loaded is not None and not loaded.tree_in_hand
        start = threading.Barrier(2)

        def use(loaded: Session = loaded, start: threading.Barrier = start) -> None:
            start.wait()
            loaded.conversation  # noqa: B018

        threads = [threading.Thread(target=use) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert loaded.conversation == want


def test_a_tree_record_of_an_unknown_class_is_passed_over(
        app: TetherApplication, caplog: pytest.LogCaptureFixture) -> None:
    session = with_tree("renamed")
    grow(session, app, SNAPSHOT_INTERVAL + 3)
    assert app.snapshots is not None
    with app.snapshots.recorder.datastore.transaction(commit=True) as cursor:
        cursor.execute(f"UPDATE {_table(app)} SET topic = {_param(app)} WHERE originator_id = "
                       f"{_param(app)}", ("tether.events.session:Renamed",
                                          _key(app, tree_uuid(session.id))))
    with caplog.at_level(logging.WARNING, logger="tether.events.application"):
        loaded = app.session("renamed")
        assert loaded is not None and loaded.conversation == session.conversation
    assert any("could not be decoded" in r.getMessage() for r in caplog.records)


def test_a_history_s_messages_are_not_tracked_by_the_garbage_collector() -> None:
    # A long session's snapshot decodes thousands of them: tracked, each decode triggered
    # collections over them all (about 1 ms of a 5,000-message load, bench/append).
    turn = Turn("assistant", [TextBlock("a"), ToolUseBlock("t1", "read_file", {"path": "x"}),
                              ToolResultBlock("t1", "ok")])
    assert not gc.is_tracked(turn)
    assert not any(gc.is_tracked(block) for block in turn.content)
