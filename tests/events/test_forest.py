"""The conversation Forest: its rules (pure core), its aggregate and a store round trip."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from eventsourcing.persistence import StoredEvent

from tether.events.application import TetherApplication, aggregate_name
from tether.events.forest import (
    AddNode,
    BookmarkError,
    BrokenPathError,
    Change,
    ContinuationError,
    DeleteModeError,
    DropBookmark,
    DuplicateMessageError,
    EmptyEditError,
    Forest,
    ForestError,
    ForestState,
    InvalidContentError,
    InvalidRoleError,
    MoveNode,
    Node,
    NodeNotFoundError,
    NotTextError,
    RemoveNode,
    RootOperationError,
    SetBookmark,
    SetContent,
    SplitPositionError,
    ToolUseEditError,
    forest_uuid,
    message_key,
    node_id_for,
)
from tether.events.messages import ContentBlock, TextBlock, ToolResultBlock, ToolUseBlock


def T(text: str) -> list[ContentBlock]:
    return [TextBlock(text)]


def texts(nodes: list[Node]) -> list[str]:
    return [n.text for n in nodes]


@pytest.fixture
def forest() -> Forest:
    return Forest(session_id="s1")


def chat(forest: Forest) -> tuple[str, str, str, str]:
    """root -> user "hello world" -> assistant "hi there" -> user "bye"."""
    root = forest.root_for("be brief")
    user = forest.append(root, "user", T("hello world"))
    reply = forest.append(user, "assistant", T("hi there"))
    bye = forest.append(reply, "user", T("bye"))
    return root, user, reply, bye


def copy_state(state: ForestState) -> ForestState:
    """A copy the state's changes cannot reach (nodes are frozen: sharing them is safe)."""
    return ForestState(state.forest_id, dict(state.nodes), list(state.roots),
                       dict(state.bookmarks), state.created)


def pending(forest: Forest) -> list[str]:
    return [type(e).__name__ for e in forest.pending_events]


def refused(forest: Forest, error: type[ForestError], match: str,
            call: Callable[[], object]) -> None:
    """``call`` raises ``error`` and leaves the forest as it was, with no event recorded."""
    events_before = len(forest.pending_events)
    state_before = copy_state(forest.state)
    with pytest.raises(error, match=match):
        call()
    assert len(forest.pending_events) == events_before
    assert forest.state == state_before


# --- ids -----------------------------------------------------------------------------------


def test_one_forest_per_session_with_a_derived_id() -> None:
    a = Forest(session_id="s1")
    assert a.id == forest_uuid("s1") == Forest(session_id="s1").id
    assert forest_uuid("s2") != a.id
    assert a.session_id == "s1"
    assert a.state.forest_id == str(a.id)
    assert pending(a) == ["Started"]


def test_node_ids_count_created_nodes_and_are_deterministic() -> None:
    a, b = Forest(session_id="s1"), Forest(session_id="s1")
    ids_a, ids_b = chat(a), chat(b)
    assert ids_a == ids_b
    assert list(ids_a) == [node_id_for(str(a.id), n) for n in range(4)]
    assert ids_a[0] == str(uuid.uuid5(forest_uuid("s1"), "node:0"))
    assert set(chat(Forest(session_id="other"))).isdisjoint(ids_a)


@pytest.mark.parametrize("spelling", [str, lambda u: str(u).upper(), lambda u: u.hex,
                                      lambda u: f"{{{u}}}", lambda u: u.urn])
def test_node_ids_are_the_uuid5_the_stored_trees_hold(spelling: Callable[[uuid.UUID], str]
                                                      ) -> None:
    """A node id is ``uuid5(forest id, "node:<n>")``: the ids trees stored before keep
    meaning the same nodes, whatever spelling of the forest id is given."""
    forest_id = uuid.UUID("6f1c2b1e-8d4a-4e3b-9a7c-2d5e8f9a0b1c")
    for n in (0, 1, 9, 10, 255, 1_000_003):
        assert node_id_for(spelling(forest_id), n) == str(uuid.uuid5(forest_id, f"node:{n}"))


def test_deleted_nodes_numbers_are_not_reused(forest: Forest) -> None:
    _root, _user, reply, bye = chat(forest)
    forest.delete(bye)
    again = forest.append(reply, "user", T("bye again"))
    assert again == node_id_for(str(forest.id), 4)


# --- roots ---------------------------------------------------------------------------------


def test_root_for_creates_then_reuses_by_system_text(forest: Forest) -> None:
    root = forest.root_for("You are terse.")
    assert forest.node(root) == Node(root, None, "system", (TextBlock("You are terse."),))
    assert forest.root_for("You are terse.") == root
    assert forest.root_for("  You are terse.\n") == root  # compared trimmed
    other = forest.root_for("You are verbose.")
    assert other != root
    assert [r.id for r in forest.roots()] == [root, other]
    assert pending(forest) == ["Started", "RootCreated", "RootCreated"]


