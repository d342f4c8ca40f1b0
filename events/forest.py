"""A session's conversation as a tree of messages: the rules (seed 003's Forest), and the
Forest aggregate sessions stored before kept their tree in.

A forest holds roots (one per system prompt) and, under them, messages: each node has a
role (``system`` for roots, ``user`` or ``assistant`` below), a list of content blocks and
its children in order. A path from a root to a node is one conversation; siblings are
alternatives (another completion, an edit). A session is a cursor on the tree.

Two layers:

* :class:`ForestState`, a pure core. Its ``plan_*`` methods check an operation against the
  rules and return what it would change (a :class:`Planned`: the node the caller ends up
  at and a list of primitive :data:`Change` records) without touching the state; they
  raise a :class:`ForestError` for an invalid operation. :meth:`ForestState.apply` applies
  changes (in place: replaying a forest stays linear in its events).
* :class:`Forest`, an event-sourced aggregate holding one tree. Each operation plans on
  the state first (so a refused operation records nothing), then records one event
  carrying the planned changes; applying the event applies them. Operations that change
  nothing (a reused root or message, an edit to the same text or one differing only in
  whitespace) record no event. Sessions now keep their tree themselves, derived from
  their own events (:mod:`events.conversation`; a user's operation is recorded as
  ``Session.TreeAltered`` with its changes): a Forest is what a session stored before
  recorded its tree in, read (and imported by its actor) and no longer written.

Ids. One forest per session: its aggregate id is ``forest_uuid(session_id)``, a uuid5
from a namespace of its own (like the session's), so whoever knows the session finds its
tree without an index. A node's id is ``uuid5(forest id, "node:<n>")`` where ``n`` counts
the nodes ever created in that forest (deleted ones included, so an id is never reused).
The ids are minted when an operation is planned and stored in its event, so a replay
gives every node the id it had; they are unique across forests (a node id alone names
it, in the log, on the bus or in a fork) and deterministic (the same operations on the
same session give the same ids, which keeps tests and reruns reproducible).

Rules (after the Forest of the conversation engine spec, seed 003):

* ``root_for(system_prompt)``: an existing root with the same system text (compared
  trimmed) is reused, else a root is created.
* ``append(parent, role, content)`` with prefix matching: blank text blocks are dropped;
  a message left with no blocks adds nothing (the parent is returned: no empty node is
  ever created); an identical message (same role; text compared trimmed; tool inputs
  compared as canonical JSON, so key order does not matter but ``1`` and ``true`` differ)
  already under the parent is reused, if its continuation flag (below) is the one wanted.
* continuations: a node with ``continues`` set holds text that goes on from its parent's
  without a break (the right part of a split, the new rest of an edit): the message it
  ends is its parent's text and its own, joined with nothing between (not two messages).
  Only a text-only node under a text-only message of the same role can be one
  (``append(..., continues=True)`` elsewhere is refused).
* ``split(node, position)``: the node's text (its text blocks joined; positions count
  characters) is cut at ``1 <= position < len(text)``. A new node holding the left part
  takes the node's place among its siblings (with the node's continuation flag); the node
  keeps its id, holds the right part (now a continuation) and keeps its children, under
  the new node. Bookmarks on it stay (the path to it reads as before). Roots, nodes that
  are not only text and cuts leaving a part that is only whitespace are refused.
* ``edit(node, new_content)``: a node without children changes in place (keeping its
  continuation flag); an edit that prefix matching would not tell from the old content
  (only whitespace changed) records nothing, and one that would make the node identical
  (same key, same flag) to one of its siblings is refused (:class:`DuplicateMessageError`
  names the sibling: branch to it instead), so an edit never makes two siblings alike
  (a split or a reparenting delete still can: prefix matching then takes the first). A node
  with children keeps what hangs below it and the edit branches, as the seed's
  ``editNodeContent`` does, from the longest common prefix of the old and new text:
  when the common prefix is empty (or only whitespace) the new content becomes a sibling
  of the node (appended to its parent, with prefix matching, with the node's
  continuation flag); when the old text is a prefix of the new (up to trailing
  whitespace) the rest of the new text becomes a new child of the node, a continuation;
  otherwise the node is split at the prefix and the rest of the new text becomes a
  sibling of the right part, under the left part, a continuation too. When the new text
  is a prefix of the old, no node is added: the left part is the result. The bookmarks
  on the node move to the node that now ends the edited message. Empty edits, edits of
  roots, of nodes holding tool_use blocks, of tool results, and new content with
  tool_use or tool_result blocks are refused.
* ``delete(node, mode)``: ``cascade`` removes the node and everything under it;
  ``reparent`` removes only the node and puts its children, in order, where it stood
  under its parent (a child that continued its text is a message of its own there).
  Roots cannot be deleted. Bookmarks on removed nodes go with them.
* bookmarks: named pointers to nodes, set or moved with ``bookmark`` and removed with
  ``remove_bookmark``.
* navigation (queries, no events): ``path`` (root to node; a broken chain raises),
  ``children``, ``siblings``, ``roots``, ``node``.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import uuid
from collections.abc import Iterator, Sequence
from typing import Any, Literal, NamedTuple

import msgspec
from eventsourcing.domain import Aggregate, event

from tether.events.messages import ContentBlock, TextBlock, ToolResultBlock, ToolUseBlock
from tether.events.snapshots import TypedSnapshot
from tether.events.stamping import stamped_trigger
from tether.events.stored_content import StoredContent

FOREST_NAMESPACE = uuid.UUID("3e0b6d27-5f8a-4c1e-b94d-7a2c8e51f036")

ROLES = ("user", "assistant")
"""Roles of the messages below a root (a root's role is ``system``)."""

DeleteMode = Literal["cascade", "reparent"]
DELETE_MODES = ("cascade", "reparent")


def forest_uuid(session_id: str) -> uuid.UUID:
    """The aggregate id of session ``session_id``'s conversation tree (stable, derived)."""
    return uuid.uuid5(FOREST_NAMESPACE, f"forest:{session_id}")


def node_id_for(forest_id: str, seq: int) -> str:
    """The id of the ``seq``-th node ever created in forest ``forest_id`` (counting from 0):
    ``str(uuid.uuid5(uuid.UUID(forest_id), f"node:{seq}"))``, spelled out, since a tree read
    mints one per message it mirrors and ``uuid.UUID`` objects made up most of that."""
    digest = bytearray(hashlib.sha1(_namespace_bytes(forest_id) + b"node:%d" % seq).digest())
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # the RFC 4122 variant
    h = digest[:16].hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@functools.lru_cache(maxsize=256)
def _namespace_bytes(forest_id: str) -> bytes:
    return uuid.UUID(forest_id).bytes


# --- errors --------------------------------------------------------------------------------


class ForestError(ValueError):
    """An operation the forest's rules refuse (nothing was recorded)."""


class NodeNotFoundError(ForestError):
    """No node with that id in this forest."""


class RootOperationError(ForestError):
    """Roots cannot be deleted, split or edited."""


class InvalidRoleError(ForestError):
    """A message's role is not one of ``user`` or ``assistant``."""


class InvalidContentError(ForestError):
    """A message holds blocks its role cannot carry."""


class SplitPositionError(ForestError):
    """A split position outside ``1 <= position < len(text)``, or leaving a blank part."""


class NotTextError(ForestError):
    """The node (or the new content) is not only text."""


class EmptyEditError(ForestError):
    """An edit to empty (or whitespace-only) content."""


class ToolUseEditError(ForestError):
    """tool_use content cannot be edited (its result answers that exact call)."""


class DeleteModeError(ForestError):
    """A delete mode other than ``cascade`` or ``reparent``."""


class DuplicateMessageError(ForestError):
    """An in-place edit would make the node identical to one of its siblings."""


class ContinuationError(ForestError):
    """A continuation where its text cannot go on from its parent's."""


class BookmarkError(ForestError):
    """A bookmark name that is blank, or that does not exist."""


class BrokenPathError(ForestError):
    """A node's chain of parents does not reach a root (a missing parent or a cycle)."""


# --- state ---------------------------------------------------------------------------------


class Node(msgspec.Struct, frozen=True):
    """One message of the tree. ``parent`` is None for a root (role ``system``, content the
    system prompt). Frozen, with tuples: what the queries hand out cannot change the tree.

    ``continues``: its text goes on from its parent's without a break (the right part of
    a split, or the new rest of an edit); the parent is then a text-only message of the
    same role, and the two are one message cut in two."""

    id: str
    parent: str | None
    role: str
    content: tuple[ContentBlock, ...]
    children: tuple[str, ...] = ()
    continues: bool = False

    @property
    def text(self) -> str:
        """The node's text blocks joined (split positions count in this)."""
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))


