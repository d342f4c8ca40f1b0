"""A session's history mirrored into its conversation tree (events.conversation): only
what is complete and new, rewritten histories sharing their path, the cursor found or
placed on a chosen node."""

from __future__ import annotations

import pytest

from tests.turns import CALL, CALLS, RESULT, assistant, user
from tether.actors.conversation import history_at
from tether.events.conversation import Conversation, Turn, complete_messages, locate
from tether.events.forest import Forest, message_key
from tether.events.messages import TextBlock, ToolResultBlock


def test_sync_appends_only_what_is_new_and_reports_it() -> None:
    forest = Forest(session_id="s1")
    mirror = Conversation(tree=forest.state)
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
    mirror = Conversation(tree=forest.state)
    mirror.sync("prompt", [user("hi"), assistant("hello"), user("one")])
    first_cursor = mirror.cursor
    # A history rewritten (as a compaction makes) with a different last message.
    mirror.rewritten()
    mirror.sync("prompt", [user("hi"), assistant("hello"), user("two")])
    assert mirror.cursor != first_cursor
    hello = next(n for n in forest.state.nodes.values() if n.text == "hello")
    assert [c.text for c in forest.children(hello.id)] == ["one", "two"]
    # Another system prompt is another root.
    mirror.sync("other prompt", [user("hi")])
    assert [r.text for r in forest.roots()] == ["prompt", "other prompt"]


def test_an_empty_history_makes_no_root() -> None:
    forest = Forest(session_id="s1")
    mirror = Conversation(tree=forest.state)
    history: list[Turn] = []
    assert mirror.sync("prompt", history) == [] and mirror.cursor == ""
    assert forest.roots() == []
    history.append(user("hi"))  # the same list, appended to later
    assert len(mirror.sync("prompt", history)) == 1
    assert len(forest.roots()) == 1


def test_locate_finds_the_cursor_without_changing_the_tree() -> None:
    forest = Forest(session_id="s1")
    mirror = Conversation(tree=forest.state)
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


def test_a_continuation_that_cannot_continue_is_mirrored_plain() -> None:
    forest = Forest(session_id="s1")
    mirror = Conversation(tree=forest.state)
    # after a tool result (or first of all) there is no text to go on from
    history = [Turn("user", [TextBlock("hi")], True), CALL, RESULT,
               Turn("user", [TextBlock("and")], True)]
    mirror.sync("prompt", history)
    assert [n.continues for n in forest.path(mirror.cursor)] == [False] * 5


def test_sync_leaves_out_an_unfinished_message_of_results_and_mirrors_it_later() -> None:
    forest = Forest(session_id="s1")
    mirror = Conversation(tree=forest.state)
    results = Turn("user", [ToolResultBlock("t1", "a.py", False)])
    history = [user("look"), CALLS, results]
    assert complete_messages(history) == 2
    placed = mirror.sync("prompt", history)
    assert [t for _, _, t in placed] == [user("look"), CALLS]
    call_node = mirror.cursor
    assert mirror.sync("prompt", history) == [] and mirror.cursor == call_node

    results.content.append(ToolResultBlock("t2", "text", False))  # the same message, whole
    assert complete_messages(history) == 3
    placed = mirror.sync("prompt", history)
    assert [(p, t) for _, p, t in placed] == [(call_node, results)]
    assert forest.node(mirror.cursor).content == tuple(results.content)
    history.append(assistant("done"))
    placed = mirror.sync("prompt", history)  # only the new message
    assert [t for _, _, t in placed] == [assistant("done")]
    assert len(forest.state.nodes) == 5  # root, look, calls, results, done: nothing twice
    assert history_at(forest.state, mirror.cursor) == history


def test_sync_without_a_system_prompt_makes_no_root() -> None:
    forest = Forest(session_id="s1")
    mirror = Conversation(tree=forest.state)
    history = [user("hi")]
    assert mirror.sync("", history) == [] and forest.roots() == []
    assert len(mirror.sync("prompt", history)) == 1
    # What syncs placed is gathered until it is taken (the session's core publishes it).
    assert [t for _, _, t in mirror.take_placed()] == [user("hi")]
    assert mirror.take_placed() == []


def test_stand_at_keeps_the_chosen_node_among_identical_siblings() -> None:
    forest = Forest(session_id="s1")
    root = forest.root_for("prompt")
    first = forest.append(root, "user", [TextBlock("hi")])
    forest.append(first, "assistant", [TextBlock("hello")])
    long = forest.append(root, "user", [TextBlock("hi there")])
    twin = forest.split(long, 3)  # "hi " beside "hi": the same message to prefix matching
    assert message_key("user", forest.node(twin).content) == message_key(
        "user", forest.node(first).content)

    history = history_at(forest.state, twin)
    mirror = Conversation(tree=forest.state)
    assert mirror.stand_at(twin, "prompt", history) == twin
    history.append(assistant("answer"))
    placed = mirror.sync("prompt", history)
    assert [p for _, p, _ in placed] == [twin]  # under the chosen node, not its twin
    assert [c.text for c in forest.children(twin)] == ["there", "answer"]
    # finding the node again by prefix matching would have picked the first twin
    assert locate(forest.state, "prompt", history[:1]) == first


def test_stand_at_refuses_a_history_that_is_not_the_path() -> None:
    forest = Forest(session_id="s1")
    mirror = Conversation(tree=forest.state)
    placed = mirror.sync("prompt", [user("hi"), assistant("hello")])
    with pytest.raises(ValueError, match="not the path"):
        mirror.stand_at(placed[1][0], "prompt", [user("hi")])
    with pytest.raises(ValueError, match="not the path"):
        mirror.stand_at(placed[1][0], "prompt", [user("hi"), assistant("bye")])


def test_stand_at_under_another_root_mirrors_under_the_prompts_root() -> None:
    forest = Forest(session_id="s1")
    mirror = Conversation(tree=forest.state)
    placed = mirror.sync("old prompt", [user("hi"), assistant("hello")])
    history = history_at(forest.state, placed[1][0])
    cursor = mirror.stand_at(placed[1][0], "new prompt", history)
    assert cursor != placed[1][0]
    assert [n.text for n in forest.path(cursor)] == ["new prompt", "hi", "hello"]