def test_a_root_without_system_prompt_holds_no_content(forest: Forest) -> None:
    root = forest.root_for("")
    assert forest.node(root).content == ()
    assert forest.root_for("   ") == root


# --- append and prefix matching -----------------------------------------------------------


def test_append_adds_a_child_in_order(forest: Forest) -> None:
    root = forest.root_for("sys")
    a = forest.append(root, "user", T("a"))
    b = forest.append(root, "user", T("b"))
    assert forest.node(a).parent == root
    assert forest.node(root).children == (a, b)
    assert texts(forest.children(root)) == ["a", "b"]
    assert pending(forest)[-2:] == ["Appended", "Appended"]


def test_an_identical_message_is_reused_without_an_event(forest: Forest) -> None:
    root, user, reply, _bye = chat(forest)
    before = len(forest.pending_events)
    assert forest.append(root, "user", T("hello world")) == user
    assert forest.append(user, "assistant", T("hi there")) == reply
    assert len(forest.pending_events) == before


def test_prefix_matching_compares_text_trimmed(forest: Forest) -> None:
    root, user, _, _ = chat(forest)
    assert forest.append(root, "user", T("  hello world\n")) == user


def test_prefix_matching_drops_empty_text_blocks(forest: Forest) -> None:
    root, user, _, _ = chat(forest)
    assert forest.append(root, "user", [TextBlock(""), TextBlock("hello world"),
                                        TextBlock("  \n")]) == user


def test_prefix_matching_compares_tool_inputs_regardless_of_key_order(forest: Forest) -> None:
    root = forest.root_for("sys")
    user = forest.append(root, "user", T("read it"))
    call = forest.append(user, "assistant", [
        TextBlock("Reading."),
        ToolUseBlock("tu_1", "read_file", {"path": "a.py", "range": {"from": 1, "to": 9}}),
    ])
    same = forest.append(user, "assistant", [
        TextBlock("Reading. "),
        ToolUseBlock("tu_1", "read_file", {"range": {"to": 9, "from": 1}, "path": "a.py"}),
    ])
    assert same == call
    # the values still count: 1 is not true, another path is another call
    flag = forest.append(user, "assistant", [
        TextBlock("Reading."),
        ToolUseBlock("tu_1", "read_file", {"path": "a.py", "range": {"from": True, "to": 9}}),
    ])
    assert flag != call
    assert len(forest.children(user)) == 2


def test_prefix_matching_tells_roles_and_block_kinds_apart(forest: Forest) -> None:
    root = forest.root_for("sys")
    user = forest.append(root, "user", T("same"))
    assert forest.append(root, "assistant", T("same")) != user
    result = forest.append(root, "user", [ToolResultBlock("tu_1", "same")])
    assert result != user
    assert forest.append(root, "user", [ToolResultBlock("tu_1", " same ")]) == result
    assert forest.append(root, "user", [ToolResultBlock("tu_1", "same", True)]) != result


def test_the_stored_message_has_no_empty_blocks(forest: Forest) -> None:
    root = forest.root_for("sys")
    node = forest.append(root, "user", [TextBlock(""), TextBlock(" hi ")])
    assert forest.node(node).content == (TextBlock(" hi "),)


def test_an_empty_message_adds_nothing_and_stays_at_the_parent(forest: Forest) -> None:
    _root, user, _, _ = chat(forest)
    before = len(forest.pending_events)
    assert forest.append(user, "user", [TextBlock("  ")]) == user
    assert forest.append(user, "assistant", []) == user
    assert len(forest.pending_events) == before


def test_a_tool_use_only_assistant_message_is_kept(forest: Forest) -> None:
    root = forest.root_for("sys")
    user = forest.append(root, "user", T("go"))
    call = forest.append(user, "assistant", [ToolUseBlock("tu_1", "shell", {"cmd": "ls"})])
    assert call != user
    assert forest.node(call).content == (ToolUseBlock("tu_1", "shell", {"cmd": "ls"}),)


def test_append_refusals(forest: Forest) -> None:
    root = forest.root_for("sys")
    refused(forest, NodeNotFoundError, "no node 'nope'",
            lambda: forest.append("nope", "user", T("x")))
    refused(forest, InvalidRoleError, "not 'system'",
            lambda: forest.append(root, "system", T("x")))
    refused(forest, InvalidRoleError, "not 'tool'",
            lambda: forest.append(root, "tool", T("x")))
    refused(forest, InvalidContentError, "user message cannot hold a tool_use",
            lambda: forest.append(root, "user", [ToolUseBlock("t", "shell", {})]))
    refused(forest, InvalidContentError, "assistant message cannot hold a tool_result",
            lambda: forest.append(root, "assistant", [ToolResultBlock("t", "out")]))
    refused(forest, InvalidContentError, "list of content blocks",
            lambda: forest.append(root, "user", "plain text"))  # type: ignore[arg-type]