# Changes: the primitive facts an operation consists of, recorded in its event.


class AddNode(msgspec.Struct, tag_field="op", tag="add_node"):
    """A node without children, under ``parent`` (None: a root) at ``index`` among its
    siblings (-1: last), a continuation of its parent's text when ``continues`` (events
    stored before the flag existed have none: False). Counts as one more node created in
    the forest."""

    id: str
    parent: str | None
    role: str
    content: list[ContentBlock]
    index: int = -1
    continues: bool = False


class MoveNode(msgspec.Struct, tag_field="op", tag="move_node"):
    """The node leaves its parent and goes under ``parent`` at ``index`` (-1: last)."""

    id: str
    parent: str
    index: int = -1


class SetContent(msgspec.Struct, tag_field="op", tag="set_content"):
    """The node's content is now ``content``; its continuation flag is now ``continues``
    when that is given (None, as in events stored before the field existed: unchanged)."""

    id: str
    content: list[ContentBlock]
    continues: bool | None = None


class RemoveNode(msgspec.Struct, tag_field="op", tag="remove_node"):
    """The node, which has no children by then, leaves the tree."""

    id: str


class SetBookmark(msgspec.Struct, tag_field="op", tag="set_bookmark"):
    """Bookmark ``name`` points at node ``node`` (created or moved)."""

    name: str
    node: str


