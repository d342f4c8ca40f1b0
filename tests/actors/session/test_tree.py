"""The conversation tree decided on plain values: the history mirrored as it grows, and
the user's moves and edits (between turns only)."""

from __future__ import annotations

import copy
from typing import Any

from tests.actors.session.driver import SID, Core, Fed, generation_events
from tether.actors.model.prompt import WorkspaceTexts
from tether.actors.ports import ToolOutput
from tether.actors.session import Phase
from tether.actors.session.effects import CallModel, RestoreFiles
from tether.actors.session.inputs import Recovered, ToolFinished
from tether.actors.session.state import State
from tether.events.application import TetherApplication
from tether.events.forest import Forest, Node
from tether.events.messages import (
    BookmarkNode,
    Branched,
    BranchTo,
    DeleteNode,
    EditNode,
    ErrorReply,
    Generate,
    SplitNode,
    TextBlock,
    ToolUseBlock,
    TreeChanged,
    TreeQuery,
    TreeView,
    UndoFiles,
)
from tether.events.session import Session
from tether.events.stored_content import StoredContent
from tether.events.tree_records import StoredNodes, in_full


def two_turns() -> Core:
    core = Core()
    core.say("first question")
    core.answer("first answer")
    core.say("second question")
    core.answer("second answer")
    return core


def page(core: Core) -> TreeView:
    (view,) = core.feed(TreeQuery(session_id=SID)).sent(TreeView)
    return view


def node_of(core: Core, text: str) -> str:
    return next(n.node_id for n in page(core).nodes if n.text == text)


def test_the_tree_holds_every_message_and_the_cursor_the_last() -> None:
    core = two_turns()
    view = page(core)
    texts = [n.text for n in view.nodes if n.role != "system"]
    assert texts == ["first question", "first answer", "second question", "second answer"]
    assert view.cursor == node_of(core, "second answer")


def test_branching_makes_the_path_the_history_and_a_new_message_a_sibling() -> None:
    core = two_turns()
    fed = core.feed(BranchTo(session_id=SID, node_id=node_of(core, "first answer"),
                             user="alice"))
    (branched,) = fed.sent(Branched)
    assert branched.messages == 2 and fed.recorded(Session.MovedTo)
    core.say("another second question")
    core.answer("another answer")
    texts = [n.text for n in page(core).nodes]
    assert "second question" in texts and "another second question" in texts
    assert [t.content for t in core.session.history][-1] == [TextBlock("another answer")]


def test_an_edit_branches_to_the_edited_message_and_generate_answers_it() -> None:
    core = two_turns()
    fed = core.feed(EditNode(session_id=SID, node_id=node_of(core, "second question"),
                             text="second question, reworded", user="alice"))
    assert fed.sent(Branched)
    # The edit kept the common prefix as its own node: the history holds it in two parts,
    # which the request joins back into one message.
    (call,) = core.feed(Generate(session_id=SID)).of(CallModel)
    assert call.request.messages[-1]["content"][-1]["text"] == "second question, reworded"


def test_the_tree_is_not_changed_under_a_running_turn() -> None:
    core = two_turns()
    core.say("third")
    for command in (BranchTo(session_id=SID, node_id=node_of(core, "first answer")),
                    SplitNode(session_id=SID, node_id=node_of(core, "first answer"),
                              position=3),
                    UndoFiles(session_id=SID)):
        fed = core.feed(command)
        assert [e.error for e in fed.sent(ErrorReply)] == ["busy"], command
        assert fed.events == [] and not fed.of(RestoreFiles)
    assert core.phase is Phase.STREAMING


def test_a_node_on_the_session_s_path_is_never_deleted() -> None:
    core = two_turns()
    fed = core.feed(DeleteNode(session_id=SID, node_id=node_of(core, "first answer")))
    (refused,) = fed.sent(ErrorReply)
    assert "move it elsewhere first" in refused.reason and fed.events == []