# --- split ---------------------------------------------------------------------------------


def test_split_positions_at_the_boundaries(forest: Forest) -> None:
    _root, _user, reply, bye = chat(forest)  # "hi there": 8 characters
    refused(forest, SplitPositionError, "between 1 and 7", lambda: forest.split(reply, 0))
    refused(forest, SplitPositionError, "between 1 and 7", lambda: forest.split(reply, 8))
    refused(forest, SplitPositionError, "between 1 and 7", lambda: forest.split(reply, -1))
    refused(forest, SplitPositionError, "is an int", lambda: forest.split(reply, True))

    left = forest.split(reply, 1)
    assert (forest.node(left).text, forest.node(reply).text) == ("h", "i there")
    last = forest.split(reply, len("i there") - 1)
    assert (forest.node(last).text, forest.node(reply).text) == ("i ther", "e")
    assert texts(forest.path(bye)) == ["be brief", "hello world", "h", "i ther", "e", "bye"]


def test_split_puts_the_left_part_above_the_right_part_and_its_children(
    forest: Forest,
) -> None:
    _root, user, reply, bye = chat(forest)
    other = forest.append(user, "assistant", T("another reply"))
    left = forest.split(reply, 3)

    assert forest.node(left) == Node(left, user, "assistant", (TextBlock("hi "),), (reply,))
    assert forest.node(reply) == Node(reply, left, "assistant", (TextBlock("there"),), (bye,),
                                      continues=True)
    assert forest.node(user).children == (left, other)  # in the split node's place
    assert pending(forest)[-1] == "Split"


def test_split_keeps_block_boundaries(forest: Forest) -> None:
    root = forest.root_for("sys")
    node = forest.append(root, "user", [TextBlock("abc"), TextBlock("def")])
    left = forest.split(node, 3)  # on the boundary
    assert forest.node(left).content == (TextBlock("abc"),)
    assert forest.node(node).content == (TextBlock("def"),)
    inner = forest.split(node, 1)
    assert (forest.node(inner).text, forest.node(node).text) == ("d", "ef")


def test_split_refusals(forest: Forest) -> None:
    root, user, _, _ = chat(forest)
    call = forest.append(user, "assistant", [TextBlock("ok"), ToolUseBlock("t", "ls", {})])
    result = forest.append(call, "user", [ToolResultBlock("t", "a.py b.py")])
    spaced = forest.append(root, "user", T("   ab"))
    refused(forest, RootOperationError, "cannot split root", lambda: forest.split(root, 2))
    refused(forest, NotTextError, "tool_use", lambda: forest.split(call, 1))
    refused(forest, NotTextError, "tool result", lambda: forest.split(result, 1))
    refused(forest, NodeNotFoundError, "no node", lambda: forest.split("nope", 1))
    refused(forest, SplitPositionError, "only whitespace", lambda: forest.split(spaced, 2))
    assert forest.node(forest.split(spaced, 4)).text == "   a"


def test_split_keeps_bookmarks_on_the_node(forest: Forest) -> None:
    _, _, reply, _ = chat(forest)
    forest.bookmark("here", reply)
    forest.split(reply, 2)
    assert forest.bookmarks == {"here": reply}


# --- edit ----------------------------------------------------------------------------------


def test_edit_without_children_changes_in_place(forest: Forest) -> None:
    _root, _user, reply, bye = chat(forest)
    assert forest.edit(bye, "see you") == bye
    assert forest.node(bye).content == (TextBlock("see you"),)
    assert forest.node(reply).children == (bye,)
    assert pending(forest)[-1] == "Edited"
    before = len(forest.pending_events)
    assert forest.edit(bye, "see you") == bye  # the same text: nothing to record
    assert len(forest.pending_events) == before


def test_edit_with_children_branches_at_the_common_prefix(forest: Forest) -> None:
    root, user, reply, bye = chat(forest)
    result = forest.edit(user, "hello there")

    left = forest.node(user).parent
    assert left is not None and left != root
    assert forest.node(left).text == "hello "
    assert forest.node(user).text == "world"
    assert forest.node(user).children == (reply,)  # the old branch is whole
    assert forest.node(result) == Node(result, left, "user", (TextBlock("there"),),
                                       continues=True)
    assert forest.node(left).children == (user, result)
    assert texts(forest.path(result)) == ["be brief", "hello ", "there"]
    assert texts(forest.path(bye)) == ["be brief", "hello ", "world", "hi there", "bye"]
    assert pending(forest)[-1] == "Edited"