class DropBookmark(msgspec.Struct, tag_field="op", tag="drop_bookmark"):
    """Bookmark ``name`` is gone."""

    name: str


Change = AddNode | MoveNode | SetContent | RemoveNode | SetBookmark | DropBookmark


class Planned(NamedTuple):
    """What an operation would do: the node it ends at and the changes (none: a no-op)."""

    node_id: str
    changes: list[Change]


class ForestState(msgspec.Struct):
    """The tree and its bookmarks, with the rules as pure ``plan_*`` methods."""

    forest_id: str
    nodes: dict[str, Node] = msgspec.field(default_factory=dict)
    roots: list[str] = msgspec.field(default_factory=list)
    bookmarks: dict[str, str] = msgspec.field(default_factory=dict)
    created: int = 0
    """Nodes ever created (the next node's sequence number)."""

    # --- queries ---------------------------------------------------------------------------

    def node(self, node_id: str) -> Node:
        """The node with id ``node_id``."""
        found = self.nodes.get(node_id)
        if found is None:
            raise NodeNotFoundError(f"no node {node_id!r} in this forest")
        return found

    def children(self, node_id: str) -> list[Node]:
        """The node's children, in order."""
        return [self.nodes[c] for c in self.node(node_id).children]

    def siblings(self, node_id: str) -> list[Node]:
        """The other children of the node's parent, in order ([] for a root)."""
        node = self.node(node_id)
        if node.parent is None:
            return []
        return [n for n in self.children(node.parent) if n.id != node_id]

    def path(self, node_id: str) -> list[Node]:
        """The nodes from the root down to ``node_id``, both included."""
        path: list[Node] = []
        seen: set[str] = set()
        current: str | None = node_id
        while current is not None:
            if current in seen:
                raise BrokenPathError(f"the parents of {node_id!r} loop at {current!r}")
            seen.add(current)
            found = self.nodes.get(current)
            if found is None:
                if current == node_id:
                    raise NodeNotFoundError(f"no node {node_id!r} in this forest")
                raise BrokenPathError(
                    f"the path to {node_id!r} is broken: its ancestor {current!r} is missing")
            path.append(found)
            current = found.parent
        if path[-1].id not in self.roots:
            raise BrokenPathError(f"the path to {node_id!r} ends at {path[-1].id!r}, not a root")
        path.reverse()
        return path

    def root_nodes(self) -> list[Node]:
        """The roots, oldest first."""
        return [self.nodes[r] for r in self.roots]

    def find_root(self, system_prompt: str) -> str | None:
        """The root whose system text is ``system_prompt`` (compared trimmed), if any."""
        wanted = system_prompt.strip()
        for root in self.roots:
            if self.nodes[root].text.strip() == wanted:
                return root
        return None

    def descendants(self, node_id: str) -> list[str]:
        """Every node under ``node_id``, children after their descendants (post-order)."""
        out: list[str] = []
        stack: list[tuple[str, bool]] = [(c, False) for c in reversed(self.node(node_id).children)]
        while stack:
            current, expanded = stack.pop()
            if expanded:
                out.append(current)
                continue
            stack.append((current, True))
            stack.extend((c, False) for c in reversed(self.nodes[current].children))
        return out

    def can_continue(self, parent: str, role: str, content: Sequence[ContentBlock]) -> bool:
        """A message of ``role`` holding ``content`` may be a continuation under ``parent``:
        both are text only (and not empty) and of the same role (a root never is one)."""
        node = self.node(parent)
        return (node.parent is not None and node.role == role and _only_text(node.content)
                and _only_text(_clean(content)))

    def _mint(self, offset: int = 0) -> str:
        return node_id_for(self.forest_id, self.created + offset)

    # --- rules -----------------------------------------------------------------------------

    def plan_root(self, system_prompt: str) -> Planned:
        """Find the root for ``system_prompt`` or plan a new one."""
        existing = self.find_root(system_prompt)
        if existing is not None:
            return Planned(existing, [])
        content: list[ContentBlock] = [TextBlock(system_prompt)] if system_prompt.strip() else []
        new_id = self._mint()
        return Planned(new_id, [AddNode(new_id, None, "system", content)])

    def plan_append(self, parent: str, role: str, content: Sequence[ContentBlock],
                    continues: bool = False) -> Planned:
        """Append one message under ``parent``, reusing an identical child with the same
        continuation flag. ``continues``: its text goes on from the parent's (refused
        with a :class:`ContinuationError` unless :meth:`can_continue`)."""
        self.node(parent)
        _check_role(role)
        blocks = _clean(content)
        _check_blocks(role, blocks)
        if not blocks:
            return Planned(parent, [])  # nothing left to say: no empty node
        if continues and not self.can_continue(parent, role, blocks):
            raise ContinuationError(
                f"a continuation is text going on from a text message of the same role; "
                f"{parent!r} cannot be continued by this {role} message")
        match = self._matching_child(self.children(parent), role, blocks, continues)
        if match is not None:
            return Planned(match, [])
        new_id = self._mint()
        return Planned(new_id, [AddNode(new_id, parent, role, blocks, continues=continues)])

    def plan_split(self, node_id: str, position: int) -> Planned:
        """Split the node's text at ``position``; the result is the new left-part node."""
        node = self.node(node_id)
        if node.parent is None:
            raise RootOperationError(f"cannot split root {node_id!r}")
        text = _text_only(node, "split")
        if isinstance(position, bool) or not isinstance(position, int):
            raise SplitPositionError(f"a split position is an int, not {position!r}")
        if not 1 <= position < len(text):
            raise SplitPositionError(
                f"cannot split {node_id!r} at {position}: the position must be between 1 "
                f"and {len(text) - 1} (its text has {len(text)} characters)")
        left, right = _cut(node.content, position)
        if not left or not right:
            raise SplitPositionError(
                f"cannot split {node_id!r} at {position}: one part would be only whitespace")
        return Planned(*self._split_changes(node, left, right, self._mint()))

    def _split_changes(self, node: Node, left: list[ContentBlock], right: list[ContentBlock],
                       left_id: str) -> tuple[str, list[Change]]:
        assert node.parent is not None
        index = self.nodes[node.parent].children.index(node.id)
        return left_id, [
            AddNode(left_id, node.parent, node.role, left, index, continues=node.continues),
            MoveNode(node.id, left_id),
            SetContent(node.id, right, continues=True),
        ]

    def plan_edit(self, node_id: str, new_content: str | Sequence[ContentBlock]) -> Planned:
        """Edit the node: in place without children, else branch from the common prefix
        (the rules in the module's docstring). In place, an edit prefix matching cannot
        tell from the old content (only whitespace changed) changes nothing, and one that
        would make the node identical to a sibling (same key and continuation flag) is
        refused with a :class:`DuplicateMessageError` naming that sibling."""
        node = self.node(node_id)
        if node.parent is None:
            raise RootOperationError(
                f"cannot edit root {node_id!r}: a new system prompt is a new root (root_for)")
        old_text = _text_only(node, "edit")
        blocks = _new_text_blocks(new_content)
        if not node.children:
            if message_key(node.role, blocks) == message_key(node.role, node.content):
                return Planned(node_id, [])
            twin = self._matching_child(self.siblings(node_id), node.role, blocks,
                                        node.continues)
            if twin is not None:
                raise DuplicateMessageError(
                    f"an identical message is already there: {twin} (branch to it instead)")
            return Planned(node_id, [SetContent(node_id, blocks)])
        new_text = "".join(b.text for b in _texts(blocks))
        lcp = _common_prefix(old_text, new_text)
        changes: list[Change] = []
        if not old_text[:lcp].strip():  # nothing in common: a sibling, continuing as it did
            base, base_children, suffix = node.parent, self.children(node.parent), blocks
            minted, continues = 0, node.continues
        elif not old_text[lcp:].strip():  # the old text starts the new one: a new child
            base, base_children, suffix = node_id, self.children(node_id), _cut(blocks, lcp)[1]
            minted, continues = 0, True
        else:  # split at the common prefix; the rest of the new text beside the old rest
            left, right = _cut(node.content, lcp)
            base, split = self._split_changes(node, left, right, self._mint())
            changes.extend(split)
            base_children = [msgspec.structs.replace(node, content=tuple(right),
                                                     continues=True)]
            suffix = _cut(blocks, lcp)[1]
            minted, continues = 1, True
        result = base
        if suffix:
            match = self._matching_child(base_children, node.role, suffix, continues)
            if match is not None:
                result = match
            else:
                result = self._mint(minted)
                changes.append(AddNode(result, base, node.role, suffix, continues=continues))
        if result != node_id:
            changes.extend(SetBookmark(name, result) for name, target in self.bookmarks.items()
                           if target == node_id)
        return Planned(result, changes)

    def plan_delete(self, node_id: str, mode: str = "cascade") -> Planned:
        """Delete the node (``cascade``: with its subtree; ``reparent``: its children move
        up to its parent, where it stood). The result is its parent."""
        if mode not in DELETE_MODES:
            raise DeleteModeError(f"unknown delete mode {mode!r}: use cascade or reparent")
        node = self.node(node_id)
        if node.parent is None:
            raise RootOperationError(f"cannot delete root {node_id!r}")
        changes: list[Change] = []
        if mode == "cascade":
            removed = [*self.descendants(node_id), node_id]
        else:
            removed = [node_id]
            index = self.nodes[node.parent].children.index(node_id)
            changes.extend(MoveNode(child, node.parent, index + 1 + i)
                           for i, child in enumerate(node.children))
            # A child that continued the deleted node's text continues nothing now: it is
            # a message of its own under its new parent.
            changes.extend(SetContent(child, list(self.nodes[child].content), continues=False)
                           for child in node.children if self.nodes[child].continues)
        gone = set(removed)
        changes.extend(DropBookmark(name) for name, target in self.bookmarks.items()
                       if target in gone)
        changes.extend(RemoveNode(n) for n in removed)
        return Planned(node.parent, changes)

    def plan_bookmark(self, name: str, node_id: str) -> Planned:
        """Point bookmark ``name`` at ``node_id`` (creating or moving it)."""
        _check_bookmark_name(name)
        self.node(node_id)
        if self.bookmarks.get(name) == node_id:
            return Planned(node_id, [])
        return Planned(node_id, [SetBookmark(name, node_id)])

    def plan_remove_bookmark(self, name: str) -> Planned:
        """Remove bookmark ``name``; the result is the node it pointed at."""
        target = self.bookmarks.get(name)
        if target is None:
            raise BookmarkError(f"no bookmark named {name!r}")
        return Planned(target, [DropBookmark(name)])

    def _matching_child(self, children: Sequence[Node], role: str,
                        blocks: Sequence[ContentBlock], continues: bool = False) -> str | None:
        """The first of ``children`` prefix matching would reuse: the same message key and
        the same continuation flag."""
        wanted = message_key(role, blocks)
        digest: bytes | None = None
        for child in children:
            if child.continues != continues:
                continue
            content = child.content
            if isinstance(content, StoredContent):  # not read: its key's digest is kept
                digest = digest or key_digest(wanted)
                if content.digest == digest:
                    return child.id
            elif message_key(child.role, content) == wanted:
                return child.id
        return None

    # --- applying --------------------------------------------------------------------------

    def apply(self, changes: Sequence[Change]) -> None:
        """Apply recorded changes, in order (in place; the changes are not kept)."""
        for change in changes:
            if isinstance(change, AddNode):
                self._add(change)
            elif isinstance(change, MoveNode):
                node = self.node(change.id)
                self._detach(node)
                self.nodes[node.id] = msgspec.structs.replace(node, parent=change.parent)
                self._attach(change.parent, node.id, change.index)
            elif isinstance(change, SetContent):
                node = self.node(change.id)
                continues = node.continues if change.continues is None else change.continues
                self.nodes[node.id] = msgspec.structs.replace(
                    node, content=tuple(change.content), continues=continues)
            elif isinstance(change, RemoveNode):
                node = self.node(change.id)
                if node.children:
                    raise ForestError(f"cannot remove {node.id!r}: it still has children")
                self._detach(node)
                del self.nodes[node.id]
            elif isinstance(change, SetBookmark):
                self.node(change.node)
                self.bookmarks[change.name] = change.node
            else:
                self.bookmarks.pop(change.name, None)

    def _add(self, change: AddNode) -> None:
        if change.id in self.nodes:
            raise ForestError(f"node {change.id!r} exists already")
        self.nodes[change.id] = Node(change.id, change.parent, change.role,
                                     tuple(change.content), continues=change.continues)
        self.created += 1
        if change.parent is None:
            _insert(self.roots, change.id, change.index)
        else:
            self._attach(change.parent, change.id, change.index)

    def _attach(self, parent_id: str, child: str, index: int) -> None:
        parent = self.node(parent_id)
        children = list(parent.children)
        _insert(children, child, index)
        self.nodes[parent_id] = msgspec.structs.replace(parent, children=tuple(children))

    def _detach(self, node: Node) -> None:
        if node.parent is None:
            self.roots.remove(node.id)
            return
        parent = self.node(node.parent)
        children = tuple(c for c in parent.children if c != node.id)
        self.nodes[parent.id] = msgspec.structs.replace(parent, children=children)


