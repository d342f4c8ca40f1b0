"""A session's conversation tree kept apart from its snapshots: a record of the tree's
structure, and content records holding each message's blocks once, read when needed.

A session's snapshot points at the record of its tree (``_tree_at``, see
:mod:`events.session`). That record, a :class:`TreeRecord` under :func:`tree_uuid`, holds
the tree without the messages' blocks: each node's id, parent, children, role and flags,
the digest of its message key (:func:`events.forest.key_digest`, all prefix matching
compares), a sum of its very blocks (:func:`events.stored_content.blocks_sum`, what a
content record read is checked against) and where its blocks are: the
:class:`TreeContents` record (under :func:`contents_uuid`) written at session version
``chunk``, at index ``place``. Roots' blocks (the system prompts, which ``find_root``
reads) are in the record itself.

Writing is incremental: a record points at the content records earlier ones wrote for
every node whose blocks are unchanged since it was read, and one new content record (at
the record's version, in the same ``put``) holds the blocks of the nodes added or changed
since (:func:`record_tree`). A content record is never rewritten nor removed, so a tree
read from an older record can read its blocks whenever it needs them.

Reading is lazy (:func:`read_tree`): the record's columns are decoded, and a node is made
from them only when it is looked at (:class:`StoredNodes`), its blocks only when they
are (:class:`events.stored_content.StoredContent`, through a :class:`ContentSource`).
A content record that is missing, does not decode or does not hold what the tree record
says (its sum, and its key's digest) is not an answer: the source gets the tree from the
session's events up to the record's version instead (the application logs a WARNING),
and takes the blocks from there.
"""

from __future__ import annotations

import itertools
import sys
import threading
import uuid
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

from eventsourcing.domain import DomainEvent

from tether.events.conversation import Conversation
from tether.events.forest import ForestState, Node, key_digest, message_digest, message_key
from tether.events.messages import ContentBlock, TextBlock
from tether.events.stored_content import StoredContent, blocks_sum, read_contents

__all__ = ["KEY_FORMAT", "ContentSource", "StoredNodes", "TreeContents", "TreeRecord",
           "TreeRecordError", "contents_uuid", "in_full", "read_tree", "record_tree",
           "tree_uuid"]

KEY_FORMAT = 1
"""How a record's digests are made (:func:`events.forest.key_digest` of
:func:`events.forest.message_key`); a record made otherwise is not read (the events are)."""

_CONTINUES, _TEXT_ONLY = 1, 2
_DIGEST, _SUM = 16, 8


def tree_uuid(session: uuid.UUID) -> uuid.UUID:
    """The id the tree records of the session with aggregate id ``session`` are stored
    under (:class:`TreeRecord`, and :class:`events.session.TreeSnapshot` before it)."""
    return uuid.uuid5(session, "tree")


def contents_uuid(session: uuid.UUID) -> uuid.UUID:
    """The id the content records of that session's tree are stored under
    (:class:`TreeContents`)."""
    return uuid.uuid5(session, "tree contents")


class TreeRecordError(ValueError):
    """A tree record this release cannot read (another key format, columns that do not
    agree): a cache passed over, as one that does not decode."""


@dataclass(frozen=True)
class TreeRecord(DomainEvent):
    """A session's conversation tree at session version ``originator_version``, without
    the blocks of its messages (see the module's docstring). Per node, in the tree's
    order (``ids``): ``role_of`` (one byte, an index into ``roles``), ``flags`` (one
    byte: 1 continues, 2 text only), ``parents`` (int32, an index into ``ids``, -1 for a
    root), ``counts`` (int32, its children, listed in order node after node in
    ``children``, int32 indexes), ``digests`` (16 bytes), ``sums`` (8 bytes,
    :func:`events.stored_content.blocks_sum` of its blocks), ``chunks`` (int64: the version
    of the content record holding its blocks, 0 for the ``inline`` ones) and ``places``
    (int32: their index there). Integers are little-endian."""

    keys: int
    forest_id: str
    created: int
    roots: list[str]
    bookmarks: dict[str, str]
    cursor: str
    mirrored: int
    prompt: str | None
    ids: list[str]
    roles: list[str]
    role_of: bytes
    flags: bytes
    parents: bytes
    counts: bytes
    children: bytes
    digests: bytes
    sums: bytes
    chunks: bytes
    places: bytes
    inline: list[list[ContentBlock]]


@dataclass(frozen=True)
class TreeContents(DomainEvent):
    """The blocks of the messages a tree record written at ``originator_version`` added
    or changed since the record before (each list one node's, in the order the record
    gives their ``places``)."""

    contents: list[list[ContentBlock]]