def test_edit_with_children_and_nothing_in_common_makes_a_sibling(forest: Forest) -> None:
    root, user, _reply, _bye = chat(forest)
    result = forest.edit(user, "goodbye")
    assert forest.node(result) == Node(result, root, "user", (TextBlock("goodbye"),))
    assert forest.node(root).children == (user, result)
    assert forest.node(user).text == "hello world"
    assert forest.siblings(result) == [forest.node(user)]


def test_edit_with_children_reuses_an_identical_sibling(forest: Forest) -> None:
    root, user, _, _ = chat(forest)
    other = forest.append(root, "user", T("goodbye"))
    before = len(forest.pending_events)
    assert forest.edit(user, "goodbye") == other
    assert len(forest.pending_events) == before


def test_edit_extending_a_node_with_children_adds_a_child(forest: Forest) -> None:
    _root, user, reply, _bye = chat(forest)
    result = forest.edit(user, "hello world, again")
    assert forest.node(result) == Node(result, user, "user", (TextBlock(", again"),),
                                       continues=True)
    assert forest.node(user).children == (reply, result)
    assert forest.node(user).text == "hello world"


def test_edit_to_a_prefix_of_a_node_with_children_ends_at_the_left_part(
    forest: Forest,
) -> None:
    _root, user, _reply, _bye = chat(forest)
    result = forest.edit(user, "hello")
    assert forest.node(result).text == "hello"
    assert forest.node(result).children == (user,)
    assert forest.node(user).text == " world"
    assert forest.state.created == 5  # only the left part was added


def test_edit_to_the_same_text_of_a_node_with_children_changes_nothing(forest: Forest) -> None:
    _, user, _, _ = chat(forest)
    before = len(forest.pending_events)
    assert forest.edit(user, "hello world") == user
    assert forest.edit(user, "hello world  ") == user
    assert len(forest.pending_events) == before


def test_edit_with_only_whitespace_in_common_makes_a_sibling(forest: Forest) -> None:
    root = forest.root_for("sys")
    node = forest.append(root, "user", T(" abc"))
    child = forest.append(node, "assistant", T("ok"))
    result = forest.edit(node, " xyz")
    assert forest.node(result) == Node(result, root, "user", (TextBlock(" xyz"),))
    assert forest.node(node) == Node(node, root, "user", (TextBlock(" abc"),), (child,))


def test_edit_extending_a_text_with_trailing_whitespace_adds_a_child(forest: Forest) -> None:
    root = forest.root_for("sys")
    node = forest.append(root, "user", T("abc "))
    child = forest.append(node, "assistant", T("ok"))
    result = forest.edit(node, "abcd")
    assert forest.node(result) == Node(result, node, "user", (TextBlock("d"),), continues=True)
    assert forest.node(node).children == (child, result)


def test_edit_takes_text_blocks(forest: Forest) -> None:
    _, _, _, bye = chat(forest)
    forest.edit(bye, [TextBlock("see"), TextBlock(""), TextBlock(" you")])
    assert forest.node(bye).content == (TextBlock("see"), TextBlock(" you"))


def test_edit_refusals(forest: Forest) -> None:
    root, user, _reply, bye = chat(forest)
    call = forest.append(bye, "assistant", [TextBlock("ok"), ToolUseBlock("t", "ls", {})])
    result = forest.append(call, "user", [ToolResultBlock("t", "a.py")])
    refused(forest, EmptyEditError, "empty", lambda: forest.edit(bye, ""))
    refused(forest, EmptyEditError, "empty", lambda: forest.edit(bye, "  \n"))
    refused(forest, EmptyEditError, "empty", lambda: forest.edit(user, []))
    refused(forest, ToolUseEditError, "tool_use", lambda: forest.edit(call, "ok"))
    refused(forest, ToolUseEditError, "tool_use",
            lambda: forest.edit(bye, [ToolUseBlock("t2", "ls", {})]))
    refused(forest, NotTextError, "tool result", lambda: forest.edit(result, "x"))
    refused(forest, NotTextError, "tool result",
            lambda: forest.edit(bye, [ToolResultBlock("t", "x")]))
    refused(forest, RootOperationError, "cannot edit root", lambda: forest.edit(root, "x"))
    refused(forest, NodeNotFoundError, "no node", lambda: forest.edit("nope", "x"))


def test_an_in_place_edit_of_whitespace_only_records_nothing(forest: Forest) -> None:
    _, _, _, bye = chat(forest)
    before = len(forest.pending_events)
    assert forest.edit(bye, "bye ") == bye
    assert forest.edit(bye, [TextBlock(" bye"), TextBlock("  ")]) == bye
    assert len(forest.pending_events) == before
    assert forest.node(bye).content == (TextBlock("bye"),)