# --- helpers -------------------------------------------------------------------------------


def message_key(role: str, content: Sequence[ContentBlock]) -> tuple[Any, ...]:
    """What prefix matching compares: the role and each block, with text trimmed, blank
    text blocks left out and tool inputs as canonical (key-sorted) JSON."""
    parts: list[tuple[Any, ...]] = []
    for block in content:
        if isinstance(block, TextBlock):
            if block.text.strip():
                parts.append(("text", block.text.strip()))
        elif isinstance(block, ToolUseBlock):
            parts.append(("tool_use", block.id, block.name,
                          msgspec.json.encode(block.input, order="sorted")))
        else:
            parts.append(("tool_result", block.tool_use_id, block.content.strip(),
                          block.is_error))
    return (role, tuple(parts))


def key_digest(key: tuple[Any, ...]) -> bytes:
    """16 bytes standing for a :func:`message_key` (what a tree record keeps of a message
    whose content it keeps apart): equal keys give equal digests, and different keys
    different ones but with a chance of 2**-128."""
    return hashlib.blake2b(msgspec.msgpack.encode(key), digest_size=16).digest()


def message_digest(role: str, content: Sequence[ContentBlock]) -> bytes:
    """The :func:`key_digest` of a message (the one kept, for content not read yet)."""
    if isinstance(content, StoredContent):
        return content.digest
    return key_digest(message_key(role, content))


