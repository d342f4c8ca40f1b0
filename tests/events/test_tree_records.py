"""A session's tree kept apart as a record of its structure and content records of its
messages' blocks (``events/tree_records.py``), through a real store (SQLite and
PostgreSQL): a load reads no message it does not need, reads the rest on demand, runs
every tree command as a replay does, and falls back to the events (WARNING) when a
content record is missing, does not decode or does not hold what its record says."""

from __future__ import annotations

import base64
import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from eventsourcing.persistence import StoredEvent

import tether.events.application as application
from tests.events.test_snapshots import _key, _param, _table, grow, replayed, with_tree
from tether.actors.conversation import history_at, tree_nodes
from tether.events.application import SNAPSHOT_INTERVAL, TetherApplication
from tether.events.conversation import Conversation
from tether.events.messages import TextBlock, Usage
from tether.events.session import Session, TreeSnapshot, tree_uuid
from tether.events.stored_content import StoredContent
from tether.events.tree_records import (
    StoredNodes,
    TreeContents,
    TreeRecord,
    contents_uuid,
    in_full,
)

LOG = "tether.events.application"


def stored(app: TetherApplication, originator: uuid.UUID) -> list[Any]:
    assert app.snapshots is not None
    return list(app.snapshots.get(originator))


def blocks_read(conversation: Conversation) -> int:
    """How many nodes of a tree read from its record had their blocks read."""
    nodes = conversation.tree.nodes
    assert isinstance(nodes, StoredNodes)
    return sum(1 for v in dict.values(nodes)
               if isinstance(getattr(v, "content", None), StoredContent) and v.content.in_hand)