def test_an_in_place_edit_never_makes_two_identical_siblings(forest: Forest) -> None:
    _, _, reply, bye = chat(forest)
    other = forest.append(reply, "user", T("see you"))
    refused(forest, DuplicateMessageError,
            f"an identical message is already there: {other}",
            lambda: forest.edit(bye, " see you "))
    assert forest.edit(bye, "see you soon") == bye  # a different text is fine


# --- continuations -------------------------------------------------------------------------


def test_a_split_marks_the_right_part_as_a_continuation(forest: Forest) -> None:
    _, _, reply, _ = chat(forest)  # "hi there"
    left = forest.split(reply, 3)
    assert (forest.node(left).continues, forest.node(reply).continues) == (False, True)
    # splitting a continuation again: the left part keeps the flag it had
    inner = forest.split(reply, 2)
    assert [(n.text, n.continues) for n in forest.path(reply)[-3:]] == [
        ("hi ", False), ("th", True), ("ere", True)]
    assert forest.node(inner).text == "th"


def test_an_edit_of_a_continuation_with_nothing_in_common_keeps_the_flag(
    forest: Forest,
) -> None:
    root = forest.root_for("sys")
    question = forest.append(root, "user", T("what colour is the sky"))
    forest.append(question, "assistant", T("blue"))
    grass = forest.edit(question, "what colour is the grass")
    sky = question  # the right part, a continuation, keeps the id and the reply
    moon = forest.edit(sky, "moon")
    left = forest.node(sky).parent
    assert forest.node(moon) == Node(moon, left, "user", (TextBlock("moon"),), continues=True)
    assert forest.children(left) == [forest.node(sky), forest.node(grass), forest.node(moon)]
    assert forest.edit(sky, "grass") == grass  # an identical continuation is reused


def test_prefix_matching_reuses_only_a_child_with_the_same_flag(forest: Forest) -> None:
    root = forest.root_for("sys")
    node = forest.append(root, "user", T("what colour is the sky"))
    forest.append(node, "assistant", T("blue"))
    left = forest.split(node, 19)
    before = len(forest.pending_events)
    assert forest.append(left, "user", T("sky"), continues=True) == node
    assert len(forest.pending_events) == before
    plain = forest.append(left, "user", T("sky"))  # a message of its own: another node
    assert plain != node and not forest.node(plain).continues
    assert forest.append(left, "user", T("sky")) == plain


def test_a_continuation_needs_text_of_the_same_role_to_go_on_from(forest: Forest) -> None:
    root, user, reply, _ = chat(forest)
    call = forest.append(user, "assistant", [ToolUseBlock("t", "ls", {})])
    refused(forest, ContinuationError, "cannot be continued",
            lambda: forest.append(root, "user", T("x"), continues=True))
    refused(forest, ContinuationError, "cannot be continued",
            lambda: forest.append(reply, "user", T("x"), continues=True))
    refused(forest, ContinuationError, "cannot be continued",
            lambda: forest.append(user, "assistant", T("x"), continues=True))
    refused(forest, ContinuationError, "cannot be continued",
            lambda: forest.append(call, "assistant", T("x"), continues=True))
    refused(forest, ContinuationError, "cannot be continued",
            lambda: forest.append(reply, "assistant", [ToolUseBlock("u", "ls", {})],
                                  continues=True))
    assert forest.node(forest.append(reply, "assistant", T("!"), continues=True)).continues


def test_old_changes_decode_with_the_flags_defaults() -> None:
    old_add = b'{"op":"add_node","id":"n","parent":null,"role":"system","content":[]}'
    old_set = b'{"op":"set_content","id":"n","content":[{"type":"text","text":"x"}]}'
    add = msgspec.json.decode(old_add, type=Change)
    assert isinstance(add, AddNode) and add.continues is False and add.index == -1
    changed = msgspec.json.decode(old_set, type=Change)
    assert isinstance(changed, SetContent) and changed.continues is None
    state = ForestState("f")
    state.apply([AddNode("r", None, "system", []),
                 AddNode("u", "r", "user", T("x"), continues=False),
                 SetContent("u", T("y"), continues=True), SetContent("u", T("z"))])
    assert state.node("u").continues  # None leaves the flag as it was


# --- bookmarks -----------------------------------------------------------------------------


def test_bookmarks_point_move_and_go(forest: Forest) -> None:
    _root, user, reply, bye = chat(forest)
    forest.bookmark("start", user)
    forest.bookmark("end", bye)
    assert forest.bookmarks == {"start": user, "end": bye}
    forest.bookmark("end", reply)
    assert forest.bookmarks["end"] == reply
    before = len(forest.pending_events)
    forest.bookmark("end", reply)  # already there
    assert len(forest.pending_events) == before
    forest.remove_bookmark("end")
    assert forest.bookmarks == {"start": user}
    assert pending(forest)[-1] == "BookmarkRemoved"