def same_message(node: Node, role: str, content: Sequence[ContentBlock]) -> bool:
    """Prefix matching would take ``node`` for this message (flags aside), compared
    without reading a content kept apart."""
    if isinstance(node.content, StoredContent):
        return node.content.digest == message_digest(role, content)
    return message_key(node.role, node.content) == message_key(role, content)


def _clean(content: Sequence[ContentBlock]) -> list[ContentBlock]:
    """The blocks without blank text blocks (the Messages API refuses them)."""
    if isinstance(content, str | bytes) or not isinstance(content, Sequence):
        raise InvalidContentError(f"content is a list of content blocks, not {content!r}")
    out: list[ContentBlock] = []
    for block in content:
        if not isinstance(block, TextBlock | ToolUseBlock | ToolResultBlock):
            raise InvalidContentError(f"not a content block: {block!r}")
        if isinstance(block, TextBlock) and not block.text.strip():
            continue
        out.append(block)
    return out


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise InvalidRoleError(
            f"a message's role is user or assistant, not {role!r} (roots hold the system "
            "prompt: root_for)")


def _check_blocks(role: str, blocks: Sequence[ContentBlock]) -> None:
    for block in blocks:
        if isinstance(block, ToolUseBlock) and role != "assistant":
            raise InvalidContentError(f"a {role} message cannot hold a tool_use block")
        if isinstance(block, ToolResultBlock) and role != "user":
            raise InvalidContentError(f"a {role} message cannot hold a tool_result block")


