"""Reading a session's conversation tree (actors.conversation): the history at a node,
the tree as a list and drawn, node names, where a session can stand."""

from __future__ import annotations

import pytest

from tests.turns import CALL, CALLS, RESULT, assistant, user
from tether.actors.conversation import history_at, node_text, render_tree, resolve_node, tree_nodes
from tether.actors.model.context import shape_messages
from tether.events.conversation import Conversation, Turn, locate
from tether.events.forest import Forest, ForestState, Node
from tether.events.messages import TextBlock, ToolResultBlock


def test_history_at_refuses_roots_and_unanswered_calls() -> None:
    forest = Forest(session_id="s1")
    mirror = Conversation(tree=forest.state)
    placed = mirror.sync("prompt", [user("hi"), CALL, RESULT, assistant("done")])
    ids = [node for node, _, _ in placed]
    assert history_at(forest.state, ids[2]) == [user("hi"), CALL, RESULT]
    with pytest.raises(LookupError, match="root"):
        history_at(forest.state, forest.roots()[0].id)
    with pytest.raises(LookupError, match="calls tools"):
        history_at(forest.state, ids[1])


def test_resolve_node_by_id_prefix_or_bookmark() -> None:
    forest = Forest(session_id="s1")
    mirror = Conversation(tree=forest.state)
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
    mirror = Conversation(tree=forest.state)
    mirror.sync("prompt", [user("hi"), assistant("hello")])
    mirror.rewritten()
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
    ids = [n.node_id[:8] for n in nodes]
    # under the root one step in; connectors at the branch point; a single reply keeps
    # its column
    assert lines == [
        f"| {ids[0]} system: prompt",
        f"|    {ids[1]} user: hi",
        f"     ├─ {ids[2]} assistant: hello",
        f"|    └─ {ids[3]} assistant [alt]: howdy",
        f"|       {ids[4]} user: more",
        f"*       {ids[5]} assistant: ok",
    ]


# --- continuations: a message the tree holds in two parts -----------------------------------


def sent(history: list[Turn]) -> list[tuple[str, str]]:
    """What the model is sent for ``history``: (role, text) of each message."""
    return [(m["role"], "".join(b["text"] for b in m["content"]))
            for m in shape_messages(history)]


def test_an_edit_sharing_a_prefix_sends_each_branch_as_one_message() -> None:
    forest = Forest(session_id="s1")
    mirror = Conversation(tree=forest.state)
    placed = mirror.sync("prompt", [user("what colour is the sky"), assistant("blue")])
    question, blue = placed[0][0], placed[1][0]
    edited = forest.edit(question, "what colour is the grass")

    new = history_at(forest.state, edited)
    assert new == [user("what colour is the "), Turn("user", [TextBlock("grass")], True)]
    assert sent(new) == [("user", "what colour is the grass")]
    old = history_at(forest.state, blue)
    assert [t.continues for t in old] == [False, True, False]
    assert sent(old) == [("user", "what colour is the sky"), ("assistant", "blue")]
    # the tree shows where a message goes on from its parent
    assert [n.text for n in tree_nodes(forest.state)] == [
        "prompt", "what colour is the", "…sky", "blue", "…grass"]


def test_a_split_reads_back_as_the_message_it_was() -> None:
    forest = Forest(session_id="s1")
    mirror = Conversation(tree=forest.state)
    placed = mirror.sync("prompt", [user("hello  world"), assistant("hi"), user("more")])
    forest.split(placed[0][0], 6)
    history = history_at(forest.state, placed[2][0])
    assert [t.continues for t in history] == [False, True, False, False]
    assert sent(history) == [("user", "hello  world"), ("assistant", "hi"), ("user", "more")]
    # mirroring that history again (rewritten) finds the same nodes: nothing new
    before = len(forest.state.nodes)
    mirror.rewritten()
    mirror.sync("prompt", history)
    assert mirror.cursor == placed[2][0] and len(forest.state.nodes) == before


def test_a_fork_re_appends_continuations_into_its_new_tree() -> None:
    source = Forest(session_id="s1")
    mirror = Conversation(tree=source.state)
    placed = mirror.sync("prompt", [user("what colour is the sky"), assistant("blue")])
    edited = source.edit(placed[0][0], "what colour is the grass")
    history = history_at(source.state, edited)

    fork = Forest(session_id="s2")
    fork_mirror = Conversation(tree=fork.state)
    fork_mirror.sync("prompt", history)
    assert [n.continues for n in fork.path(fork_mirror.cursor)] == [False, False, True]
    assert history_at(fork.state, fork_mirror.cursor) == history
    history.append(assistant("green"))
    fork_mirror.sync("prompt", history)
    assert sent(history_at(fork.state, fork_mirror.cursor)) == [
        ("user", "what colour is the grass"), ("assistant", "green")]
    assert locate(fork.state, "prompt", history) == fork_mirror.cursor




# --- where a session can stand -------------------------------------------------------------


def test_history_at_checks_every_call_on_the_path() -> None:
    forest = Forest(session_id="s1")
    root = forest.root_for("prompt")
    ask = forest.append(root, "user", [TextBlock("look")])
    calls = forest.append(ask, "assistant", list(CALLS.content))
    half = forest.append(calls, "user", [ToolResultBlock("t1", "a.py", False)])
    done = forest.append(half, "assistant", [TextBlock("done")])
    with pytest.raises(LookupError, match=f"message {calls} .*not answer \\(t2\\)"):
        history_at(forest.state, done)
    whole = forest.append(calls, "user", [ToolResultBlock("t1", "a.py", False),
                                          ToolResultBlock("t2", "text", False)])
    fine = forest.append(whole, "assistant", [TextBlock("done")])
    assert len(history_at(forest.state, fine)) == 4
    # results whose calls are gone from the path (a reparenting delete)
    forest.delete(calls, "reparent")
    with pytest.raises(LookupError, match=f"message {whole} .*did not make \\(t1, t2\\)"):
        history_at(forest.state, fine)


def test_render_tree_draws_connectors_at_branch_points() -> None:
    """The example of render_tree's docstring."""
    forest = Forest(session_id="s1")
    mirror = Conversation(tree=forest.state)
    placed = mirror.sync("be brief", [user("what colour is the sky"), assistant("blue"),
                                      user("thanks")])
    grass = forest.edit(placed[0][0], "what colour is the grass")
    history = history_at(forest.state, grass)
    mirror.stand_at(grass, "be brief", history)
    history.append(assistant("green"))
    mirror.sync("be brief", history)
    nodes = tree_nodes(forest.state)
    ids = {n.text: n.node_id[:8] for n in nodes}
    assert render_tree(nodes, mirror.cursor) == [
        f"| {ids['be brief']} system: be brief",
        f"|    {ids['what colour is the']} user: what colour is the",
        f"     ├─ {ids['…sky']} user: …sky",
        f"     │  {ids['blue']} assistant: blue",
        f"     │  {ids['thanks']} user: thanks",
        f"|    └─ {ids['…grass']} user: …grass",
        f"*       {ids['green']} assistant: green",
    ]