def test_bookmarks_move_with_a_branching_edit(forest: Forest) -> None:
    _root, user, reply, _bye = chat(forest)
    forest.bookmark("q", user)
    forest.bookmark("a", reply)
    result = forest.edit(user, "hello there")
    assert forest.bookmarks == {"q": result, "a": reply}
    sibling = forest.edit(result, "bonjour")  # no children: in place, the mark stays
    assert sibling == result
    assert forest.bookmarks["q"] == result


def test_bookmarks_move_with_an_edit_to_a_sibling(forest: Forest) -> None:
    _, user, _, _ = chat(forest)
    forest.bookmark("q", user)
    result = forest.edit(user, "goodbye")
    assert forest.bookmarks == {"q": result}


def test_bookmarks_go_with_a_cascade_delete(forest: Forest) -> None:
    root, user, reply, bye = chat(forest)
    forest.bookmark("q", user)
    forest.bookmark("end", bye)
    forest.bookmark("top", root)
    forest.delete(reply)
    assert forest.bookmarks == {"q": user, "top": root}


def test_bookmarks_on_the_deleted_node_only_go_with_a_reparent_delete(forest: Forest) -> None:
    _, _, reply, bye = chat(forest)
    forest.bookmark("a", reply)
    forest.bookmark("end", bye)
    forest.delete(reply, mode="reparent")
    assert forest.bookmarks == {"end": bye}


def test_bookmark_refusals(forest: Forest) -> None:
    _, user, _, _ = chat(forest)
    refused(forest, BookmarkError, "needs a name", lambda: forest.bookmark("", user))
    refused(forest, BookmarkError, "needs a name", lambda: forest.bookmark("  ", user))
    refused(forest, NodeNotFoundError, "no node", lambda: forest.bookmark("x", "nope"))
    refused(forest, BookmarkError, "no bookmark named 'x'", lambda: forest.remove_bookmark("x"))


# --- delete --------------------------------------------------------------------------------


def test_delete_cascade_removes_the_subtree(forest: Forest) -> None:
    root, user, reply, bye = chat(forest)
    other = forest.append(user, "assistant", T("other"))
    deeper = forest.append(bye, "assistant", T("deeper"))
    assert forest.delete(reply) == user  # cascade is the default
    assert forest.node(user).children == (other,)
    for gone in (reply, bye, deeper):
        with pytest.raises(NodeNotFoundError):
            forest.node(gone)
    assert set(forest.state.nodes) == {root, user, other}
    event: Any = forest.pending_events[-1]
    assert type(event).__name__ == "Deleted"
    assert [c.id for c in event.changes if isinstance(c, RemoveNode)] == [deeper, bye, reply]


def test_delete_reparent_moves_the_children_to_the_grandparent(forest: Forest) -> None:
    _root, user, reply, bye = chat(forest)
    before = forest.append(user, "assistant", T("before"))
    after = forest.append(user, "assistant", T("after"))
    bye2 = forest.append(reply, "user", T("bye 2"))
    assert forest.node(user).children == (reply, before, after)
    assert forest.delete(reply, mode="reparent") == user
    assert forest.node(user).children == (bye, bye2, before, after)
    assert forest.node(bye).parent == user and forest.node(bye2).parent == user
    with pytest.raises(NodeNotFoundError):
        forest.node(reply)
    assert texts(forest.path(bye)) == ["be brief", "hello world", "bye"]


def test_a_reparent_delete_of_a_split_s_first_part_leaves_the_rest_a_message_of_its_own(
        forest: Forest) -> None:
    _root, _user, reply, bye = chat(forest)
    first = forest.split(bye, 2)  # "by" + "e": bye continues first
    assert forest.node(bye).continues
    forest.delete(first, mode="reparent")
    moved = forest.node(bye)
    assert moved.parent == reply and not moved.continues


def test_delete_refusals(forest: Forest) -> None:
    root, user, _, _ = chat(forest)
    refused(forest, RootOperationError, "cannot delete root", lambda: forest.delete(root))
    refused(forest, RootOperationError, "cannot delete root",
            lambda: forest.delete(root, mode="reparent"))
    refused(forest, DeleteModeError, "unknown delete mode 'orphan'",
            lambda: forest.delete(user, mode="orphan"))
    refused(forest, NodeNotFoundError, "no node", lambda: forest.delete("nope"))


# --- navigation ----------------------------------------------------------------------------