def _check_bookmark_name(name: str) -> None:
    if not isinstance(name, str) or not name.strip():
        raise BookmarkError(f"a bookmark needs a name, not {name!r}")


def _only_text(blocks: Sequence[ContentBlock]) -> bool:
    """``blocks`` are text blocks, at least one (kept apart: as its record says)."""
    if isinstance(blocks, StoredContent):
        return blocks.text_only
    return bool(blocks) and all(isinstance(b, TextBlock) for b in blocks)


def _text_only(node: Node, operation: str) -> str:
    """The node's text, if it holds only text blocks."""
    if any(isinstance(b, ToolUseBlock) for b in node.content):
        if operation == "edit":
            raise ToolUseEditError(f"cannot edit {node.id!r}: it holds tool_use content")
        raise NotTextError(f"cannot {operation} {node.id!r}: it holds tool_use content")
    if any(isinstance(b, ToolResultBlock) for b in node.content):
        raise NotTextError(f"cannot {operation} {node.id!r}: it holds a tool result")
    if not node.content:
        raise NotTextError(f"cannot {operation} {node.id!r}: it holds no text")
    return node.text


def _new_text_blocks(new_content: str | Sequence[ContentBlock]) -> list[ContentBlock]:
    """An edit's new content as text blocks (blank ones dropped), or a refusal."""
    raw: Sequence[ContentBlock] = (
        [TextBlock(new_content)] if isinstance(new_content, str) else new_content)
    blocks = _clean(raw)
    if any(isinstance(b, ToolUseBlock) for b in blocks):
        raise ToolUseEditError("an edit cannot introduce tool_use content")
    if any(isinstance(b, ToolResultBlock) for b in blocks):
        raise NotTextError("an edit's new content is text; it cannot hold a tool result")
    if not blocks:
        raise EmptyEditError("an edit needs some text: the new content is empty")
    return blocks


