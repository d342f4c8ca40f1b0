"""A session as a cursor on its conversation tree (the Forest of :mod:`events.forest`).

The session's history (what the model is sent) is mirrored into the session's Forest:
each complete message appended once, with prefix matching, under the root of the system
prompt it was sent with; the node of the last message is the session's *cursor*.
Rewriting the history (a compaction's summary, ``/clear``, a branch, a fork) is mirrored
as a new path from the root, which prefix matching shares with the old one as far as they
agree. Moving the session (``tether branch``, ``tether edit``) goes the other way: the
path to a node becomes the history.

A message the tree holds in two parts (a split, or an edit that kept a common prefix)
comes back as two Turns, the second with ``continues`` set: its text goes on from the
first's without a break (:func:`actors.model.context.coalesce` joins them so, and mirroring
such a history again finds the same two nodes).

Pure apart from the Forest it is given: the session actor owns the tree, calls these
between its own steps and saves the Forest's events.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from tether.events.forest import Forest, ForestState, Node, message_key
from tether.events.messages import ContentBlock, TextBlock, ToolResultBlock, ToolUseBlock, TreeNode
from tether.events.session import Turn

NODE_TEXT_CHARS = 200
"""Characters of a node's text in a TreeView."""


class TreeMirror:
    """Keeps a Forest in step with one session's history.

    :meth:`sync` appends the messages added since the last call; when the history is a
    different list than last time (the Session aggregate assigns a new one whenever it
    rewrites the history, and appends to the same one otherwise) or the system prompt
    changed, it walks the whole history again from the root (cheap where the tree has
    it already: prefix matching reuses every identical node). :meth:`stand_at` puts the
    cursor on a given node after a move, without searching for it.
    """

    def __init__(self, forest: Forest) -> None:
        self.forest = forest
        self.cursor = ""
        self._history: list[Turn] | None = None
        self._prompt: str | None = None
        self._count = 0
        """Messages of ``_history`` mirrored so far (the cursor is the last one's node)."""

    def sync(self, system_prompt: str, history: list[Turn],
             complete: int | None = None) -> list[tuple[str, str, Turn]]:
        """Mirror ``history[:complete]`` (all of it when ``complete`` is None); returns
        ``(node, parent, message)`` for each message newly placed (also a message that
        matched an existing node on a new path).

        ``complete`` leaves out an unfinished trailing message (the message of tool
        results while results are still coming: :func:`complete_messages` counts); a
        later sync mirrors the rest, from where this one stopped. A message once mirrored
        is not mirrored again while the history stays the same list, so ``complete``
        must not count a message that will still change. A count below what is mirrored
        already changes nothing. A continuation Turn is mirrored as a continuation where
        its parent can be continued (:meth:`ForestState.can_continue`), else as a plain
        message (as :func:`actors.model.context.coalesce` then sends it)."""
        limit = len(history) if complete is None else max(0, min(complete, len(history)))
        if (not self.cursor or history is not self._history or system_prompt != self._prompt
                or self._count > len(history)):
            self._history, self._prompt, self._count = history, system_prompt, 0
            if not limit:  # nothing to mirror: no root is made for an empty conversation
                self.cursor = ""
                return []
            self.cursor = self.forest.root_for(system_prompt)
        placed: list[tuple[str, str, Turn]] = []
        for turn in history[self._count:limit]:
            parent = self.cursor
            self.cursor = self.forest.append(parent, turn.role, turn.content,
                                             _continues(self.forest.state, parent, turn))
            if self.cursor != parent:
                placed.append((self.cursor, parent, turn))
        self._count = max(self._count, limit)
        return placed

    def stand_at(self, node_id: str, system_prompt: str, history: list[Turn]) -> str:
        """The session now stands at ``node_id`` (a branch, an edit) with ``history``, the
        path to it (as :func:`history_at` gives it): pass the list the session keeps
        (its history once the move is recorded), so later syncs append to it under
        ``node_id``. The cursor is that very node, not one found again by prefix
        matching (which could pick an identical sibling). Returns the cursor.

        When ``node_id`` hangs under another root than ``system_prompt``'s (a message
        sent with an earlier system prompt), the next messages are sent with
        ``system_prompt``: the history is then mirrored under its root, as :meth:`sync`
        does. Raises ValueError when ``history`` is not the path to ``node_id`` (its
        messages compared as prefix matching does), ForestError for an unknown node."""
        path = self.forest.path(node_id)
        if len(path) - 1 != len(history) or any(
            message_key(node.role, node.content) != message_key(turn.role, turn.content)
            for node, turn in zip(path[1:], history, strict=False)
        ):
            raise ValueError(f"that history is not the path to node {node_id}")
        if self.forest.state.find_root(system_prompt) != path[0].id or not history:
            self.forget()
            self.sync(system_prompt, history)
            return self.cursor
        self.cursor, self._history, self._prompt = node_id, history, system_prompt
        self._count = len(history)
        return self.cursor

    def forget(self) -> None:
        """The next sync walks the whole history again (after the tree was changed)."""
        self._history = None