def _pack(code: str, values: Sequence[int]) -> bytes:
    packed = array(code, values)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()


def _unpack(code: str, data: bytes, count: int | None) -> array[int]:
    unpacked = array(code)
    try:
        unpacked.frombytes(data)
    except ValueError as exc:
        raise TreeRecordError(f"a column of {len(data)} bytes: {exc}") from exc
    if sys.byteorder == "big":
        unpacked.byteswap()
    if count is not None and len(unpacked) != count:
        raise TreeRecordError(f"a column of {len(unpacked)} values for {count} nodes")
    return unpacked


# --- writing -------------------------------------------------------------------------------


def record_tree(conversation: Conversation, session: uuid.UUID, version: int) -> list[Any]:
    """The records keeping ``conversation`` (the tree of session ``session`` at
    ``version``, mirrored up to date) apart: a :class:`TreeContents` with the blocks of
    the nodes not kept in an earlier content record (none when there are none), then the
    :class:`TreeRecord`. To be put together (one transaction).

    A tree read from a record copies what it did not look at from that record's columns
    (a node not made since was not changed since), so a record costs little more than its
    own size however large the tree's messages."""
    tree = conversation.tree
    nodes = tree.nodes
    ids = list(nodes)
    position = {node_id: i for i, node_id in enumerate(ids)}
    earlier = nodes.earlier(position) if isinstance(nodes, StoredNodes) else None
    columns = _Columns(position, version, earlier.record.roles if earlier else [])
    # Where no node was removed since, the earlier record's nodes keep their indexes, and
    # the runs of them not made since are copied whole.
    same = earlier.remap if earlier is not None and ids[:len(earlier.remap)] == list(
        earlier.record.ids) else []
    i, n = 0, len(ids)
    while i < n:
        node_id = ids[i]
        if earlier is None or dict.__getitem__(nodes, node_id) is not _UNREAD:
            columns.add(nodes[node_id])
            i += 1
            continue
        end = i
        while end < len(same) and dict.__getitem__(nodes, ids[end]) is _UNREAD and (
                earlier.chunks[end]):
            end += 1
        if end > i:
            columns.copy_run(earlier, i, end)
            i = end
        else:
            columns.copy(earlier, node_id)
            i += 1
    timestamp = TreeRecord.create_timestamp()
    record = TreeRecord(
        originator_id=tree_uuid(session), originator_version=version, timestamp=timestamp,
        keys=KEY_FORMAT, forest_id=tree.forest_id, created=tree.created,
        roots=list(tree.roots), bookmarks=dict(tree.bookmarks), cursor=conversation.cursor,
        mirrored=conversation.mirrored, prompt=conversation.prompt, ids=ids,
        roles=list(columns.roles), role_of=bytes(columns.role_of),
        flags=bytes(columns.flags), parents=_pack("i", columns.parents),
        counts=_pack("i", columns.counts), children=_pack("i", columns.children),
        digests=bytes(columns.digests), sums=bytes(columns.sums),
        chunks=_pack("q", columns.chunks),
        places=_pack("i", columns.places), inline=columns.inline)
    if not columns.new:
        return [record]
    return [TreeContents(originator_id=contents_uuid(session), originator_version=version,
                         timestamp=timestamp, contents=columns.new), record]


class _Earlier(NamedTuple):
    """The columns of the record a tree was read from, its node indexes ``remap``-ped to
    the new record's."""

    record: TreeRecord
    positions: dict[str, int]
    remap: list[int]
    parents: array[int]
    counts: array[int]
    children: array[int]
    starts: list[int]
    chunks: array[int]
    places: array[int]