def test_a_split_on_the_path_re_reads_the_history_in_more_nodes() -> None:
    core = two_turns()
    fed = core.feed(SplitNode(session_id=SID, node_id=node_of(core, "first answer"),
                              position=5, user="alice"))
    assert fed.sent(TreeChanged) and fed.recorded(Session.MovedTo)
    texts = [n.text for n in page(core).nodes]
    assert "first" in texts and "…answer" in texts  # the second part goes on from the first


def test_a_bookmark_names_a_node_wherever_one_is_asked_for() -> None:
    core = two_turns()
    core.feed(BookmarkNode(session_id=SID, name="start", node_id=node_of(core, "first answer")))
    fed = core.feed(BranchTo(session_id=SID, node_id="start"))
    assert fed.sent(Branched)[0].node_id == node_of(core, "first answer")


def test_undo_between_turns_asks_the_shell_to_restore_beneath_the_workspace() -> None:
    core = two_turns()
    (restore,) = core.feed(UndoFiles(session_id=SID, to_version=3)).of(RestoreFiles)
    assert (restore.to_version, restore.root) == (3, "/work/ws")


def looked_around() -> Core:
    """A turn whose model listed the folder (a message of calls, one of results), then
    answered; the gatekeeper allowed the call."""
    core = Core()
    listing = ToolUseBlock(id="c1", name="list_dir", input={"path": "."})
    core.say("look around")
    core.stream([TextBlock("Listing."), listing], stop="tool_use")
    core.barrier()
    core.verdict(listing)
    core.feed(ToolFinished(core.generation, "c1", "list_dir", ToolOutput(". is empty")))
    core.answer("The folder is empty.")
    return core


def sent(fed: Fed) -> list[dict[str, object]]:
    """The messages the decision's model call sends."""
    (call,) = fed.of(CallModel)
    return call.request.messages


def test_an_edited_answer_is_a_branch_of_its_own_and_branching_back_leaves_it_out() -> None:
    core = looked_around()
    core.say("second question")
    core.answer("Second answer.")
    question = next(n for n in page(core).nodes if n.text == "second question")
    # Editing a message that has an answer branches: the session moves to the edit.
    edited = core.feed(EditNode(session_id=SID, node_id=question.node_id[:8],
                                text="Edited question"))
    (moved,) = edited.sent(Branched)
    assert moved.node_id != question.node_id and moved.messages == 5
    assert core.session.history[-1].content == [TextBlock("Edited question")]
    assert edited.recorded(Session.MovedTo)

    generated = core.feed(Generate(session_id=SID))
    assert sent(generated)[-1]["content"][-1]["text"] == "Edited question"  # type: ignore[index]
    assert "second question" not in str(sent(generated))
    assert generated.recorded(Session.GenerationStarted)
    answered = core.answer("Answer to the edit.")
    events = generation_events(generated, answered)
    assert [type(e).__name__ for e in events] == [
        "ProviderRequest", "ProviderResponse", "AssistantNode", "GenerationDone"]
    assert {e.turn for e in events} == {2}  # two turns completed before this one
    assert events[2].parent_id == moved.node_id
    view = page(core)
    siblings = [n for n in view.nodes if n.parent_id == question.parent_id]
    assert [n.text for n in siblings] == ["second question", "Edited question"]
    assert view.cursor == events[2].node_id

    # Back to the old answer; the next message continues from there.
    old_answer = node_of(core, "Second answer.")
    (back,) = core.feed(BranchTo(session_id=SID, node_id=old_answer)).sent(Branched)
    assert back.node_id == old_answer and back.messages == 6
    went_on = core.say("after the branch")
    assert "second question" in str(sent(went_on))
    assert "Edited question" not in str(sent(went_on))
    core.answer("Continued on the old branch.")
    assert page(core).cursor != old_answer


