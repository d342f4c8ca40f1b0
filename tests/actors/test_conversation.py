"""The session as a cursor on its tree: mirroring, views, node names, where one can stand."""

from __future__ import annotations

import pytest

from actors.conversation import (
    TreeMirror,
    history_at,
    locate,
    node_text,
    render_tree,
    resolve_node,
    tree_nodes,
)
from events.forest import Forest, ForestState, Node
from events.messages import TextBlock, ToolResultBlock, ToolUseBlock
from events.session import Turn


def user(text: str) -> Turn:
    return Turn("user", [TextBlock(text)])


def assistant(text: str) -> Turn:
    return Turn("assistant", [TextBlock(text)])


CALL = Turn("assistant", [TextBlock("Looking."), ToolUseBlock("t1", "list_dir", {"path": "."})])
RESULT = Turn("user", [ToolResultBlock("t1", "a.py", False)])


def test_sync_appends_only_what_is_new_and_reports_it() -> None:
    forest = Forest(session_id="s1")
    mirror = TreeMirror(forest)
    history = [user("hi"), assistant("hello")]
    placed = mirror.sync("prompt", history)
    assert [t for _, _, t in placed] == history
    assert mirror.cursor == placed[-1][0]
    assert placed[0][1] == forest.roots()[0].id  # the first message hangs under the root
    history.append(user("more"))
    again = mirror.sync("prompt", history)
    assert [t for _, _, t in again] == [user("more")] and again[0][1] == placed[-1][0]
    assert mirror.sync("prompt", history) == []
    assert len(forest.state.nodes) == 4


def test_a_rewritten_history_shares_the_path_as_far_as_it_agrees() -> None:
    forest = Forest(session_id="s1")
    mirror = TreeMirror(forest)
    mirror.sync("prompt", [user("hi"), assistant("hello"), user("one")])
    first_cursor = mirror.cursor
    # A new list (as a compaction or a branch makes) with a different last message.
    mirror.sync("prompt", [user("hi"), assistant("hello"), user("two")])
    assert mirror.cursor != first_cursor
    hello = next(n for n in forest.state.nodes.values() if n.text == "hello")
    assert [c.text for c in forest.children(hello.id)] == ["one", "two"]
    # Another system prompt is another root.
    mirror.sync("other prompt", [user("hi")])
    assert [r.text for r in forest.roots()] == ["prompt", "other prompt"]


def test_an_empty_history_makes_no_root() -> None:
    forest = Forest(session_id="s1")
    mirror = TreeMirror(forest)
    history: list[Turn] = []
    assert mirror.sync("prompt", history) == [] and mirror.cursor == ""
    assert forest.roots() == []
    history.append(user("hi"))  # the same list, appended to later
    assert len(mirror.sync("prompt", history)) == 1
    assert len(forest.roots()) == 1


def test_history_at_refuses_roots_and_unanswered_calls() -> None:
    forest = Forest(session_id="s1")
    mirror = TreeMirror(forest)
    placed = mirror.sync("prompt", [user("hi"), CALL, RESULT, assistant("done")])
    ids = [node for node, _, _ in placed]
    assert history_at(forest.state, ids[2]) == [user("hi"), CALL, RESULT]
    with pytest.raises(LookupError, match="root"):
        history_at(forest.state, forest.roots()[0].id)
    with pytest.raises(LookupError, match="calls tools"):
        history_at(forest.state, ids[1])


def test_resolve_node_by_id_prefix_or_bookmark() -> None:
    forest = Forest(session_id="s1")
    mirror = TreeMirror(forest)
    placed = mirror.sync("prompt", [user("hi"), assistant("hello")])
    node = placed[1][0]
    forest.bookmark("good", node)
    state = forest.state
    assert resolve_node(state, node) == node
    assert resolve_node(state, node[:8]) == node
    assert resolve_node(state, "good") == node
    with pytest.raises(LookupError, match="at least 4"):
        resolve_node(state, node[:3])
    with pytest.raises(LookupError, match="no node"):
        resolve_node(state, "zzzzzzzz")
    twins = ForestState(forest_id="f", nodes={
        "abcd1111": Node("abcd1111", None, "system", (TextBlock("p"),)),
        "abcd2222": Node("abcd2222", None, "system", (TextBlock("q"),)),
    }, roots=["abcd1111", "abcd2222"])
    with pytest.raises(LookupError, match="names 2 nodes"):
        resolve_node(twins, "abcd")
    assert resolve_node(twins, "abcd2") == "abcd2222"


def test_node_text_and_the_rendered_tree() -> None:
    assert node_text(CALL.content) == "Looking.; calls list_dir()"
    assert node_text(RESULT.content) == "1 tool result"
    assert node_text([ToolResultBlock("a", "x", True), ToolResultBlock("b", "y", False)]) == (
        "2 tool results (1 failed)")
    assert node_text([TextBlock("word " * 100)], limit=20) == "word word word word…"
    forest = Forest(session_id="s1")
    mirror = TreeMirror(forest)
    mirror.sync("prompt", [user("hi"), assistant("hello")])
    mirror.sync("prompt", [user("hi"), assistant("howdy")])
    forest.bookmark("alt", mirror.cursor)
    nodes = tree_nodes(forest.state)
    assert [(n.depth, n.text) for n in nodes] == [
        (0, "prompt"), (1, "hi"), (2, "hello"), (2, "howdy")]
    assert nodes[3].bookmarks == ["alt"] and nodes[1].children == 2
    mirror.sync("prompt", [user("hi"), assistant("howdy"), user("more"), assistant("ok")])
    nodes = tree_nodes(forest.state)
    lines = render_tree(nodes, mirror.cursor)
    assert [line[0] for line in lines] == ["|", "|", " ", "|", "|", "*"]
    assert lines[3].endswith("assistant [alt]: howdy")
    assert lines[2].startswith(f"      {nodes[2].node_id[:8]} assistant: hello")
    # under the root and at a branch point one step in; a single reply keeps its column
    assert [len(line[2:]) - len(line[2:].lstrip()) for line in lines] == [0, 2, 4, 4, 4, 4]


def test_locate_finds_the_cursor_without_changing_the_tree() -> None:
    forest = Forest(session_id="s1")
    mirror = TreeMirror(forest)
    history = [user("hi"), CALL, RESULT, assistant("done")]
    mirror.sync("prompt", history)
    forest.collect_events()
    assert locate(forest.state, "prompt", history) == mirror.cursor
    assert locate(forest.state, "prompt", history[:2]) == forest.state.path(
        mirror.cursor)[2].id
    assert locate(forest.state, "prompt", [*history, user("new")]) == ""
    assert locate(forest.state, "other", history) == ""
    assert locate(forest.state, "prompt", []) == ""
    assert forest.pending_events == []  # nothing was recorded