class _Columns:
    """A tree record's columns, node after node."""

    def __init__(self, position: dict[str, int], version: int, roles: list[str]) -> None:
        self.position = position
        self.version = version
        self.roles: dict[str, int] = {role: i for i, role in enumerate(roles)}
        self.role_of = bytearray()
        self.flags = bytearray()
        self.digests = bytearray()
        self.sums = bytearray()
        self.parents: list[int] = []
        self.counts: list[int] = []
        self.children: list[int] = []
        self.chunks: list[int] = []
        self.places: list[int] = []
        self.inline: list[list[ContentBlock]] = []
        self.new: list[list[ContentBlock]] = []

    def _role(self, role: str) -> int:
        index = self.roles.setdefault(role, len(self.roles))
        if index > 255:
            raise TreeRecordError(f"{len(self.roles)} roles do not fit a byte each")
        return index

    def add(self, node: Node) -> None:
        """A node as it stands (its blocks kept in the new content record unless an
        earlier one holds them)."""
        position, content = self.position, node.content
        self.role_of.append(self._role(node.role))
        self.parents.append(-1 if node.parent is None else position[node.parent])
        self.counts.append(len(node.children))
        self.children.extend(position[child] for child in node.children)
        if isinstance(content, StoredContent) and node.parent is not None:
            digest, text_only, exact = content.digest, content.text_only, content.exact
            self.chunks.append(content.chunk)
            self.places.append(content.place)
        else:
            blocks = list(content)
            digest, exact = message_digest(node.role, blocks), blocks_sum(blocks)
            text_only = bool(blocks) and all(isinstance(b, TextBlock) for b in blocks)
            kept = self.inline if node.parent is None else self.new
            self.chunks.append(0 if node.parent is None else self.version)
            self.places.append(len(kept))
            kept.append(blocks)
        self.flags.append((_CONTINUES if node.continues else 0)
                          | (_TEXT_ONLY if text_only else 0))
        self.digests += digest
        self.sums += exact

    def copy_run(self, earlier: _Earlier, start: int, end: int) -> None:
        """The nodes from ``start`` to ``end`` (not roots), not made since their record
        was read and at the same indexes now: as that record has them (the roles as they
        are numbered there, which this record's start with)."""
        record = earlier.record
        self.role_of += record.role_of[start:end]
        self.parents.extend(earlier.parents[start:end])
        self.counts.extend(earlier.counts[start:end])
        self.children.extend(earlier.children[earlier.starts[start]:earlier.starts[end]])
        self.chunks.extend(earlier.chunks[start:end])
        self.places.extend(earlier.places[start:end])
        self.flags += record.flags[start:end]
        self.digests += record.digests[_DIGEST * start:_DIGEST * end]
        self.sums += record.sums[_SUM * start:_SUM * end]

    def copy(self, earlier: _Earlier, node_id: str) -> None:
        """A node not made since its record was read: as that record has it."""
        record, remap, j = earlier.record, earlier.remap, earlier.positions[node_id]
        self.role_of.append(self._role(record.roles[record.role_of[j]]))
        parent = earlier.parents[j]
        start, count = earlier.starts[j], earlier.counts[j]
        links = [remap[c] for c in earlier.children[start:start + count]]
        if parent >= 0:
            parent = remap[parent]
            links.append(parent)
        if any(link < 0 for link in links):  # (a node not made since cannot lose a link)
            raise TreeRecordError(f"node {node_id} links to a node no longer in the tree")
        self.parents.append(parent)
        self.counts.append(count)
        self.children.extend(links[:count])
        chunk, place = earlier.chunks[j], earlier.places[j]
        if chunk == 0:
            place = len(self.inline)
            self.inline.append(record.inline[earlier.places[j]])
        self.chunks.append(chunk)
        self.places.append(place)
        self.flags.append(record.flags[j])
        self.digests += record.digests[_DIGEST * j:_DIGEST * (j + 1)]
        self.sums += record.sums[_SUM * j:_SUM * (j + 1)]


# --- reading -------------------------------------------------------------------------------


class ContentSource:
    """Reads the blocks the nodes of one tree record point at, and keeps them.

    ``read(low, high)`` gives the content records of versions ``low`` to ``high`` it
    finds (by version), and raises LookupError when they do not decode. ``fallback(why)``
    gives the tree as the events make it at the record's version; it is asked once, the
    first time a content record is missing, does not decode or does not match the digest
    its tree record keeps, and answers every content from then on."""

    def __init__(self, read: Callable[[int, int], Mapping[int, Sequence[Sequence[ContentBlock]]]],
                 fallback: Callable[[str], ForestState]) -> None:
        self._read = read
        self._fallback = fallback
        self._chunks: dict[int, Sequence[Sequence[ContentBlock]]] = {}
        self._absent: dict[int, str] = {}
        self._tree: ForestState | None = None
        self._lock = threading.RLock()

    def prefetch(self, chunks: set[int]) -> None:
        """Read these content records with one query (those not read yet)."""
        with self._lock:
            missing = {c for c in chunks if c not in self._chunks and c not in self._absent}
            if missing and self._tree is None:
                self._fetch(missing)

    def content(self, stored: StoredContent) -> tuple[ContentBlock, ...]:
        """The blocks ``stored`` stands for."""
        with self._lock:
            if self._tree is None:
                why = self._from_record(stored)
                if isinstance(why, tuple):
                    return why
                self._tree = self._fallback(why)
            node = self._tree.nodes.get(stored.node)
            if node is None:
                raise LookupError(f"node {stored.node} is not in the tree its events make "
                                  f"(its record says it is)")
            return tuple(node.content)

    def _from_record(self, stored: StoredContent) -> tuple[ContentBlock, ...] | str:
        """The blocks from their content record, or why they cannot be had from it."""
        if stored.chunk not in self._chunks and stored.chunk not in self._absent:
            self._fetch({stored.chunk})
        chunk = self._chunks.get(stored.chunk)
        if chunk is None:
            return self._absent[stored.chunk]
        if not 0 <= stored.place < len(chunk):
            return (f"the content record at version {stored.chunk} has no message "
                    f"{stored.place}")
        blocks = tuple(chunk[stored.place])
        only_text = bool(blocks) and all(isinstance(b, TextBlock) for b in blocks)
        if blocks_sum(blocks) != stored.exact or key_digest(message_key(
                stored.role, blocks)) != stored.digest or only_text != stored.text_only:
            return (f"message {stored.place} of the content record at version "
                    f"{stored.chunk} is not what the tree record says")
        return blocks

    def _fetch(self, chunks: set[int]) -> None:
        try:
            found = self._read(min(chunks), max(chunks))
        except LookupError as exc:
            self._absent.update(dict.fromkeys(chunks, str(exc)))
            return
        self._chunks.update(found)
        self._absent.update({c: f"no content record at version {c}" for c in chunks
                             if c not in found})


