"""Reading a session's conversation tree: the history at a node, its nodes as a list or
drawn as lines, and the node a name gives.

The tree itself, and how the session's history is mirrored into it, are in
:mod:`events.conversation`; these are the queries the session's core, the manager and the
command line make of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from tether.events.conversation import Turn, answers
from tether.events.forest import ForestState, Node
from tether.events.messages import ContentBlock, TextBlock, ToolResultBlock, ToolUseBlock, TreeNode
from tether.events.stored_content import read_contents

NODE_TEXT_CHARS = 200
"""Characters of a node's text in a TreeView."""


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
    read_contents(node.content for node in path)  # (kept apart: read at once)
    if path[-1].parent is None:
        raise LookupError("that is a root (a system prompt): pick a message under it")
    if any(isinstance(b, ToolUseBlock) for b in path[-1].content):
        raise LookupError("that message calls tools and its results are not on the path: "
                          "pick the message of results below it, or the message before it")
    for before, after in pairwise(path):
        unanswered, stray = answers(before.content, after.content)
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
    read_contents(node.content for node in state.nodes.values())  # (kept apart: at once)
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