def test_tree_refusals_say_why_and_change_nothing() -> None:
    core = looked_around()
    view = page(core)
    root, user, calls = view.nodes[0], view.nodes[1], view.nodes[2]
    for request, match in (
            (BranchTo(session_id=SID, node_id=root.node_id), "that is a root"),
            (BranchTo(session_id=SID, node_id=calls.node_id), "calls tools"),
            (BranchTo(session_id=SID, node_id="zz"), "at least 4 characters"),
            (BranchTo(session_id=SID, node_id="ffffffff"), "no node 'ffffffff'"),
            (EditNode(session_id=SID, node_id=calls.node_id, text="x"), "tool"),
            (EditNode(session_id=SID, node_id=user.node_id, text="   "), "empty"),
            (Generate(session_id=SID), "nothing to answer"),
            (Generate(session_id=SID, n=2), "cannot run with tools active")):
        fed = core.feed(request)
        (refused,) = fed.sent(ErrorReply)
        assert match in refused.reason, (request, refused.reason)
        assert fed.events == [] and not fed.of(CallModel), request
    assert page(core) == view  # nothing changed


def test_the_tree_comes_in_pages() -> None:
    core = looked_around()
    core.say("second")
    core.answer("Second answer.")
    whole = page(core)
    assert whole.total == len(whole.nodes) == 7 and whole.offset == 0
    (part,) = core.feed(TreeQuery(session_id=SID, offset=2, limit=3)).sent(TreeView)
    assert part.nodes == whole.nodes[2:5] and part.total == 7 and part.offset == 2
    assert part.version == whole.version and part.cursor == whole.cursor


def test_a_split_message_on_the_path_reaches_the_model_as_one() -> None:
    core = two_turns()
    second = node_of(core, "second question")
    assert core.feed(SplitNode(session_id=SID, node_id=second, position=7)).sent(TreeChanged)
    view = page(core)
    left = next(n for n in view.nodes if n.role == "user" and n.children
                and n.node_id != second and n.parent_id == node_of(core, "first answer"))
    assert next(n for n in view.nodes if n.node_id == second).parent_id == left.node_id
    assert view.cursor == node_of(core, "second answer")
    users = [m["content"] for m in sent(core.say("third")) if m["role"] == "user"]
    assert any("second question" in str(content) for content in users)
    assert not any("second \n\nquestion" in str(c) or "second\n\nquestion" in str(c)
                   for c in users)


# --- kept once: the tree is derived from the session's own events --------------------------


def replayed(core: Core) -> Session:
    """The session rebuilt from its recorded events alone, through the store's encoding."""
    mapper = TetherApplication(env={"PERSISTENCE_MODULE": "eventsourcing.popo"}).mapper
    session: Session | None = None
    for event in [*core.created, *core.log]:
        decoded = mapper.to_domain_event(mapper.to_stored_event(event))
        assert isinstance(decoded, Session.Event)
        session = decoded.mutate(session)
    assert session is not None
    return session


def test_every_tree_change_replays_from_the_session_s_events_alone() -> None:
    core = two_turns()
    first = node_of(core, "first question")
    core.feed(BookmarkNode(session_id=SID, node_id=first, name="start", user="alice"))
    core.feed(SplitNode(session_id=SID, node_id=node_of(core, "second question"),
                        position=7, user="alice"))
    core.feed(EditNode(session_id=SID, node_id=node_of(core, "first answer"),
                       text="first reply", user="alice"))
    core.feed(BranchTo(session_id=SID, node_id="start", user="alice"))
    assert core.feed(Generate(session_id=SID, n=2, tools=False)).of(CallModel)
    core.answer("one")
    core.answer("two")
    core.feed(DeleteNode(session_id=SID, node_id=node_of(core, "second answer"),
                         mode="cascade", user="alice"))
    live = core.session.conversation
    assert live.tree.bookmarks == {"start": first}
    assert [n.text for n in live.tree.children(first)] == ["first ", "one", "two"]
    assert "second answer" not in {n.text for n in live.tree.nodes.values()}
    assert {"edit", "split", "bookmark", "delete"} <= {
        e.operation for e in core.log if isinstance(e, Session.TreeAltered)}
    again = replayed(core).conversation
    assert again.tree == live.tree and again.cursor == live.cursor
    # No message's text is recorded twice: the tree's changes carry only what the
    # history does not (the edit's new text, the split's parts, a bookmark).
    assert not any(type(e).__module__.endswith("forest") for e in core.log)


