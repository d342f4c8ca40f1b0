"""The conversation tree and the generation engine, through a running engine: generation
events in order on the session's event subject, the tree as the store holds it, the
manager's refusals, the command line's tree commands, and a session stored with a Forest
imported when its actor first runs.

What the session decides about its tree and its generations (the events of a turn and
their fields, edits, branches, splits, refusals, pages, several completions, the limits,
a stop, a kill) is tested on plain values in ``tests/actors/session/`` (test_tree.py,
test_generation.py, test_endings.py)."""

from __future__ import annotations

import getpass
import queue
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import Engine
from tests.helpers import say, tether_cli, wait_until
from tether.actors.conversation import tree_nodes
from tether.actors.runtime import RemoteError, ask
from tether.adapters.host import Host
from tether.events.codec import Decoder
from tether.events.forest import Forest, forest_uuid
from tether.events.messages import (
    Accepted,
    AnyGenerationEvent,
    Branched,
    BranchTo,
    ForkSession,
    GenerationDone,
    GenerationError,
    TextBlock,
    TreeQuery,
    TreeView,
    Usage,
)
from tether.events.session import Session

ME = getpass.getuser()
"""The command line's principal: its tree commands act on the sessions it owns."""


class GenerationWatcher:
    """Every generation event of every session of a host, in arrival order."""

    def __init__(self, host: Host) -> None:
        self.events: queue.Queue[Any] = queue.Queue()
        decoder: Decoder[Any] = Decoder(AnyGenerationEvent)
        subject = f"{host.subjects.namespace}.session.*.events"
        self._sub = host.bus.subscribe(subject, lambda m: self.events.put(
            decoder.decode(m.data)))
        host.bus.flush()

    def until_end(self, timeout: float = 15.0) -> list[Any]:
        """The events up to and including the next done or error."""
        out: list[Any] = []
        while True:
            try:
                event = self.events.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no done or error; saw {kinds(out)}") from None
            out.append(event)
            if isinstance(event, (GenerationDone, GenerationError)):
                return out


def kinds(events: list[Any]) -> list[str]:
    return [type(e).__name__ for e in events]


def tree(host: Host, session: str) -> TreeView:
    return ask(host.bus, host.subjects.manager, TreeQuery(session_id=session), TreeView,
               timeout=10)


def names(host: Host, sid: str) -> list[str]:
    return [type(e).__name__ for e in host.app.session_events(sid)]


TWO_TURNS = """
responses:
  - match: "look around"
    blocks:
      - text: "Listing."
      - tool_use: {name: list_dir, input: {path: "."}}
  - match: ". is empty"
    blocks: [{text: "The folder is empty."}]
  - match: "second"
    blocks: [{text: "Second answer."}]
  - match: "Edited question"
    blocks: [{text: "Answer to the edit."}]
"""


def test_generation_events_reach_the_bus_in_order_and_the_store_holds_the_tree(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any],
) -> None:
    host, _, _ = engine(TWO_TURNS)
    watcher = GenerationWatcher(host)
    channel = watch_channel(host, "test")
    sid = say(host, "look around")
    channel.wait_for("completed")
    events = watcher.until_end()
    assert kinds(events) == [
        "ProviderRequest", "ProviderResponse", "AssistantNode", "ToolResultNode",
        "ProviderRequest", "ProviderResponse", "AssistantNode", "GenerationDone",
    ]
    assert {e.session_id for e in events} == {sid}
    view = tree(host, sid)
    assert view.cursor == events[-2].node_id
    # The tree is derived from the session's stored events: reading the store gives the
    # same nodes, and no Forest of its own is recorded.
    stored = host.app.tree(sid)
    assert stored is not None and stored[1] == view.cursor
    assert [n.node_id for n in tree_nodes(stored[0])] == [n.node_id for n in view.nodes]
    assert host.app.load(forest_uuid(sid), Forest) is None


