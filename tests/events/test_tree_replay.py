"""Randomized: a session driven through every command that touches its tree, saved in
small batches with snapshots and tree records taken often, loads at every version around
them exactly as a replay of its events does, and its latest load is the live session.

The session's tree is mirrored late (when next used) and its record written when the
application takes a snapshot; a replay mirrors only when it must. Whatever the order,
the trees must be the same, node ids included (``events/session.py``, ``_mirror``).
"""

from __future__ import annotations

import random

import msgspec
import pytest

import tether.events.application as application
from tether.actors.conversation import history_at
from tether.events.application import TetherApplication, project
from tether.events.forest import ForestError
from tether.events.messages import TextBlock, ToolUseBlock, Usage
from tether.events.session import Session, Turn, tree_uuid
from tether.events.tree_records import StoredNodes, in_full

TEXTS = ("hi", "again", "what", "ok", "hello world here")
OPERATIONS = ("prompt", "user", "user", "assistant", "assistant", "calls", "result", "result",
              "refuse", "interrupt", "complete", "fail", "compact", "clear", "move", "alter",
              "alternative", "fork", "reminder", "interruption", "pad", "pad")


def act(rng: random.Random, session: Session) -> None:
    """One random command on ``session`` (some record nothing)."""
    match rng.choice(OPERATIONS):
        case "prompt":
            session.set_system_prompt(text=rng.choice(("P1", "P2", "P3")))
        case "user":
            session.receive_user_message(text=rng.choice(TEXTS), channel="c", user="u")
        case "assistant":
            session.append_assistant_message(content=[TextBlock(rng.choice(TEXTS))],
                                             stop_reason="end_turn", usage=Usage(1, 1),
                                             generation=0)
        case "calls":
            ids = dict.fromkeys(f"t{rng.randint(0, 5)}" for _ in range(rng.randint(1, 2)))
            session.append_assistant_message(
                content=[TextBlock("calling"), *[ToolUseBlock(i, "read", {"p": i}) for i in ids]],
                stop_reason="tool_use", usage=Usage(1, 1), generation=0)
        case ("result" | "refuse" | "interrupt") as how:
            pending = [b.id for b in session.pending_tool_calls()]
            call = (rng.choice(pending) if pending and rng.random() < 0.85
                    else f"t{rng.randint(0, 5)}")  # now and then a stray one
            if how == "result":
                session.record_tool_result(call_id=call, tool="read", output="out",
                                           is_error=False)
            elif how == "refuse":
                session.refuse_tool_call(call_id=call, reason="no")
            else:
                session.interrupt_tool_call(call_id=call, tool="read", reason="died")
        case "complete":
            session.complete_turn(rounds=1, usage=Usage(1, 1), cost_usd=0.0, stop="end_turn")
        case "fail":
            session.fail_turn(error="x")
        case "compact" if session.history and rng.random() < 0.5:
            session.compact_history(summary="[Previous conversation summary: s]",
                                    replaced=rng.randint(0, len(session.history)),
                                    tokens_before=1, tokens_after=1, budget=1, cost_usd=0.0)
        case "clear" if rng.random() < 0.5:
            session.clear_context()
        case "move":
            tree = session.conversation.tree
            nodes = [n for n in tree.nodes if tree.nodes[n].parent is not None]
            for node in rng.sample(nodes, min(5, len(nodes))):
                try:
                    history = history_at(tree, node)
                except (LookupError, ForestError):
                    continue
                session.move_to(node_id=node, history=history, reason="r")
                return
        case "alter":
            alter(rng, session)
        case "alternative":
            nodes = list(session.conversation.tree.nodes)
            parent = rng.choice(nodes) if nodes and rng.random() < 0.9 else ""
            session.add_alternative(content=[TextBlock(rng.choice(TEXTS))],
                                    stop_reason="end_turn", usage=Usage(1, 1), node_id="",
                                    parent_id=parent)
        case "fork" if rng.random() < 0.3:
            history = [Turn(rng.choice(("user", "assistant")), [TextBlock(rng.choice(TEXTS))])
                       for _ in range(rng.randint(0, 3))]
            session.fork_from(source_id="src", at_version=1, history=history, fired_rules=[])
        case "reminder":
            session.add_ttsr_reminder(rules=["r"], reminder=rng.choice(TEXTS))
        case "interruption":
            session.record_ttsr_interruption(
                rules=["r"], reminder=rng.choice(TEXTS), generation=0,
                partial_text=rng.choice(("", "partial")), source="s",
                context_mode=rng.choice(("keep", "discard")))
        case "pad":
            session.change_status(status=rng.choice(("running", "idle")), reason="r")