def test_navigation(forest: Forest) -> None:
    root, user, reply, bye = chat(forest)
    alt = forest.append(user, "assistant", T("hey"))
    alt2 = forest.append(user, "assistant", T("yo"))
    assert [n.id for n in forest.path(bye)] == [root, user, reply, bye]
    assert [n.id for n in forest.path(root)] == [root]
    assert [n.id for n in forest.children(user)] == [reply, alt, alt2]
    assert [n.id for n in forest.siblings(alt)] == [reply, alt2]
    assert forest.siblings(bye) == []
    assert forest.siblings(root) == []
    for query in (forest.path, forest.children, forest.siblings, forest.node):
        with pytest.raises(NodeNotFoundError):
            query("nope")


def test_path_refuses_a_broken_chain() -> None:
    state = ForestState("f", nodes={
        "r": Node("r", None, "system", ()),
        "a": Node("a", "missing", "user", (TextBlock("a"),)),
        "x": Node("x", "y", "user", (TextBlock("x"),)),
        "y": Node("y", "x", "user", (TextBlock("y"),)),
    }, roots=["r"])
    with pytest.raises(BrokenPathError, match="'missing' is missing"):
        state.path("a")
    with pytest.raises(BrokenPathError, match="loop"):
        state.path("x")


def test_queries_hand_out_frozen_nodes(forest: Forest) -> None:
    _, user, _, _ = chat(forest)
    node = forest.node(user)
    with pytest.raises(AttributeError):
        node.children = ()  # type: ignore[misc]


# --- the pure core -------------------------------------------------------------------------


def test_plans_do_not_touch_the_state() -> None:
    state = ForestState(str(forest_uuid("s1")))
    root_id, changes = state.plan_root("sys")
    assert changes == [AddNode(root_id, None, "system", [TextBlock("sys")])]
    assert state.nodes == {} and state.created == 0
    state.apply(changes)
    user_id, changes = state.plan_append(root_id, "user", T("hello world"))
    state.apply(changes)
    _reply_id, changes = state.plan_append(user_id, "assistant", T("hi"))
    state.apply(changes)

    snapshot = copy_state(state)
    left, split = state.plan_split(user_id, 6)
    assert split == [
        AddNode(left, root_id, "user", [TextBlock("hello ")], 0),
        MoveNode(user_id, left),
        SetContent(user_id, [TextBlock("world")], continues=True),
    ]
    state.plan_edit(user_id, "hello there")
    state.plan_delete(user_id, "reparent")
    state.plan_bookmark("b", user_id)
    assert state == snapshot


def test_edit_plan_records_the_split_the_new_node_and_the_moved_bookmarks() -> None:
    state = ForestState(str(forest_uuid("s1")))
    state.apply([
        AddNode("r", None, "system", []),
        AddNode("u", "r", "user", T("hello world")),
        AddNode("a", "u", "assistant", T("hi")),
        SetBookmark("mark", "u"),
    ])
    result, changes = state.plan_edit("u", "hello there")
    left = node_id_for(state.forest_id, 3)
    assert result == node_id_for(state.forest_id, 4)
    assert changes == [
        AddNode(left, "r", "user", [TextBlock("hello ")], 0),
        MoveNode("u", left),
        SetContent("u", [TextBlock("world")], continues=True),
        AddNode(result, left, "user", [TextBlock("there")], continues=True),
        SetBookmark("mark", result),
    ]
    _, deleted = state.plan_delete("u")
    assert deleted == [DropBookmark("mark"), RemoveNode("a"), RemoveNode("u")]


def test_apply_refuses_inconsistent_changes() -> None:
    state = ForestState("f")
    state.apply([AddNode("r", None, "system", []), AddNode("u", "r", "user", T("x"))])
    with pytest.raises(ForestError, match="exists already"):
        state.apply([AddNode("u", "r", "user", T("x"))])
    with pytest.raises(ForestError, match="still has children"):
        state.apply([RemoveNode("r")])


def test_message_key() -> None:
    assert message_key("user", [TextBlock(" a "), TextBlock("")]) == message_key(
        "user", [TextBlock("a")])
    assert message_key("user", T("a")) != message_key("assistant", T("a"))
    assert message_key("assistant", [ToolUseBlock("t", "n", {"a": 1, "b": [{"x": 1, "y": 2}]})]) \
        == message_key("assistant", [ToolUseBlock("t", "n", {"b": [{"y": 2, "x": 1}], "a": 1})])


# --- through the store ---------------------------------------------------------------------




def busy_forest(session_id: str = "s1") -> Forest:
    """A forest that has recorded every kind of Forest event."""
    forest = Forest(session_id=session_id)
    root, user, reply, bye = chat(forest)
    forest.root_for("another prompt")
    call = forest.append(bye, "assistant", [
        TextBlock("Listing."), ToolUseBlock("tu_1", "shell", {"cmd": "ls", "opts": {"a": 1}})])
    forest.append(call, "user", [ToolResultBlock("tu_1", "a.py\nb.py", False)])
    forest.bookmark("question", user)
    forest.bookmark("answer", reply)
    forest.split(reply, 3)
    forest.edit(user, "hello there")
    forest.edit(bye, "goodbye")
    forest.delete(call, mode="reparent")
    forest.bookmark("gone", bye)
    forest.delete(bye)
    forest.bookmark("tmp", root)
    forest.remove_bookmark("tmp")
    return forest