def locate(state: ForestState, system_prompt: str, history: Sequence[Turn]) -> str:
    """The node a session with ``history`` under ``system_prompt`` stands at, found
    without changing the tree; ``""`` when the tree does not hold that path (yet)."""
    node = state.find_root(system_prompt) if history else None
    if node is None:
        return ""
    for turn in history:
        node, changes = state.plan_append(node, turn.role, turn.content,
                                          _continues(state, node, turn))
        if changes:
            return ""
    return node


def _continues(state: ForestState, parent: str, turn: Turn) -> bool:
    """The continuation flag ``turn`` is mirrored with under ``parent``."""
    return turn.continues and state.can_continue(parent, turn.role, turn.content)


def complete_messages(history: Sequence[Turn]) -> int:
    """How many leading messages of ``history`` are complete (for :meth:`TreeMirror.sync`'s
    ``complete``): all of them, except a trailing user message of tool results that does
    not yet answer every tool_use of the assistant message before it (the session adds
    the results to that message one by one, as the calls end)."""
    if len(history) >= 2:
        before, last = history[-2], history[-1]
        if before.role == "assistant" and last.role == "user" and any(
                isinstance(b, ToolResultBlock) for b in last.content):
            unanswered, _ = _answers(before.content, last.content)
            if unanswered:
                return len(history) - 1
    return len(history)


def _answers(before: Sequence[ContentBlock], after: Sequence[ContentBlock]
             ) -> tuple[set[str], set[str]]:
    """(the calls of ``before`` that ``after`` does not answer, the results in ``after``
    of calls ``before`` did not make)."""
    calls = {b.id for b in before if isinstance(b, ToolUseBlock)}
    answered = {b.tool_use_id for b in after if isinstance(b, ToolResultBlock)}
    return calls - answered, answered - calls


def history_of(path: Sequence[Node]) -> list[Turn]:
    """The history a session standing at the end of ``path`` has: its messages without
    the root (the system prompt is assembled anew each turn), a continuation node as a
    Turn with ``continues`` set."""
    return [Turn(node.role, list(node.content), continues=node.continues)
            for node in path if node.parent is not None]


def history_at(state: ForestState, node_id: str) -> list[Turn]:
    """The history of a session standing at ``node_id``. Raises LookupError, naming the
    node, when no session can stand there: a root; a message that calls tools (its
    results would be missing, which the model's API refuses); a path on which a message
    calling tools is not followed by a message holding the results of all its calls, or
    a message holds results of calls the message before it did not make (after a
    delete, say). ForestError for a missing node."""
    path = state.path(node_id)
    if path[-1].parent is None:
        raise LookupError("that is a root (a system prompt): pick a message under it")
    if any(isinstance(b, ToolUseBlock) for b in path[-1].content):
        raise LookupError("that message calls tools and its results are not on the path: "
                          "pick the message of results below it, or the message before it")
    for before, after in pairwise(path):
        unanswered, stray = _answers(before.content, after.content)
        if unanswered:
            raise LookupError(
                f"message {before.id} on that path calls tools the message after it does "
                f"not answer ({', '.join(sorted(unanswered))}): no session can stand "
                "below it")
        if stray:
            raise LookupError(
                f"message {after.id} on that path holds results of calls the message "
                f"before it did not make ({', '.join(sorted(stray))}): no "
                "session can stand there or below it")
    return history_of(path)


def node_text(content: Sequence[ContentBlock], limit: int = NODE_TEXT_CHARS,
              continues: bool = False) -> str:
    """One line for a node: its text (cut at ``limit``), else its tool blocks named; a
    continuation's text starts with ``…`` (it goes on from its parent's)."""
    text = " ".join("".join(b.text for b in content if isinstance(b, TextBlock)).split())
    if continues and text:
        text = "…" + text
    tools = [f"{b.name}()" for b in content if isinstance(b, ToolUseBlock)]
    results = [b for b in content if isinstance(b, ToolResultBlock)]
    parts = [text] if text else []
    if tools:
        parts.append("calls " + ", ".join(tools))
    if results:
        errors = sum(1 for b in results if b.is_error)
        parts.append(f"{len(results)} tool result{'s' if len(results) != 1 else ''}"
                     + (f" ({errors} failed)" if errors else ""))
    line = "; ".join(parts) or "(empty)"
    return line if len(line) <= limit else line[: limit - 1] + "…"


