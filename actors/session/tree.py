"""The session's conversation tree: what a decision placed in it published as generation
events, and the user's tree commands (between turns only). The tree is the Session's own,
derived as its events apply (:mod:`events.conversation`)."""

from __future__ import annotations

from tether.actors.conversation import history_at, resolve_node, tree_nodes
from tether.actors.session.effects import RestoreFiles
from tether.actors.session.state import Phase
from tether.actors.session.step import Step
from tether.events.forest import ForestError, Planned
from tether.events.messages import (
    TREE_PAGE_MAX,
    AssistantNode,
    BookmarkNode,
    Branched,
    BranchTo,
    DeleteNode,
    EditNode,
    ErrorReply,
    ToolResultBlock,
    ToolResultNode,
    TreeChanged,
    TreeCommand,
    TreeQuery,
    TreeView,
    UndoFiles,
)
from tether.events.session import Turn


def publish_placed(step: Step) -> None:
    """Say which assistant messages and tool results the session's events placed in the
    tree since the last time. The main completion's latest assistant message is the
    turn's node, and the message it answers is the one further completions answer."""
    for placed in step.conversation.take_placed():
        if placed.turn.role == "assistant":
            # The one before it (a tool call's) was on the way, not final.
            step.turn.turn_nodes[:1] = [placed.node]
            step.turn.alt_parent = placed.parent
            step.emit(AssistantNode, node_id=placed.node, parent_id=placed.parent,
                      content=list(placed.turn.content))
            continue
        for block in placed.turn.content:
            if isinstance(block, ToolResultBlock):
                step.emit(ToolResultNode, node_id=placed.node, call_id=block.tool_use_id,
                          is_error=block.is_error, content=block.content)


def tree_page(step: Step, query: TreeQuery) -> None:
    """Answer a page of the tree as it stands."""
    nodes = tree_nodes(step.conversation.tree)
    start = max(0, query.offset)
    end = start + max(1, min(query.limit, TREE_PAGE_MAX))
    # The version counts what this decision is about to save.
    step.reply(TreeView(session_id=step.session_id, cursor=step.conversation.cursor,
                        nodes=nodes[start:end], offset=start, total=len(nodes),
                        version=step.session.version))


def stand_at(step: Step, node_id: str, history: list[Turn], reason: str) -> None:
    """Record that the session stands at ``node_id`` with ``history`` (the path to it):
    the tree's cursor is exactly that node."""
    step.session.move_to(node_id=node_id, history=history, reason=reason)


def _alter(step: Step, operation: str, node_id: str, planned: Planned) -> str:
    """Record what the user's ``operation`` on ``node_id`` changes (nothing when it
    changes nothing); returns the node it ends at."""
    if planned.changes:
        step.session.alter_tree(operation=operation, node_id=node_id,
                                result_id=planned.node_id, changes=planned.changes)
    return planned.node_id


def busy(step: Step, what: str) -> ErrorReply | None:
    """Why the user may not change the session now (a turn runs or waits), or None."""
    if step.turn.phase is not Phase.IDLE or step.session.queued:
        return ErrorReply(error="busy", reason=what)
    return None


def _between_turns(step: Step) -> bool:
    """Ready the tree for a change by the user, or answer busy: only between turns (a
    running turn is never changed under it)."""
    refusal = busy(step, "a turn is running; try again when it is done (or /stop it)")
    if refusal is not None:
        step.reply(refusal)
        return False
    return True


def undo(step: Step, message: UndoFiles) -> None:
    """``tether undo``: the shell puts files back from the snapshots of this session's
    calls and records it on the session. Only between turns."""
    refusal = busy(step, f"session {step.session.name} is in the middle of a turn; undo it "
                         "when it waits")
    if refusal is not None:
        step.reply(refusal)
    elif not step.env.snapshots:
        step.reply(ErrorReply(error="undo", reason="this engine takes no snapshots"))
    else:
        step.effects.append(RestoreFiles(message.to_version,
                                         step.config.workspace_root or step.session.workspace))


def move(step: Step, message: BranchTo | EditNode) -> None:
    """Branch (or edit, then branch) to a node of the tree: the session's history becomes
    the path to it. Only between turns."""
    if not _between_turns(step):
        return
    try:
        tree = step.conversation.tree
        node_id = resolve_node(tree, message.node_id)
        if isinstance(message, EditNode):
            # An edit that was made stays, even if no session can stand there.
            node_id = _alter(step, "edit", node_id, tree.plan_edit(node_id, message.text))
        history = history_at(tree, node_id)
    except (LookupError, ForestError) as exc:
        step.reply(ErrorReply(error="tree", reason=str(exc)))
        return
    verb = "edited" if isinstance(message, EditNode) else "branched"
    stand_at(step, node_id, history, f"{verb} by {message.user}")
    step.reply(Branched(session_id=step.session_id, node_id=node_id,
                        messages=len(step.session.history)))


def change_tree(step: Step, message: TreeCommand) -> None:
    """Split, delete or bookmark a node of the tree, only between turns. A delete never
    touches the session's path (move the session first); a split on it re-reads the
    history from the tree (recorded as MovedTo, the same messages in more nodes), so the
    history and the tree keep agreeing."""
    if not _between_turns(step):
        return
    state = step.conversation.tree
    cursor = step.conversation.cursor
    on_path = {node.id for node in state.path(cursor)} if cursor else set()
    resplit = False
    try:
        if isinstance(message, BookmarkNode):
            if message.remove:
                node_id = state.bookmarks.get(message.name, "")
                _alter(step, "unbookmark", node_id, state.plan_remove_bookmark(message.name))
                detail = f"bookmark {message.name!r} removed"
            else:
                node_id = resolve_node(state, message.node_id)
                _alter(step, "bookmark", node_id, state.plan_bookmark(message.name, node_id))
                detail = f"bookmark {message.name!r} names {node_id[:8]}"
        elif isinstance(message, DeleteNode):
            node_id = resolve_node(state, message.node_id)
            if node_id in on_path:
                raise LookupError(
                    f"session {step.session.name} stands at {node_id[:8]} or below it; "
                    "move it elsewhere first (tether branch), then delete")
            gone = 1 + (len(state.descendants(node_id)) if message.mode == "cascade" else 0)
            _alter(step, "delete", node_id, state.plan_delete(node_id, message.mode))
            detail = (f"deleted {node_id[:8]}" + (
                f" and the {gone - 1} node{'s' if gone != 2 else ''} under it"
                if gone > 1 else "") + (
                "; its children took its place" if message.mode == "reparent" else ""))
        else:
            split = resolve_node(state, message.node_id)
            node_id = _alter(step, "split", split, state.plan_split(split, message.position))
            resplit = split in on_path
            detail = (f"split {split[:8]}: {node_id[:8]} holds its first "
                      f"{message.position} characters, {split[:8]} the rest")
    except (LookupError, ForestError) as exc:
        step.reply(ErrorReply(error="tree", reason=str(exc)))
        return
    if resplit:
        try:
            history = history_at(state, cursor)
        except (LookupError, ForestError) as exc:  # the split stands; the session too
            step.reply(ErrorReply(error="tree", reason="split, but the session's history "
                                  f"could not be read back from the tree: {exc}"))
            return
        stand_at(step, cursor, history, f"a message on its path split by {message.user}")
    step.reply(TreeChanged(session_id=step.session_id, node_id=node_id, detail=detail))