def alter(rng: random.Random, session: Session) -> None:
    """A user's edit, split, delete or bookmark, planned as the session's core plans it."""
    tree, cursor = session.conversation.tree, session.conversation.cursor
    nodes = [n for n in tree.nodes if tree.nodes[n].parent is not None]
    if not nodes:
        return
    node = rng.choice(nodes)
    operation = rng.choice(("edit", "split", "delete", "bookmark", "unbookmark"))
    try:
        if operation == "edit":
            planned = tree.plan_edit(node, rng.choice(TEXTS) + rng.choice(("", " more")))
        elif operation == "split":
            planned = tree.plan_split(node, rng.randint(1, max(1, len(tree.node(node).text) - 1)))
        elif operation == "delete":
            if cursor and node in {n.id for n in tree.path(cursor)}:
                return
            planned = tree.plan_delete(node, rng.choice(("cascade", "reparent")))
        elif operation == "bookmark":
            planned = tree.plan_bookmark(rng.choice("ab"), node)
        else:
            planned = tree.plan_remove_bookmark(rng.choice("ab"))
    except (LookupError, ForestError):
        return
    if planned.changes:
        session.alter_tree(operation=operation, node_id=node, result_id=planned.node_id,
                           changes=planned.changes)


def tree_of(session: Session) -> tuple[bytes, str, int, str | None]:
    """The tree encoded (read whole first: a tree read from its record keeps its nodes
    and blocks apart until used, and cannot be encoded so), and the session's place."""
    conversation = in_full(session.conversation)
    return (msgspec.json.encode(conversation.tree), conversation.cursor,
            conversation.mirrored, conversation.prompt)


def drive(app: TetherApplication, monkeypatch: pytest.MonkeyPatch, rng: random.Random,
          session_id: str, until: int, restarts: bool) -> Session:
    """A session driven through random commands to version ``until``, saved now and then
    (snapshots every 10 events, tree records at most 30 apart); ``restarts``: reloaded
    from the store now and then, as an actor that restarts is."""
    monkeypatch.setattr(TetherApplication, "snapshotting_intervals", {Session: 10})
    monkeypatch.setattr(application, "TREE_RECORD_AGE", 30)
    live = Session(session_id=session_id, name="n", workspace="/w", model="m", channel="c")
    live.set_system_prompt(text="P1")
    app.save(live)
    while live.version < until:
        act(rng, live)
        if rng.random() < 0.3:
            live.conversation  # noqa: B018  (the actor uses the tree as it goes)
        if rng.random() < 0.35:
            app.save(live)
            if restarts and rng.random() < 0.1:
                live = app.session(live.session_id) or live
    app.save(live)
    return live


@pytest.mark.parametrize("seed", range(3))
def test_a_load_is_the_replay_at_every_version_around_its_records(
        app: TetherApplication, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    rng = random.Random(seed)
    live = drive(app, monkeypatch, rng, f"r{seed}", until=300, restarts=True)

    assert app.snapshots is not None
    records = [s.originator_version for s in app.snapshots.get(tree_uuid(live.id))]
    snapshots = [s.originator_version for s in app.snapshots.get(live.id)]
    assert records and len(snapshots) >= 25
    around = {v + d for v in records for d in (-1, 0, 1, 2)} | set(rng.sample(snapshots, 8))
    for version in sorted(v for v in around if 1 <= v <= live.version):
        loaded = app.session(live.session_id, version=version)
        replay = project(None, app.events.get(live.id, lte=version))
        assert loaded is not None and tree_of(loaded) == tree_of(replay), version
        assert loaded == replay, version
    latest = app.session(live.session_id)
    assert latest is not None and tree_of(latest) == tree_of(live) and latest == live


@pytest.mark.parametrize("seed", range(3, 6))
def test_commands_on_a_tree_read_from_its_record_do_as_on_the_replay(
        app: TetherApplication, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """A session loaded around its tree records (its nodes and their blocks read only as
    commands need them) goes on through random commands, moves and tree changes
    included, exactly as the replay of the same version does."""
    live = drive(app, monkeypatch, random.Random(seed), f"c{seed}", until=200,
                 restarts=False)

    assert app.snapshots is not None
    records = [s.originator_version for s in app.snapshots.get(tree_uuid(live.id))]
    for version in sorted({v + d for v in records for d in (0, 3)} & set(range(1, 201))):
        loaded = app.session(live.session_id, version=version)
        replay = project(None, app.events.get(live.id, lte=version))
        assert loaded is not None
        if version in records:  # read from its record: nodes and blocks as needed
            assert isinstance(loaded.conversation.tree.nodes, StoredNodes)
        for step in range(25):
            act(random.Random(seed * 10_000 + version * 100 + step), loaded)
            act(random.Random(seed * 10_000 + version * 100 + step), replay)
        assert tree_of(loaded) == tree_of(replay), version
        assert loaded.history == replay.history, version