def tree_nodes(state: ForestState) -> list[TreeNode]:
    """Every node of the forest, depth first from each root in order, children in order."""
    marks: dict[str, list[str]] = {}
    for name, node_id in sorted(state.bookmarks.items()):
        marks.setdefault(node_id, []).append(name)
    out: list[TreeNode] = []
    stack: list[tuple[str, int]] = [(root, 0) for root in reversed(state.roots)]
    while stack:
        node_id, depth = stack.pop()
        node = state.nodes[node_id]
        out.append(TreeNode(node_id=node.id, parent_id=node.parent or "", role=node.role,
                            depth=depth, text=node_text(node.content,
                                                        continues=node.continues),
                            children=len(node.children), bookmarks=marks.get(node.id, [])))
        stack.extend((child, depth + 1) for child in reversed(node.children))
    return out


def render_tree(nodes: Sequence[TreeNode], cursor: str, width: int = 100) -> list[str]:
    """The tree, one line per node (``nodes`` depth first, as :func:`tree_nodes` gives
    them): the cursor's node marked ``*`` and the nodes on its path ``|`` in the first
    column; each line names the node id's first 8 characters (enough to pass to
    ``tether branch``/``edit``/``fork --at``, which take any unique prefix), its role and
    bookmarks, and its text cut to fit ``width``.

    At a branch point each child starts with a connector, ``├─`` or ``└─`` for the last
    one, and ``│`` runs down beside the subtree of every child but the last, so whose
    reply a line is stays plain however long a branch. A message with one reply keeps its
    column (a conversation without branches reads as a list); the only message under a
    root is one step in. For example (``3c4d5e6f`` is the common prefix of a message and
    its edit, the cursor on the reply to the edited one; tested in test_conversation)::

        | 1a2b3c4d system: be brief
        |    3c4d5e6f user: what colour is the
             ├─ 5e6f7a8b user: …sky
             │  7a8b9c0d assistant: blue
             │  9c0d1e2f user: thanks
        |    └─ 0d1e2f3a user: …grass
        *       2f3a4b5c assistant: green
    """
    on_path: set[str] = set()
    by_id = {n.node_id: n for n in nodes}
    current = cursor
    while current:
        on_path.add(current)
        current = by_id[current].parent_id if current in by_id else ""
    kids: dict[str, list[str]] = {}
    for node in nodes:
        if node.parent_id in by_id:
            kids.setdefault(node.parent_id, []).append(node.node_id)
    below: dict[str, str] = {}  # what the lines of a node's subtree start with
    lines: list[str] = []
    for node in nodes:  # parents come before their children
        parent = by_id.get(node.parent_id)
        if parent is None:
            lead = below[node.node_id] = ""
        else:
            base, siblings = below[parent.node_id], kids[parent.node_id]
            if len(siblings) > 1:
                last = siblings[-1] == node.node_id
                lead = base + ("└─ " if last else "├─ ")
                below[node.node_id] = base + ("   " if last else "│  ")
            else:
                lead = below[node.node_id] = base + ("   " if not parent.parent_id else "")
        mark = "*" if node.node_id == cursor else ("|" if node.node_id in on_path else " ")
        marks = f" [{', '.join(node.bookmarks)}]" if node.bookmarks else ""
        head = f"{mark} {lead}{node.node_id[:8]} {node.role}{marks}: "
        room = max(20, width - len(head))
        text = node.text if len(node.text) <= room else node.text[: room - 1] + "…"
        lines.append(head + text)
    return lines


def resolve_node(state: ForestState, wanted: str) -> str:
    """The node id ``wanted`` names: the id itself or a unique prefix of it (at least 4
    characters), or a bookmark name. Raises LookupError saying why not."""
    if wanted in state.nodes:
        return wanted
    if wanted in state.bookmarks:
        return state.bookmarks[wanted]
    if len(wanted) < 4:
        raise LookupError(f"no node {wanted!r}: give at least 4 characters of its id")
    found = [node_id for node_id in state.nodes if node_id.startswith(wanted)]
    if not found:
        raise LookupError(f"no node {wanted!r} in this session's tree")
    if len(found) > 1:
        raise LookupError(f"{wanted!r} names {len(found)} nodes; give more of the id")
    return found[0]