class _Unread:
    """A node not made from its record yet (msgspec cannot encode it)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<unread>"


_UNREAD = _Unread()
_ABSENT = object()


class StoredNodes(dict[str, Node]):
    """A tree's nodes as read from its record: every id is there, in the tree's order,
    each node made from the record's columns the first time it is looked at (its content
    a :class:`StoredContent`, a root's its blocks). Beyond that a plain dict of nodes:
    reading every value (``values``, ``items``, comparing, copying) makes every node."""

    __slots__ = ("_columns", "_index", "_lock", "_reader", "_starts")

    def __init__(self, record: TreeRecord, reader: ContentSource) -> None:
        n = len(record.ids)
        if record.keys != KEY_FORMAT:
            raise TreeRecordError(f"digests of key format {record.keys}, not {KEY_FORMAT}")
        if not (len(record.role_of) == len(record.flags) == n
                and len(record.digests) == _DIGEST * n and len(record.sums) == _SUM * n):
            raise TreeRecordError("the record's columns do not agree")
        counts = _unpack("i", record.counts, n)
        children = _unpack("i", record.children, None)
        if sum(counts) != len(children) or (record.role_of and max(record.role_of) >= len(
                record.roles)):
            raise TreeRecordError("the record's columns do not agree")
        parents, chunks = _unpack("i", record.parents, n), _unpack("q", record.chunks, n)
        places = _unpack("i", record.places, n)
        _check_links(record, parents, counts, children, chunks, places)
        self._columns = (record, parents, counts, children, chunks, places)
        self._reader = reader
        self._index: dict[str, int] | None = None
        self._starts: list[int] = []
        self._lock = threading.RLock()
        super().__init__(dict.fromkeys(record.ids, cast(Node, _UNREAD)))

    def _make(self, node_id: str) -> Node:
        with self._lock:
            found = dict.get(self, node_id, _ABSENT)
            if found is _ABSENT:
                raise KeyError(node_id)
            if found is not _UNREAD:
                return found  # type: ignore[return-value]
            record, parents, counts, children, chunks, places = self._columns
            i = self._indexes()[node_id]
            ids = record.ids
            parent = parents[i]
            role = record.roles[record.role_of[i]]
            flags = record.flags[i]
            content: Sequence[ContentBlock]
            if chunks[i] == 0:
                content = tuple(record.inline[places[i]])
            else:
                content = StoredContent(role, record.digests[_DIGEST * i:_DIGEST * (i + 1)],
                                        bool(flags & _TEXT_ONLY), chunks[i], places[i],
                                        node_id, self._reader,
                                        exact=record.sums[_SUM * i:_SUM * (i + 1)])
            start = self._starts[i]
            # A StoredContent stands for the tuple (see events.stored_content).
            node = Node(node_id, None if parent < 0 else ids[parent], role,
                        cast("tuple[ContentBlock, ...]", content),
                        tuple(ids[c] for c in children[start:start + counts[i]]),
                        bool(flags & _CONTINUES))
            dict.__setitem__(self, node_id, node)
            return node

    def _indexes(self) -> dict[str, int]:
        if self._index is None:
            record, counts = self._columns[0], self._columns[2]
            self._starts = [0, *itertools.accumulate(counts)]
            self._index = {k: i for i, k in enumerate(record.ids)}
        return self._index

    def earlier(self, position: Mapping[str, int]) -> _Earlier:
        """The columns of the record read, for a new record whose nodes are at
        ``position`` (which holds every node not made since)."""
        with self._lock:
            index = self._indexes()
            record, parents, counts, children, chunks, places = self._columns
            return _Earlier(record, index, [position.get(k, -1) for k in record.ids],
                            parents, counts, children, self._starts, chunks, places)

    @property
    def unread(self) -> int:
        """How many nodes were not made yet."""
        return sum(1 for v in dict.values(self) if v is _UNREAD)

    def read_all(self) -> None:
        """Make every node (their contents are still read only when used)."""
        for node_id, value in list(dict.items(self)):
            if value is _UNREAD:
                self._make(node_id)

    def __getitem__(self, node_id: str) -> Node:
        found = dict.__getitem__(self, node_id)
        return self._make(node_id) if found is _UNREAD else found

    def get(self, node_id: str, default: Any = None) -> Any:
        found = dict.get(self, node_id, _ABSENT)
        if found is _ABSENT:
            return default
        return self._make(node_id) if found is _UNREAD else found

    def values(self) -> Any:
        self.read_all()
        return dict.values(self)

    def items(self) -> Any:
        self.read_all()
        return dict.items(self)

    def pop(self, node_id: str, *default: Any) -> Any:
        if node_id not in self:
            return dict.pop(self, node_id, *default)
        found = self[node_id]
        dict.__delitem__(self, node_id)
        return found

    def setdefault(self, node_id: str, default: Any = None) -> Any:
        return self[node_id] if node_id in self else dict.setdefault(self, node_id, default)

    def popitem(self) -> tuple[str, Node]:
        self.read_all()
        return dict.popitem(self)

    def copy(self) -> dict[str, Node]:
        self.read_all()
        return dict(dict.items(self))

    def __eq__(self, other: object) -> bool:
        self.read_all()
        if isinstance(other, StoredNodes):
            other.read_all()
        return dict.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None

    def __repr__(self) -> str:
        self.read_all()
        return dict.__repr__(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (self.copy(),))

    def __iter__(self) -> Iterator[str]:
        return dict.__iter__(self)


def _check_links(record: TreeRecord, parents: array[int], counts: array[int],
                 children: array[int], chunks: array[int], places: array[int]) -> None:
    """Refuse (TreeRecordError) a record whose columns point outside it: a record that
    decodes but was damaged must fall back to the events, not link a wrong node."""
    n = len(record.ids)
    inline = [places[i] for i in range(n) if chunks[i] == 0] if n else []
    known = set(record.ids)
    if n and (min(parents) < -1 or max(parents) >= n or min(counts) < 0
              or min(chunks) < 0 or min(places) < 0):
        raise TreeRecordError("a link or a place of the record is out of its range")
    if children and (min(children) < 0 or max(children) >= n):
        raise TreeRecordError("a child of the record is out of its range")
    if any(place >= len(record.inline) for place in inline) or not known.issuperset(
            [*record.roots, *record.bookmarks.values()]) or (
            record.cursor and record.cursor not in known):
        raise TreeRecordError("the record names a node or a block it does not hold")


def read_tree(record: TreeRecord, reader: ContentSource) -> Conversation:
    """The conversation ``record`` keeps, its nodes and their blocks read as they are
    used. Raises TreeRecordError for a record it cannot read."""
    tree = ForestState(forest_id=record.forest_id, nodes=StoredNodes(record, reader),
                       roots=list(record.roots), bookmarks=dict(record.bookmarks),
                       created=record.created)
    return Conversation(tree=tree, cursor=record.cursor, mirrored=record.mirrored,
                        prompt=record.prompt)


def in_full(conversation: Conversation) -> Conversation:
    """``conversation`` with every node and block read (the same, nothing kept apart: one
    that can be encoded); ``conversation`` itself when it is so already."""
    tree = conversation.tree
    if not isinstance(tree.nodes, StoredNodes) and not any(
            isinstance(n.content, StoredContent) for n in tree.nodes.values()):
        return conversation
    read_contents(n.content for n in tree.nodes.values())
    nodes = {k: Node(n.id, n.parent, n.role, tuple(n.content), n.children, n.continues)
             for k, n in tree.nodes.items()}
    full = ForestState(forest_id=tree.forest_id, nodes=nodes, roots=list(tree.roots),
                       bookmarks=dict(tree.bookmarks), created=tree.created)
    return Conversation(tree=full, cursor=conversation.cursor,
                        mirrored=conversation.mirrored, prompt=conversation.prompt)