def test_the_manager_s_tree_refusals_say_why(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any],
) -> None:
    host, _, _ = engine(TWO_TURNS)
    channel = watch_channel(host, "test")
    sid = say(host, "look around")
    channel.wait_for("completed")
    view = tree(host, sid)
    root, user, calls = view.nodes[0], view.nodes[1], view.nodes[2]

    def refused(request: Any, match: str) -> None:
        with pytest.raises(RemoteError, match=match):
            ask(host.bus, host.subjects.manager, request, Branched)

    refused(BranchTo(session_id=sid, node_id=root.node_id), "that is a root")  # the session's
    refused(BranchTo(session_id="nobody", node_id=user.node_id), "no session 'nobody'")
    with pytest.raises(RemoteError, match="calls tools"):
        ask(host.bus, host.subjects.manager,
            ForkSession(session_id=sid, at_node=calls.node_id), Accepted)
    assert len(tree(host, sid).nodes) == 5  # nothing changed


def test_tree_branch_edit_and_generate_from_the_command_line(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any], nats_url: str,
) -> None:
    host, _, _ = engine(TWO_TURNS)
    channel = watch_channel(host, "test")
    sid = say(host, "look around", user=ME)
    channel.wait_for("completed")
    tether = tether_cli(host, nats_url)

    shown = tether("tree", sid)
    assert shown.returncode == 0, shown.stderr
    view = tree(host, sid)
    marked = [line for line in shown.stdout.splitlines()
              if line.startswith("* ") and " = where " not in line]
    assert len(marked) == 1 and view.cursor[:8] in marked[0]
    assert "The folder is empty." in marked[0]
    user = next(n for n in view.nodes if n.text == "look around")
    edited = tether("edit", sid, user.node_id[:8], "Edited question")
    assert edited.returncode == 0, edited.stderr
    assert "now stands at" in edited.stdout
    generated = tether("generate", sid)
    assert generated.returncode == 0, generated.stderr
    channel.wait_for("completed")
    wait_until(lambda: any(n.text == "Answer to the edit." for n in tree(host, sid).nodes),
               "the generated answer in the tree")
    refused = tether("generate", sid, "-n", "2")
    assert refused.returncode != 0 and "--no-tools" in refused.stderr
    back = tether("branch", sid, user.node_id[:8])
    assert back.returncode == 0, back.stderr
    assert tree(host, sid).cursor == user.node_id
    session = host.app.session(sid)
    assert session is not None and [t.role for t in session.history] == ["user"]
    forked = tether("fork", sid, "--at", user.node_id[:8])
    assert forked.returncode == 0, forked.stderr
    fork_id = forked.stdout.split(" into ")[1].split(";")[0]
    wait_until(lambda: host.app.session(fork_id) is not None, "the fork stored")
    fork = host.app.session(fork_id)
    assert fork is not None and fork.forked_from == sid
    assert [(t.role, t.content[0].text) for t in fork.history] == [  # type: ignore[union-attr]
        ("user", "look around")]
    by_node = tether("fork", sid, "--at-node", user.node_id[:8])
    assert by_node.returncode == 0, by_node.stderr


def test_the_command_line_reads_the_tree_page_by_page(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any], nats_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import argparse

    from tether.adapters.cli.tree import whole_tree as _whole_tree

    host, _, _ = engine(TWO_TURNS)
    channel = watch_channel(host, "test")
    sid = say(host, "look around", user=ME)
    channel.wait_for("completed")
    say(host, "second", sid, user=ME)
    channel.wait_for("completed")
    whole = tree(host, sid)
    assert whole.total == len(whole.nodes) == 7

    for key, value in {"TETHER_NATS_URL": nats_url, "TETHER_NAMESPACE": host.subjects.namespace,
                       "TETHER_STATE_DIR": host.settings.state_dir}.items():
        monkeypatch.setenv(key, value)
    read = _whole_tree(argparse.Namespace(config=None), sid, page_size=2)
    assert read.nodes == whole.nodes and read.cursor == whole.cursor


