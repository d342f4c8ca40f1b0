"""The conversation tree and the generation engine, through a running engine: every
message mirrored into the session's tree, generation events in order on the session's
event subject, branch/edit/generate/fork at a node from the bus and the command line, and
a kill's single error. The session's own decisions about generations (several
completions, the tool-iteration and round limits, a stop, the tree mid-turn) are tested
on plain values in ``tests/actors/session/``."""

from __future__ import annotations

import getpass
import queue
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import Engine
from tests.helpers import say, tether_cli, wait_until
from tether.actors.conversation import render_tree, tree_nodes
from tether.actors.runtime import RemoteError, ask
from tether.adapters.host import Host
from tether.events.codec import Decoder
from tether.events.forest import Forest
from tether.events.messages import (
    Accepted,
    AnyGenerationEvent,
    AssistantNode,
    Branched,
    BranchTo,
    EditNode,
    ForkSession,
    Generate,
    GenerationDone,
    GenerationError,
    TextBlock,
    ToolResultNode,
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
  - match: "after the branch"
    blocks: [{text: "Continued on the old branch."}]
"""


def test_generation_events_come_in_order_and_the_tree_mirrors_the_session(
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
    assert [e.seq for e in events] == list(range(1, 9))
    assert {(e.session_id, e.turn) for e in events} == {(sid, 0)}
    first_request, listing, result, final, done = (
        events[0], events[2], events[3], events[6], events[7])
    assert first_request.messages == 1 and first_request.max_tokens >= 1
    assert first_request.tools == ["AskUserQuestion", "load_tools"]  # lazy tools
    assert isinstance(result, ToolResultNode) and result.content == ". is empty"
    assert result.call_id == listing.content[1].id
    assert isinstance(final, AssistantNode) and final.parent_id == result.node_id
    # Seed 003: done carries the final node, not every node made on the way.
    assert done.nodes == [final.node_id] and done.stop == "end_turn"

    view = tree(host, sid)
    assert view.cursor == final.node_id
    assert [n.role for n in view.nodes] == ["system", "user", "assistant", "user", "assistant"]
    assert [n.depth for n in view.nodes] == [0, 1, 2, 3, 4]
    lines = render_tree(view.nodes, view.cursor)
    assert lines[-1].startswith("* ") and "The folder is empty." in lines[-1]
    assert lines[1].startswith("| ") and "look around" in lines[1]
    assert "calls list_dir()" in lines[2] and "1 tool result" in lines[3]

    # The tree is derived from the session's stored events: reading the store gives the
    # same nodes, and no Forest of its own is recorded.
    stored = host.app.tree(sid)
    assert stored is not None and stored[1] == view.cursor
    assert [n.node_id for n in tree_nodes(stored[0])] == [n.node_id for n in view.nodes]
    assert host.app.forest(sid) is None


def test_edit_branches_generate_answers_and_branch_goes_back(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any],
) -> None:
    host, _, llm = engine(TWO_TURNS)
    watcher = GenerationWatcher(host)
    channel = watch_channel(host, "test")
    sid = say(host, "look around")
    channel.wait_for("completed")
    say(host, "second question", sid)
    channel.wait_for("completed")
    old = tree(host, sid)
    question = next(n for n in old.nodes if n.text == "second question")

    # Editing a message that has an answer branches: the session moves to the edit.
    moved = ask(host.bus, host.subjects.manager, EditNode(
        session_id=sid, node_id=question.node_id[:8], text="Edited question"), Branched)
    assert moved.node_id != question.node_id and moved.messages == 5
    session = host.app.session(sid)
    assert session is not None and session.history[-1].content[0].text == "Edited question"  # type: ignore[union-attr]
    assert "MovedTo" in names(host, sid)

    while not watcher.events.empty():
        watcher.events.get()
    ask(host.bus, host.subjects.manager, Generate(session_id=sid), Accepted)
    channel.wait_for("completed")
    events = watcher.until_end()
    assert kinds(events) == ["ProviderRequest", "ProviderResponse", "AssistantNode",
                             "GenerationDone"]
    assert {e.turn for e in events} == {2}  # two turns completed before this one
    assert events[2].parent_id == moved.node_id
    sent = llm.requests[-1]["messages"]
    assert sent[-1]["content"][-1]["text"] == "Edited question"
    assert "second question" not in str(sent)
    assert "GenerationStarted" in names(host, sid)

    view = tree(host, sid)
    siblings = [n for n in view.nodes if n.parent_id == question.parent_id]
    assert [n.text for n in siblings] == ["second question", "Edited question"]
    assert view.cursor == events[2].node_id

    # Back to the old answer; the next message continues from there.
    old_answer = next(n for n in view.nodes if n.text == "Second answer.")
    back = ask(host.bus, host.subjects.manager,
               BranchTo(session_id=sid, node_id=old_answer.node_id), Branched)
    assert back.node_id == old_answer.node_id and back.messages == 6
    say(host, "after the branch", sid)
    channel.wait_for("completed")
    sent = str(llm.requests[-1]["messages"])
    assert "second question" in sent and "Edited question" not in sent
    assert tree(host, sid).cursor != old_answer.node_id

    # A fork at a node continues from it, in a new session.
    forked = ask(host.bus, host.subjects.manager,
                 ForkSession(session_id=sid, at_node=question.node_id), Accepted, timeout=10)
    wait_until(lambda: host.app.session(forked.session_id) is not None, "the fork stored")
    fork = host.app.session(forked.session_id)
    assert fork is not None and fork.forked_from == sid
    assert [t.role for t in fork.history] == ["user", "assistant", "user", "assistant", "user"]
    assert fork.history[-1].content[0].text == "second question"  # type: ignore[union-attr]


def test_tree_refusals_say_why(
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

    refused(BranchTo(session_id=sid, node_id=root.node_id), "that is a root")
    refused(BranchTo(session_id=sid, node_id=calls.node_id), "calls tools")
    refused(BranchTo(session_id=sid, node_id="zz"), "at least 4 characters")
    refused(BranchTo(session_id=sid, node_id="ffffffff"), "no node 'ffffffff'")
    refused(EditNode(session_id=sid, node_id=calls.node_id, text="x"), "tool")
    refused(EditNode(session_id=sid, node_id=user.node_id, text="   "), "empty")
    refused(BranchTo(session_id="nobody", node_id=user.node_id), "no session 'nobody'")
    with pytest.raises(RemoteError, match="nothing to answer"):
        ask(host.bus, host.subjects.manager, Generate(session_id=sid), Accepted)
    with pytest.raises(RemoteError, match="cannot run with tools active"):
        ask(host.bus, host.subjects.manager, Generate(session_id=sid, n=2), Accepted)
    with pytest.raises(RemoteError, match="calls tools"):
        ask(host.bus, host.subjects.manager,
            ForkSession(session_id=sid, at_node=calls.node_id), Accepted)
    assert len(tree(host, sid).nodes) == 5  # nothing changed


LONG_STORY = """
responses:
  - match: "long story"
    chunk: 2
    delay_ms: 30
    blocks:
      - text: "Once upon a time there was a very long story that took ages to tell."
"""
"""A reply streamed slowly (2 characters every 30 ms): time to stop or kill it."""


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


def test_the_tree_comes_in_pages_and_the_command_line_reads_them_all(
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
    assert whole.total == len(whole.nodes) == 7 and whole.offset == 0
    page = ask(host.bus, host.subjects.manager, TreeQuery(session_id=sid, offset=2, limit=3),
               TreeView, timeout=10)
    assert page.nodes == whole.nodes[2:5] and page.total == 7 and page.offset == 2
    assert page.version == whole.version and page.cursor == whole.cursor

    for key, value in {"TETHER_NATS_URL": nats_url, "TETHER_NAMESPACE": host.subjects.namespace,
                       "TETHER_STATE_DIR": host.settings.state_dir}.items():
        monkeypatch.setenv(key, value)
    read = _whole_tree(argparse.Namespace(config=None), sid, page_size=2)
    assert read.nodes == whole.nodes and read.cursor == whole.cursor


def test_split_delete_and_bookmarks_from_the_command_line(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any], nats_url: str,
) -> None:
    host, _, llm = engine(TWO_TURNS + """
  - match: "third"
    blocks: [{text: "Third answer."}]
""")
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

    # A split on the session's path: more nodes, the same text for the model.
    split = tether("split", sid, second.node_id[:8], "7")
    assert split.returncode == 0, split.stderr
    view = tree(host, sid)
    left = next(n for n in view.nodes if n.children and n.parent_id == second.parent_id
                and n.role == "user" and n.node_id != second.node_id)
    assert next(n for n in view.nodes if n.node_id == second.node_id).parent_id == left.node_id
    assert view.cursor == next(n for n in view.nodes if n.text == "Second answer.").node_id
    say(host, "third", sid, user=ME)
    channel.wait_for("completed")
    sent = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "user"]
    assert any("second question" in str(content) for content in sent)
    assert not any("second \n\nquestion" in str(c) or "second\n\nquestion" in str(c)
                   for c in sent)

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


def test_a_kill_mid_stream_ends_the_generation_with_one_aborted_error(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any],
) -> None:
    from tether.events.messages import Killed, KillSession

    host, _, llm = engine(LONG_STORY + """
  - match: "short one"
    blocks: [{text: "The end."}]
""")
    watcher = GenerationWatcher(host)
    channel = watch_channel(host, "test")
    sid = say(host, "tell me a long story")
    channel.wait_for("stream")
    assert ask(host.bus, host.subjects.manager, KillSession(session_id=sid), Killed,
               timeout=10).found
    events = watcher.until_end()
    assert kinds(events) == ["ProviderRequest", "GenerationError"]
    assert events[-1].kind == "aborted" and events[-1].message.startswith("killed")
    assert watcher.events.empty() and len(llm.requests) == 1
    # The killed turn is recorded as ended, and the kill is told once (not as a failure)
    channel.wait_for("status")
    failed = [e for e in host.app.session_events(sid) if type(e).__name__ == "TurnFailed"]
    assert [(e.kind, e.error.startswith("killed")) for e in failed] == [("killed", True)]
    assert not [m for m in channel.seen if m.kind == "failed"]
    # A resumed session's next turn is another turn, with a number of its own
    say(host, "a short one then", sid)
    again = watcher.until_end()
    assert {e.turn for e in again} == {events[0].turn + 1}


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
