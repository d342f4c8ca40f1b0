"""A session as a cursor on its conversation tree (the Forest of :mod:`events.forest`).

The session's history (what the model is sent) is mirrored into the session's Forest:
each complete message appended once, with prefix matching, under the root of the system
prompt it was sent with; the node of the last message is the session's *cursor*.
Rewriting the history (a compaction's summary, ``/clear``, a branch, a fork) is mirrored
as a new path from the root, which prefix matching shares with the old one as far as they
agree. Moving the session (``tether branch``, ``tether edit``) goes the other way: the
path to a node becomes the history.

Pure apart from the Forest it is given: the session actor owns the tree, calls these
between its own steps and saves the Forest's events.
"""

from __future__ import annotations

from collections.abc import Sequence

from events.forest import Forest, ForestState, Node
from events.messages import ContentBlock, TextBlock, ToolResultBlock, ToolUseBlock, TreeNode
from events.session import Turn

NODE_TEXT_CHARS = 200
"""Characters of a node's text in a TreeView."""


class TreeMirror:
    """Keeps a Forest in step with one session's history.

    :meth:`sync` appends the messages added since the last call; when the history is a
    different list than last time (the Session aggregate assigns a new one whenever it
    rewrites the history, and appends to the same one otherwise) or the system prompt
    changed, it walks the whole history again from the root (cheap where the tree has
    it already: prefix matching reuses every identical node).
    """

    def __init__(self, forest: Forest) -> None:
        self.forest = forest
        self.cursor = ""
        self._history: list[Turn] | None = None
        self._prompt: str | None = None
        self._count = 0

    def sync(self, system_prompt: str, history: list[Turn]) -> list[tuple[str, str, Turn]]:
        """Mirror ``history``; returns ``(node, parent, message)`` for each message newly
        placed (also a message that matched an existing node on a new path)."""
        if not history:  # nothing to mirror: no root is made for an empty conversation
            self.cursor, self._history, self._prompt = "", history, system_prompt
            self._count = 0
            return []
        if not self.cursor or history is not self._history or system_prompt != self._prompt:
            self.cursor = self.forest.root_for(system_prompt)
            self._history, self._prompt, self._count = history, system_prompt, 0
        placed: list[tuple[str, str, Turn]] = []
        for turn in history[self._count:]:
            parent = self.cursor
            self.cursor = self.forest.append(parent, turn.role, turn.content)
            if self.cursor != parent:
                placed.append((self.cursor, parent, turn))
        self._count = len(history)
        return placed

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
        node, changes = state.plan_append(node, turn.role, turn.content)
        if changes:
            return ""
    return node


def history_of(path: Sequence[Node]) -> list[Turn]:
    """The history a session standing at the end of ``path`` has: its messages without
    the root (the system prompt is assembled anew each turn)."""
    return [Turn(node.role, list(node.content)) for node in path if node.parent is not None]


def history_at(state: ForestState, node_id: str) -> list[Turn]:
    """The history of a session standing at ``node_id``. Raises LookupError when no
    session can stand there: a root, or a message that calls tools (its results would
    be missing, which the model's API refuses); ForestError for a missing node."""
    path = state.path(node_id)
    if path[-1].parent is None:
        raise LookupError("that is a root (a system prompt): pick a message under it")
    if any(isinstance(b, ToolUseBlock) for b in path[-1].content):
        raise LookupError("that message calls tools and its results are not on the path: "
                          "pick the message of results below it, or the message before it")
    return history_of(path)


def node_text(content: Sequence[ContentBlock], limit: int = NODE_TEXT_CHARS) -> str:
    """One line for a node: its text (cut at ``limit``), else its tool blocks named."""
    text = " ".join("".join(b.text for b in content if isinstance(b, TextBlock)).split())
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
                            depth=depth, text=node_text(node.content),
                            children=len(node.children), bookmarks=marks.get(node.id, [])))
        stack.extend((child, depth + 1) for child in reversed(node.children))
    return out


def render_tree(nodes: Sequence[TreeNode], cursor: str, width: int = 100) -> list[str]:
    """The tree as indented lines, the cursor's node marked ``*`` and the nodes on its
    path ``|``; each line names the node id's first 8 characters (enough to pass to
    ``tether branch``/``edit``/``fork --at``, which take any unique prefix). A message
    with one reply keeps its column; the children of a root or of a branch point are
    indented one step, so a long conversation without branches stays readable."""
    on_path: set[str] = set()
    by_id = {n.node_id: n for n in nodes}
    current = cursor
    while current:
        on_path.add(current)
        current = by_id[current].parent_id if current in by_id else ""
    indent: dict[str, int] = {}
    lines: list[str] = []
    for node in nodes:  # parents come before their children
        parent = by_id.get(node.parent_id)
        indent[node.node_id] = 0 if parent is None else indent[parent.node_id] + (
            1 if not parent.parent_id or parent.children > 1 else 0)
        mark = "*" if node.node_id == cursor else ("|" if node.node_id in on_path else " ")
        marks = f" [{', '.join(node.bookmarks)}]" if node.bookmarks else ""
        head = f"{mark} {'  ' * indent[node.node_id]}{node.node_id[:8]} {node.role}{marks}: "
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