def test_a_session_stored_with_a_forest_imports_it_once_and_goes_on_from_it() -> None:
    core = Core(keeps_tree=False)  # as stored before sessions kept their tree
    legacy = Forest(session_id=SID)
    root = legacy.root_for("an older prompt")
    asked = legacy.append(root, "user", [TextBlock("what colour is the sky")])
    edited = legacy.edit(asked, "what colour is the sea")
    legacy.bookmark("sea", edited)
    fed = core.feed(Recovered(stored_tree=legacy.state))
    (imported,) = fed.recorded(Session.TreeImported)
    assert imported.tree == legacy.state and core.session.keeps_tree
    core.say("hello")
    core.answer("hi")
    tree = core.session.conversation.tree
    assert tree.bookmarks == {"sea": edited}  # the edit made before stays
    # New nodes count on from where the Forest stopped: no id is minted twice.
    assert set(legacy.state.nodes) < set(tree.nodes)
    assert [n.text for n in tree.path(core.session.conversation.cursor)][1:] == ["hello", "hi"]
    again = replayed(core)  # the import carries the whole tree
    assert again.keeps_tree and again.conversation.tree == tree


def test_a_turn_under_a_new_system_prompt_replays_to_the_same_tree() -> None:
    """The user's message of a turn whose system prompt changed hangs under the new root,
    on replay too (where the mirroring waits until the tree is used)."""
    core = Core()
    core.say("first")
    core.answer("one")
    core.texts = WorkspaceTexts(identity="You are terse.")  # the next turn's prompt differs
    core.say("second")
    core.answer("two")
    live = core.session.conversation
    assert len(live.tree.roots) == 2
    again = replayed(core).conversation
    assert again.tree == live.tree and again.cursor == live.cursor


def from_its_records(core: Core) -> Core:
    """The same session's core, its session loaded from a snapshot that keeps its tree
    in records (an actor taking it up after a restart): nothing of the tree is read until
    a command needs it."""
    app = TetherApplication(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    app.events.put([*core.created, *core.log])
    app.take_snapshot(core.session.id)
    loaded = app.session(SID)
    assert loaded is not None and not loaded.tree_in_hand
    taken = copy.copy(core)
    taken.log = list(core.log)
    taken.state = State.of(core.state.env, loaded, core.now)
    nodes = taken.session.conversation.tree.nodes
    assert isinstance(nodes, StoredNodes)
    assert not any(isinstance(n, Node) and isinstance(n.content, StoredContent)
                   and n.content.in_hand for n in dict.values(nodes))
    return taken


def test_tree_commands_on_a_session_taken_up_from_its_records_do_as_on_the_live_one() -> None:
    def commands(core: Core) -> list[Any]:
        replies: list[Any] = [page(core)]
        first = node_of(core, "first question")
        for message in (
                BookmarkNode(session_id=SID, node_id=first, name="start", user="alice"),
                SplitNode(session_id=SID, node_id=node_of(core, "second question"),
                          position=7, user="alice"),
                EditNode(session_id=SID, node_id=node_of(core, "first answer"),
                         text="first reply", user="alice"),
                BranchTo(session_id=SID, node_id="start", user="alice")):
            replies.append(core.feed(message).effects)
        replies.append(core.feed(Generate(session_id=SID, n=2, tools=False)).effects)
        core.answer("one")
        core.answer("two")
        core.feed(DeleteNode(session_id=SID, node_id=node_of(core, "second answer"),
                             mode="cascade", user="alice"))
        replies.append(page(core))
        return replies

    live = two_turns()
    taken = from_its_records(two_turns())
    assert commands(taken) == commands(live)
    assert in_full(taken.session.conversation) == live.session.conversation
    assert replayed(taken).conversation == live.session.conversation
