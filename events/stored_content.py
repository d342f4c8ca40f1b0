"""A tree node's content kept in a content record and read when it is first needed.

A tree read from its record (:mod:`events.tree_records`) holds, for each message below a
root, a :class:`StoredContent` in place of the content blocks: what prefix matching and
continuations ask of a message (its key's digest, whether it is text only) without the
blocks, and where the blocks are (the content record at session version ``chunk``, at
``place`` in it). Anything that looks at the blocks (iterating, indexing, ``len``,
comparing) reads them once, through the :class:`ContentReader` that made it, and keeps
them.

Contract: a StoredContent stands for exactly one tuple of content blocks, the one the
node held when its record was written; it compares equal to that tuple (and to another
StoredContent standing for an equal one). Its ``digest`` is
:func:`events.forest.key_digest` of the message key of that content under ``role`` (the
node's), ``text_only`` whether it
is text blocks only (at least one), ``exact`` the :func:`blocks_sum` of the blocks
themselves (what tells them from another message of the same key, which differs in
whitespace). It is never encoded: msgspec refuses it, so a tree
not read in full can never be stored silently wrong (:func:`events.tree_records.in_full`
reads it whole first).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol, overload

import msgspec

from tether.events.messages import ContentBlock

__all__ = ["ContentReader", "StoredContent", "blocks_sum", "read_contents"]


def blocks_sum(blocks: Sequence[ContentBlock]) -> bytes:
    """8 bytes standing for exactly these blocks (whitespace and all): what a tree record
    keeps to check that a content record holds a message's very blocks (the key's digest
    cannot tell two messages apart that prefix matching takes for one)."""
    return hashlib.blake2b(msgspec.msgpack.encode(list(blocks)), digest_size=8).digest()


class ContentReader(Protocol):
    """Reads the content records a tree record points at."""

    def content(self, stored: StoredContent) -> tuple[ContentBlock, ...]:
        """The blocks ``stored`` stands for (raises LookupError if they cannot be had)."""

    def prefetch(self, chunks: set[int]) -> None:
        """Read these content records at once (fewer reads when many are needed)."""


class StoredContent(Sequence[ContentBlock]):
    """A node's content blocks, kept in the content record at session version ``chunk``
    (at index ``place``), read on first use (see the module's docstring)."""

    __slots__ = ("_blocks", "chunk", "digest", "exact", "node", "place", "reader", "role",
                 "text_only")

    def __init__(self, role: str, digest: bytes, text_only: bool, chunk: int, place: int,
                 node: str, reader: ContentReader | None,
                 blocks: tuple[ContentBlock, ...] | None = None, exact: bytes = b"") -> None:
        self.role = role
        self.exact = exact
        self.digest = digest
        self.text_only = text_only
        self.chunk = chunk
        self.place = place
        self.node = node
        self.reader = reader
        self._blocks = blocks

    @property
    def in_hand(self) -> bool:
        """Whether the blocks were read."""
        return self._blocks is not None

    @property
    def blocks(self) -> tuple[ContentBlock, ...]:
        """The blocks (read on first use)."""
        blocks = self._blocks
        if blocks is None:
            if self.reader is None:
                raise LookupError(f"the content of node {self.node} is kept apart and "
                                  "nothing was given to read it")
            blocks = self._blocks = self.reader.content(self)
        return blocks

    @overload
    def __getitem__(self, index: int) -> ContentBlock: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[ContentBlock]: ...

    def __getitem__(self, index: int | slice) -> ContentBlock | Sequence[ContentBlock]:
        return self.blocks[index]

    def __len__(self) -> int:
        return len(self.blocks)

    def __iter__(self) -> Iterator[ContentBlock]:
        return iter(self.blocks)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StoredContent):
            return self.blocks == other.blocks
        if isinstance(other, tuple):
            return self.blocks == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.blocks)

    def __repr__(self) -> str:
        if self._blocks is not None:
            return repr(self._blocks)
        return f"StoredContent(chunk={self.chunk}, place={self.place}, node={self.node!r})"


def read_contents(contents: Iterable[Any]) -> None:
    """Read the stored contents among ``contents`` not read yet, each reader's records at
    once (a tree command about to look at many nodes calls this first)."""
    wanted: dict[int, tuple[ContentReader, set[int]]] = {}
    for content in contents:
        if isinstance(content, StoredContent) and not content.in_hand and content.reader:
            entry = wanted.setdefault(id(content.reader), (content.reader, set()))
            entry[1].add(content.chunk)
    for reader, chunks in wanted.values():
        reader.prefetch(chunks)