FOREST_EVENTS = {"Started", "RootCreated", "Appended", "Split", "Edited", "Deleted",
                 "Bookmarked", "BookmarkRemoved"}


def test_the_busy_forest_records_every_forest_event() -> None:
    declared = {
        name for name, value in vars(Forest).items()
        if isinstance(value, type) and issubclass(value, Forest.Event)
        and name not in ("Event", "Created", "Snapshot")
    }
    assert declared == FOREST_EVENTS
    assert set(pending(busy_forest())) == FOREST_EVENTS


def test_forest_reloaded_from_store_equals_original(app: TetherApplication) -> None:
    original = busy_forest()
    version = original.version
    app.save(original)

    loaded = app.load(forest_uuid("s1"), Forest)

    assert loaded is not None
    assert loaded == original
    assert loaded.version == version
    assert loaded.state == original.state
    assert loaded.bookmarks == original.bookmarks
    assert texts(loaded.path(loaded.bookmarks["question"])) == ["be brief", "hello ", "there"]
    # the continuation flags come back: the split's right part and the edit's new rest
    assert [n.continues for n in loaded.path(loaded.bookmarks["question"])] == [
        False, False, True]
    answer = loaded.path(loaded.bookmarks["answer"])
    assert [(n.text, n.continues) for n in answer[1:]] == [
        ("hello ", False), ("world", True), ("hi ", False), ("there", True)]
    assert app.load(forest_uuid("nope"), Forest) is None


def test_forest_events_stored_before_the_continuation_flag_still_replay(
    app: TetherApplication,
) -> None:
    original = busy_forest()
    app.save(original)

    def without_flags(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: without_flags(v) for k, v in value.items() if k != "continues"}
        if isinstance(value, list):
            return [without_flags(v) for v in value]
        return value

    replayed: Any = None
    for stored in app.recorder.select_events(forest_uuid("s1")):
        old = StoredEvent(stored.originator_id, stored.originator_version, stored.topic,
                          json.dumps(without_flags(json.loads(stored.state))).encode())
        assert b"continues" not in old.state
        replayed = app.mapper.to_domain_event(old).mutate(replayed)

    assert isinstance(replayed, Forest)
    assert replayed.version == original.version
    assert replayed.state.roots == original.state.roots
    for node_id, node in original.state.nodes.items():  # the same tree, with no flags set
        assert replayed.state.nodes[node_id] == msgspec.structs.replace(node, continues=False)


def test_forest_events_come_back_typed(app: TetherApplication) -> None:
    original = busy_forest()
    app.save(original)

    events: list[Any] = list(app.events.get(forest_uuid("s1")))

    assert [e.originator_version for e in events] == list(range(1, original.version + 1))
    appended = [e for e in events if type(e).__name__ == "Appended"]
    tool_call = appended[3].changes[0]
    assert isinstance(tool_call, AddNode)
    assert tool_call.content == [TextBlock("Listing."), ToolUseBlock(
        "tu_1", "shell", {"cmd": "ls", "opts": {"a": 1}})]
    assert isinstance(appended[4].changes[0].content[0], ToolResultBlock)
    assert aggregate_name(app.recorder.select_events(forest_uuid("s1"))[2].topic) == (
        "forest", "Appended")
    assert app.session_id_of(events[-1]) == "s1"


def test_stored_forest_state_is_json(app: TetherApplication) -> None:
    app.save(busy_forest())
    stored = app.recorder.select_events(forest_uuid("s1"))
    split = next(json.loads(s.state) for s in stored if s.topic.endswith(".Split"))
    assert split["position"] == 3
    assert [c["op"] for c in split["changes"]] == ["add_node", "move_node", "set_content"]
    assert split["changes"][0]["content"] == [{"type": "text", "text": "hi "}]


def test_a_reloaded_forest_carries_on(app: TetherApplication) -> None:
    app.save(busy_forest())
    loaded = app.load(forest_uuid("s1"), Forest)
    assert loaded is not None
    root = loaded.root_for("be brief")
    new = loaded.append(root, "user", T("a new question"))
    assert new == node_id_for(str(loaded.id), loaded.state.created - 1)
    app.save(loaded)

    again = app.load(forest_uuid("s1"), Forest)
    assert again == loaded
    assert again is not None and again.node(new).text == "a new question"
    earlier = app.load(forest_uuid("s1"), Forest, version=5)
    assert earlier is not None and len(earlier.state.nodes) == 4