def counting_reads(app: TetherApplication,
                   monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The content record reads the application makes from now on (low, high)."""
    reads: list[tuple[int, int]] = []
    real = app._tree_contents

    def counted(session_id: uuid.UUID, low: int, high: int) -> Any:
        reads.append((low, high))
        return real(session_id, low, high)

    monkeypatch.setattr(app, "_tree_contents", counted)
    return reads


def test_taking_a_session_up_reads_no_message_and_a_page_reads_them_at_once(
        app: TetherApplication, monkeypatch: pytest.MonkeyPatch) -> None:
    session = with_tree("lazy")
    grow(session, app, SNAPSHOT_INTERVAL + 20)
    reads = counting_reads(app, monkeypatch)
    loaded = app.session("lazy")
    assert loaded is not None
    conversation = loaded.conversation  # read, and the messages since mirrored
    assert reads == [] and blocks_read(conversation) == 0
    assert isinstance(conversation.tree.nodes, StoredNodes)
    assert conversation.tree.nodes.unread > SNAPSHOT_INTERVAL // 3  # nor made most nodes

    pages = tree_nodes(conversation.tree)  # every node's text: one read
    assert len(reads) == 1
    assert pages == tree_nodes(session.conversation.tree)
    assert loaded == session


def test_a_record_writes_only_the_messages_no_record_holds_yet(app: TetherApplication) -> None:
    session = with_tree("incremental")
    grow(session, app, SNAPSHOT_INTERVAL)
    # The tree used (a compaction) before the next snapshot: a new record with it.
    session.compact_history(summary="[Previous conversation summary: s]", replaced=10,
                            tokens_before=100, tokens_after=10, budget=200, cost_usd=0.0)
    grow(session, app, SNAPSHOT_INTERVAL - 1)
    assert [r.originator_version for r in stored(app, tree_uuid(session.id))] == [
        SNAPSHOT_INTERVAL, 2 * SNAPSHOT_INTERVAL]
    at = [set(replayed(app, session, v * SNAPSHOT_INTERVAL).conversation.tree.nodes)
          for v in (1, 2)]
    contents = stored(app, contents_uuid(session.id))
    assert len(contents[0].contents) == len(at[0]) - 1  # all but the root's
    # The second holds the messages added since (the compaction's new path among them),
    # none the first holds.
    assert len(contents[1].contents) == len(at[1] - at[0])
    assert app.session("incremental") == session


def test_every_tree_command_on_a_loaded_tree_does_as_on_the_replay(
        app: TetherApplication) -> None:
    session = with_tree("commands")
    grow(session, app, SNAPSHOT_INTERVAL + 5)
    loaded = app.session("commands")
    replay = replayed(app, session)
    assert loaded is not None and not loaded.tree_in_hand

    def run(s: Session) -> list[Any]:
        """Edit, split, delete, bookmark and branch as the session's core plans them."""
        tree, cursor = s.conversation.tree, s.conversation.cursor
        path = [n.id for n in tree.path(cursor)]
        done: list[Any] = []
        for operation, node, planned in (
                ("split", path[5], lambda: tree.plan_split(path[5], 3)),
                ("edit", path[8], lambda: tree.plan_edit(path[8], "message 21 edited")),
                ("edit", path[-1], lambda: tree.plan_edit(path[-1], "the last, edited")),
                ("bookmark", path[2], lambda: tree.plan_bookmark("b", path[2])),
                ("delete", path[12], lambda: tree.plan_delete(path[12], "reparent"))):
            result = planned()
            s.alter_tree(operation=operation, node_id=node, result_id=result.node_id,
                         changes=result.changes)
            done.append(result)
        target = s.conversation.tree.children(path[3])[0].id
        history = history_at(s.conversation.tree, target)
        s.move_to(node_id=target, history=history, reason="branched")
        done.append(history)
        done.append(tree_nodes(s.conversation.tree))
        return done

    assert run(loaded) == run(replay)
    assert loaded.conversation == replay.conversation and loaded.history == replay.history
    assert msgspec.json.encode(in_full(loaded.conversation)) == msgspec.json.encode(
        replay.conversation)
    app.save(loaded)
    assert app.session("commands") == replayed(app, loaded) == loaded


def _lose_contents(app: TetherApplication, session: Session, how: str) -> None:
    assert app.snapshots is not None
    originator = contents_uuid(session.id)
    with app.snapshots.recorder.datastore.transaction(commit=True) as cursor:
        if how == "missing":
            cursor.execute(f"DELETE FROM {_table(app)} WHERE originator_id = {_param(app)}",
                           (_key(app, originator),))
        elif how == "undecodable":
            cursor.execute(f"UPDATE {_table(app)} SET state = {_param(app)} WHERE "
                           f"originator_id = {_param(app)}",
                           (b'{"contents": "not a list"}', _key(app, originator)))
    if how == "other":  # decodes, but holds other messages than the record says
        [record] = stored(app, originator)
        swapped = TreeContents(originator_id=originator, originator_version=999_999,
                               timestamp=record.timestamp,
                               contents=list(reversed(record.contents)))
        encoded = app.mapper.to_stored_event(swapped)
        with app.snapshots.recorder.datastore.transaction(commit=True) as cursor:
            cursor.execute(f"UPDATE {_table(app)} SET state = {_param(app)} WHERE "
                           f"originator_id = {_param(app)}", (encoded.state, _key(app, originator)))


@pytest.mark.parametrize("how", ["missing", "undecodable", "other"])
def test_a_content_record_that_fails_falls_back_to_the_events(
        app: TetherApplication, caplog: pytest.LogCaptureFixture, how: str) -> None:
    session = with_tree(f"lost{how}")
    grow(session, app, SNAPSHOT_INTERVAL + 5)
    _lose_contents(app, session, how)
    loaded = app.session(f"lost{how}")
    assert loaded is not None
    with caplog.at_level(logging.WARNING, logger=LOG):
        loaded.conversation  # noqa: B018  (taking it up needs no message: no warning)
        assert not caplog.records
        assert tree_nodes(loaded.conversation.tree) == tree_nodes(session.conversation.tree)
    assert len([r for r in caplog.records if "reading the tree's messages from the events"
                in r.getMessage()]) == 1
    assert loaded == session


def test_a_whole_tree_record_of_the_release_before_still_loads(
        app: TetherApplication, caplog: pytest.LogCaptureFixture) -> None:
    session = with_tree("whole")
    grow(session, app, SNAPSHOT_INTERVAL + 5)
    assert app.snapshots is not None
    at = replayed(app, session, SNAPSHOT_INTERVAL)
    with app.snapshots.recorder.datastore.transaction(commit=True) as cursor:
        for originator in (tree_uuid(session.id), contents_uuid(session.id)):
            cursor.execute(f"DELETE FROM {_table(app)} WHERE originator_id = {_param(app)}",
                           (_key(app, originator),))
    app.snapshots.put([TreeSnapshot(originator_id=tree_uuid(session.id),
                                    originator_version=SNAPSHOT_INTERVAL,
                                    timestamp=TreeSnapshot.create_timestamp(),
                                    state=at.conversation)])
    with caplog.at_level(logging.WARNING, logger=LOG):
        loaded = app.session("whole")
        assert loaded is not None and loaded == session
    assert not caplog.records


def test_messages_alike_to_prefix_matching_keep_their_own_blocks(
        app: TetherApplication, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two messages with the same key (differing in whitespace only) are one digest, but
    each node's blocks are its own: a load reads back each exactly, and prefix matching
    reuses the node a replay reuses."""
    monkeypatch.setattr(TetherApplication, "snapshotting_intervals", {Session: 10})
    session = with_tree("alike")
    for text in ("same", " same ", "same  "):
        session.receive_user_message(text=text, channel="c", user="u")
        session.append_assistant_message(content=[TextBlock(text + "\n")],
                                         stop_reason="end_turn", usage=Usage(1, 1),
                                         generation=0)
        session.complete_turn(rounds=1, usage=Usage(1, 1), cost_usd=0.0, stop="end_turn")
    while session.version < 10:
        session.change_status(status="running", reason="pad")
    app.save(session)
    assert [r.originator_version for r in stored(app, tree_uuid(session.id))] == [10]
    # After the record: the history rewritten, then walked again under the root: each
    # message is matched against nodes whose blocks are not read.
    session.compact_history(summary="[Previous conversation summary: s]", replaced=0,
                            tokens_before=1, tokens_after=1, budget=1, cost_usd=0.0)
    session.receive_user_message(text="same ", channel="c", user="u")
    session.append_assistant_message(content=[TextBlock("same")], stop_reason="end_turn",
                                     usage=Usage(1, 1), generation=0)
    app.save(session)
    loaded = app.session("alike", version=session.version)
    assert loaded is not None
    replay = replayed(app, session)
    texts = [[b.text for b in n.content if isinstance(b, TextBlock)]
             for n in replay.conversation.tree.nodes.values()]
    assert [[b.text for b in n.content if isinstance(b, TextBlock)]
            for n in loaded.conversation.tree.nodes.values()] == texts
    assert [t[0] for t in texts[1:6:2]] == ["same", " same ", "same  "]
    assert loaded.conversation.cursor == replay.conversation.cursor
    assert loaded == replay == session


def test_records_written_while_another_thread_reads_the_tree(
        app: TetherApplication, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer saves a session in small batches (a snapshot and a new tree record every
    few saves) while a reader loads it again and again and reads its whole tree: each
    read is the replay of the version it loaded."""
    monkeypatch.setattr(TetherApplication, "snapshotting_intervals", {Session: 6})
    monkeypatch.setattr(application, "TREE_RECORD_AGE", 12)
    session = with_tree("threads")
    grow(session, app, 12)
    done = threading.Event()
    seen: list[tuple[int, bytes]] = []
    failures: list[BaseException] = []

    def reader() -> None:
        try:
            while not done.is_set() or len(seen) < 3:
                loaded = app.session("threads")
                assert loaded is not None
                tree = in_full(loaded.conversation)
                seen.append((loaded.version, msgspec.json.encode(tree)))
        except BaseException as exc:  # reported below
            failures.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        grow(session, app, 150)
    finally:
        done.set()
        thread.join()
    assert not failures, failures
    assert len({v for v, _ in seen}) > 1  # it read while records were written
    for version, encoded in seen[:: max(1, len(seen) // 15)]:
        replay = replayed(app, session, version)
        assert encoded == msgspec.json.encode(in_full(replay.conversation)), version


def rewritten_record(app: TetherApplication, session: Session,
                     change: Callable[[dict[str, Any]], None]) -> None:
    """Store the session's tree record again with ``change`` made to its fields (as JSON:
    the packed columns are base64)."""
    assert app.snapshots is not None
    [record] = [r for r in stored(app, tree_uuid(session.id)) if isinstance(r, TreeRecord)]
    raw = msgspec.json.decode(app.mapper.to_stored_event(record).state)
    change(raw)
    with app.snapshots.recorder.datastore.transaction(commit=True) as cursor:
        cursor.execute(f"DELETE FROM {_table(app)} WHERE originator_id = {_param(app)}",
                       (_key(app, tree_uuid(session.id)),))
    app.snapshots.recorder.insert_events([StoredEvent(
        originator_id=tree_uuid(session.id), originator_version=record.originator_version,
        topic="tether.events.tree_records:TreeRecord", state=msgspec.json.encode(raw))])


def set_int(raw: dict[str, Any], column: str, index: int, value: int) -> None:
    """Set one little-endian int32 of a packed column."""
    packed = bytearray(base64.b64decode(raw[column]))
    packed[4 * index:4 * index + 4] = value.to_bytes(4, "little", signed=True)
    raw[column] = base64.b64encode(bytes(packed)).decode()


def test_a_record_of_another_key_format_is_passed_over(
        app: TetherApplication, caplog: pytest.LogCaptureFixture) -> None:
    session = with_tree("format")
    grow(session, app, SNAPSHOT_INTERVAL + 5)
    rewritten_record(app, session, lambda raw: raw.update(keys=2))  # digests made otherwise
    with caplog.at_level(logging.WARNING, logger=LOG):
        loaded = app.session("format")
        assert loaded is not None and loaded.conversation == session.conversation
    assert any("could not be decoded" in r.getMessage() for r in caplog.records)


DAMAGES: dict[str, Callable[[dict[str, Any]], None]] = {
    "parent-past-the-end": lambda raw: set_int(raw, "parents", 1, 10**6),
    "child-before-the-start": lambda raw: set_int(raw, "children", 0, -1),
    "cursor-of-no-node": lambda raw: raw.update(cursor="n-nowhere"),
    "bookmark-to-no-node": lambda raw: raw.update(bookmarks={"b": "n-nowhere"}),
    "root-block-not-held": lambda raw: raw.update(inline=[]),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_record_that_decodes_but_points_outside_itself_falls_back_to_the_events(
        app: TetherApplication, caplog: pytest.LogCaptureFixture, damage: str) -> None:
    """Damaged in the store, a record would link a wrong node or fail when a command
    reads it: it is passed over as one that does not decode, and the tree comes from the
    events."""
    session = with_tree("damaged")
    grow(session, app, SNAPSHOT_INTERVAL + 5)
    rewritten_record(app, session, DAMAGES[damage])
    with caplog.at_level(logging.WARNING, logger=LOG):
        loaded = app.session("damaged")
        assert loaded is not None and loaded.conversation == session.conversation
        assert tree_nodes(loaded.conversation.tree) == tree_nodes(session.conversation.tree)
    assert any("could not be decoded" in r.getMessage() for r in caplog.records)


def test_a_second_thread_never_gets_the_tree_while_the_first_mirrors_into_it(
        app: TetherApplication, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads take up one loaded session's tree at once: the one that comes while
    the other mirrors the messages added since the record waits for it, and never gets
    a tree half mirrored (its cursor behind, nodes missing)."""
    session = with_tree("racing")
    grow(session, app, SNAPSHOT_INTERVAL + 6)  # messages after the snapshot: to mirror
    loaded = app.session("racing")
    assert loaded is not None and not loaded.tree_in_hand
    seen: list[tuple[str, int]] = []
    others: list[threading.Thread] = []
    real = Conversation.sync

    def take_up() -> None:
        conversation = loaded.conversation
        seen.append((conversation.cursor, len(conversation.tree.nodes)))

    def sync(self: Conversation, *args: Any, **kwargs: Any) -> Any:
        if not others:  # the first mirroring: another thread takes the tree up meanwhile
            others.append(threading.Thread(target=take_up))
            others[0].start()
            others[0].join(timeout=0.5)  # (it waits for this one, or got the tree)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Conversation, "sync", sync)
    conversation = loaded.conversation
    others[0].join()
    want = session.conversation
    assert seen == [(want.cursor, len(want.tree.nodes))]
    assert conversation == want


def test_a_content_record_holding_another_message_alike_to_prefix_matching_falls_back(
        app: TetherApplication, caplog: pytest.LogCaptureFixture) -> None:
    """A content record whose messages were swapped with others of the same key (they
    differ in whitespace only: one digest) does not hold what its tree record says: the
    blocks come from the events, never the other message's."""
    session = with_tree("swapped")
    for first, text in (("a", "same"), ("b", " same "), ("c", "same\n")):  # one key
        session.clear_context()  # (each on a branch of its own)
        for said in (first, text):
            session.receive_user_message(text=said, channel="c", user="u")
            session.append_assistant_message(content=[TextBlock("ok")],
                                             stop_reason="end_turn", usage=Usage(1, 1),
                                             generation=0)
            session.complete_turn(rounds=1, usage=Usage(1, 1), cost_usd=0.0,
                                  stop="end_turn")
    grow(session, app, SNAPSHOT_INTERVAL)
    assert app.snapshots is not None
    [record, *_] = stored(app, contents_uuid(session.id))
    texts = [[b.text for b in blocks if isinstance(b, TextBlock)] for blocks in record.contents]
    alike = [i for i, t in enumerate(texts) if t and t[0].strip() == "same"]
    assert len(alike) == 3
    swapped = list(record.contents)
    swapped[alike[0]], swapped[alike[1]] = swapped[alike[1]], swapped[alike[0]]
    encoded = app.mapper.to_stored_event(TreeContents(
        originator_id=record.originator_id, originator_version=record.originator_version,
        timestamp=record.timestamp, contents=swapped))
    with app.snapshots.recorder.datastore.transaction(commit=True) as cursor:
        cursor.execute(f"UPDATE {_table(app)} SET state = {_param(app)} WHERE "
                       f"originator_id = {_param(app)} AND originator_version = {_param(app)}",
                       (encoded.state, _key(app, record.originator_id),
                        record.originator_version))
    loaded = app.session("swapped")
    assert loaded is not None
    with caplog.at_level(logging.WARNING, logger=LOG):
        assert msgspec.json.encode(in_full(loaded.conversation)) == msgspec.json.encode(
            session.conversation)
    assert any("reading the tree's messages from the events" in r.getMessage()
               for r in caplog.records)
    assert loaded == session