def test_split_delete_and_bookmarks_from_the_command_line(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any], nats_url: str,
) -> None:
    host, _, _ = engine(TWO_TURNS)
    channel = watch_channel(host, "test")
    sid = say(host, "look around", user=ME)
    channel.wait_for("completed")
    say(host, "second question", sid, user=ME)
    channel.wait_for("completed")
    tether = tether_cli(host, nats_url)
    nodes = tree(host, sid).nodes
    first = next(n for n in nodes if n.text == "look around")
    second = next(n for n in nodes if n.text == "second question")

    marked = tether("bookmark", sid, "start", first.node_id[:8])
    assert marked.returncode == 0, marked.stderr
    assert "bookmark 'start' names" in marked.stdout
    assert next(n for n in tree(host, sid).nodes if n.node_id == first.node_id).bookmarks == [
        "start"]

    # A split on the session's path: more nodes.
    split = tether("split", sid, second.node_id[:8], "7")
    assert split.returncode == 0, split.stderr
    view = tree(host, sid)
    left = next(n for n in view.nodes if n.children and n.parent_id == second.parent_id
                and n.role == "user" and n.node_id != second.node_id)
    assert next(n for n in view.nodes if n.node_id == second.node_id).parent_id == left.node_id
    assert view.cursor == next(n for n in view.nodes if n.text == "Second answer.").node_id

    refused = tether("delete", sid, second.node_id[:8])
    assert refused.returncode != 0 and "move it elsewhere first" in refused.stderr
    assert tether("branch", sid, "start").returncode == 0  # a bookmark names the node
    before = len(tree(host, sid).nodes)
    deleted = tether("delete", sid, left.node_id[:8])
    assert deleted.returncode == 0, deleted.stderr
    after = tree(host, sid)
    assert len(after.nodes) < before and left.node_id not in {n.node_id for n in after.nodes}
    assert after.cursor == first.node_id
    gone = tether("bookmark", sid, "start", "--remove")
    assert gone.returncode == 0, gone.stderr
    assert tether("branch", sid, "start").returncode != 0
    stored = [e.operation for e in host.app.session_events(sid)
              if isinstance(e, Session.TreeAltered)]
    assert {"split", "delete", "bookmark", "unbookmark"} <= set(stored)


def test_a_session_stored_with_a_forest_imports_its_tree_when_its_actor_first_runs(
    engine: Callable[..., Engine],
) -> None:
    """The upgrade: a session stored before sessions kept their own tree recorded it in a
    Forest aggregate; its actor imports that tree once, so no edit made in it is lost."""
    host, _, _ = engine()
    sid, owner = "legacy01", ME
    session = Session(session_id=sid, name="an-older-session", workspace="/tmp", model="m",
                      channel="test", owner=owner, keeps_tree=False)
    session.set_system_prompt(text="an older prompt")
    session.receive_user_message(text="what colour is the sky", channel="test", user=owner)
    session.append_assistant_message(content=[TextBlock("blue")], stop_reason="end_turn",
                                     usage=Usage(1, 1), generation=1)
    session.complete_turn(rounds=1, usage=Usage(1, 1), cost_usd=0.0, stop="end_turn")
    forest = Forest(session_id=sid)
    root = forest.root_for("an older prompt")
    asked = forest.append(root, "user", [TextBlock("what colour is the sky")])
    answered = forest.append(asked, "assistant", [TextBlock("blue")])
    sea = forest.append(root, "user", [TextBlock("what colour is the sea")])  # a branch
    forest.bookmark("sea", sea)  # neither is in the session's history
    host.app.save(session, forest)
    assert host.app.tree(sid) == (forest.state, answered)  # read from the Forest until then

    view = tree(host, sid)  # its actor starts, and imports the tree
    assert view.cursor == answered
    assert {n.node_id: n.bookmarks for n in view.nodes}[sea] == ["sea"]
    assert names(host, sid).count("TreeImported") == 1
    stored = host.app.tree(sid)
    assert stored is not None and stored[0] == forest.state and stored[1] == answered
    tree(host, sid)
    assert names(host, sid).count("TreeImported") == 1  # once