def _cut(blocks: Sequence[ContentBlock], position: int) -> tuple[list[ContentBlock],
                                                                 list[ContentBlock]]:
    """Text blocks cut at ``position`` of their joined text, block boundaries kept and
    blank pieces dropped."""
    left: list[ContentBlock] = []
    right: list[ContentBlock] = []
    offset = 0
    for block in _texts(blocks):
        end = offset + len(block.text)
        if end <= position:
            left.append(block)
        elif offset >= position:
            right.append(block)
        else:
            left.append(TextBlock(block.text[: position - offset]))
            right.append(TextBlock(block.text[position - offset :]))
        offset = end
    return _clean(left), _clean(right)


def _texts(blocks: Sequence[ContentBlock]) -> Iterator[TextBlock]:
    for block in blocks:
        assert isinstance(block, TextBlock)
        yield block


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _insert(items: list[str], item: str, index: int) -> None:
    if index < 0 or index >= len(items):
        items.append(item)
    else:
        items.insert(index, item)


# --- the aggregate -------------------------------------------------------------------------


class ForestSnapshotState(msgspec.Struct, kw_only=True):
    """Every attribute of a :class:`Forest`, typed: what its snapshots keep."""

    _created_on: dt.datetime
    _modified_on: dt.datetime
    session_id: str
    state: ForestState


class Forest(Aggregate):
    """One conversation tree. Each operation records one event (none when it changes
    nothing); every event carries the changes it made, which replay applies. Sessions
    stored before sessions kept their own tree have one (see the module's docstring)."""

    @staticmethod
    def create_id(session_id: str, **_: Any) -> uuid.UUID:
        return forest_uuid(session_id)

    def trigger_event(self, event_class: Any, **kwargs: Any) -> None:
        stamped_trigger(self, event_class, **kwargs)  # a decision's time, if it gave one

    class Snapshot(TypedSnapshot):
        state: ForestSnapshotState

    class Started(Aggregate.Created):
        """Declared explicitly (as every event here) so fields added later get defaults."""

        session_id: str

    @event(Started)
    def __init__(self, session_id: str):
        self.session_id = session_id
        self.state = ForestState(forest_id=str(self.id))

    class RootCreated(Aggregate.Event):
        system_prompt: str
        node_id: str
        changes: list[Change]

    class Appended(Aggregate.Event):
        parent: str
        role: str
        node_id: str
        changes: list[Change]

    class Split(Aggregate.Event):
        node_id: str
        position: int
        left_id: str
        changes: list[Change]

    class Edited(Aggregate.Event):
        node_id: str
        result_id: str
        changes: list[Change]

    class Deleted(Aggregate.Event):
        node_id: str
        mode: str
        changes: list[Change]

    class Bookmarked(Aggregate.Event):
        name: str
        node_id: str
        changes: list[Change]

    class BookmarkRemoved(Aggregate.Event):
        name: str
        changes: list[Change]

    # --- commands --------------------------------------------------------------------------

    def root_for(self, system_prompt: str) -> str:
        """The root for ``system_prompt``: an existing one (same text, trimmed) or a new one."""
        node_id, changes = self.state.plan_root(system_prompt)
        if changes:
            self._root_created(system_prompt=system_prompt, node_id=node_id, changes=changes)
        return node_id

    def append(self, parent: str, role: str, content: Sequence[ContentBlock],
               continues: bool = False) -> str:
        """Append a message under ``parent``; returns its node (an identical existing child
        with the same continuation flag is reused; a message with no content leaves you
        at ``parent``). ``continues``: its text goes on from the parent's (see
        :meth:`ForestState.can_continue`; refused elsewhere)."""
        node_id, changes = self.state.plan_append(parent, role, content, continues)
        if changes:
            self._appended(parent=parent, role=role, node_id=node_id, changes=changes)
        return node_id

    def split(self, node_id: str, position: int) -> str:
        """Split the node's text at ``position``; returns the new node holding the left
        part (``node_id`` keeps the right part and the children)."""
        left_id, changes = self.state.plan_split(node_id, position)
        self._split(node_id=node_id, position=position, left_id=left_id, changes=changes)
        return left_id

    def edit(self, node_id: str, new_content: str | Sequence[ContentBlock]) -> str:
        """Edit the node's text; returns the node that now ends the edited message (the
        rules: :meth:`ForestState.plan_edit`; an in-place edit that would duplicate a
        sibling raises :class:`DuplicateMessageError`)."""
        result_id, changes = self.state.plan_edit(node_id, new_content)
        if changes:
            self._edited(node_id=node_id, result_id=result_id, changes=changes)
        return result_id

    def delete(self, node_id: str, mode: str = "cascade") -> str:
        """Delete the node (``cascade`` or ``reparent``); returns its parent."""
        parent, changes = self.state.plan_delete(node_id, mode)
        self._deleted(node_id=node_id, mode=mode, changes=changes)
        return parent

    def bookmark(self, name: str, node_id: str) -> None:
        """Point bookmark ``name`` at ``node_id``."""
        _, changes = self.state.plan_bookmark(name, node_id)
        if changes:
            self._bookmarked(name=name, node_id=node_id, changes=changes)

    def remove_bookmark(self, name: str) -> None:
        """Remove bookmark ``name``."""
        _, changes = self.state.plan_remove_bookmark(name)
        self._bookmark_removed(name=name, changes=changes)

    # --- events (their bodies apply them) --------------------------------------------------

    @event(RootCreated)
    def _root_created(self, system_prompt: str, node_id: str, changes: list[Change]) -> None:
        self.state.apply(changes)

    @event(Appended)
    def _appended(self, parent: str, role: str, node_id: str, changes: list[Change]) -> None:
        self.state.apply(changes)

    @event(Split)
    def _split(self, node_id: str, position: int, left_id: str, changes: list[Change]) -> None:
        self.state.apply(changes)

    @event(Edited)
    def _edited(self, node_id: str, result_id: str, changes: list[Change]) -> None:
        self.state.apply(changes)

    @event(Deleted)
    def _deleted(self, node_id: str, mode: str, changes: list[Change]) -> None:
        self.state.apply(changes)

    @event(Bookmarked)
    def _bookmarked(self, name: str, node_id: str, changes: list[Change]) -> None:
        self.state.apply(changes)

    @event(BookmarkRemoved)
    def _bookmark_removed(self, name: str, changes: list[Change]) -> None:
        self.state.apply(changes)

    # --- queries ---------------------------------------------------------------------------

    def node(self, node_id: str) -> Node:
        """The node with id ``node_id``."""
        return self.state.node(node_id)

    def path(self, node_id: str) -> list[Node]:
        """The nodes from the root down to ``node_id``, both included."""
        return self.state.path(node_id)

    def children(self, node_id: str) -> list[Node]:
        """The node's children, in order."""
        return self.state.children(node_id)

    def siblings(self, node_id: str) -> list[Node]:
        """The other children of the node's parent, in order ([] for a root)."""
        return self.state.siblings(node_id)

    def roots(self) -> list[Node]:
        """The roots, oldest first."""
        return self.state.root_nodes()

    @property
    def bookmarks(self) -> dict[str, str]:
        """Bookmark names and the nodes they point at (a copy)."""
        return dict(self.state.bookmarks)
