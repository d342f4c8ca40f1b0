"""A session's conversation tree, derived from its history: the tree and the session's
place on it (:class:`Conversation`), and the messages that make up a history (:class:`Turn`).

The session's history (what the model is sent) is mirrored into a tree of messages
(:class:`events.forest.ForestState`, seed 003's Forest): each complete message appended
once, with prefix matching, under the root of the system prompt it was sent with; the
node of the last message is the session's *cursor*. Rewriting the history (a compaction's
summary, ``/clear``, a fork) is mirrored as a new path from the root, which prefix
matching shares with the old one as far as they agree. Moving the session (``tether
branch``, ``tether edit``) goes the other way: the path to a node becomes the history.

The Session aggregate keeps its conversation here and changes it only as it applies its
own events, so the conversation is recorded once (the history's events) and the tree is
derived from it: the same events give the same tree, node ids included (they are minted
by counting, :func:`events.forest.node_id_for`). What the history does not hold (the
user's edits, splits, deletes and bookmarks, the other completions of a generation) is
recorded by the session's own events as the changes they made.

A message the tree holds in two parts (a split, or an edit that kept a common prefix)
comes back as two Turns, the second with ``continues`` set: its text goes on from the
first's without a break (:func:`actors.model.context.coalesce` joins them so, and mirroring
such a history again finds the same two nodes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import msgspec

from tether.events.forest import Change, ForestState, forest_uuid, same_message
from tether.events.messages import ContentBlock, ToolResultBlock, ToolUseBlock

__all__ = ["Conversation", "Placement", "Turn", "answers", "complete_messages", "locate"]


class Turn(msgspec.Struct, omit_defaults=True, gc=False):
    """One model-visible message: ``role`` is ``user`` or ``assistant``.

    ``continues``: its text goes on from the previous message's without a break (the
    conversation tree holds the message in two parts, after an edit or a split): the
    context sends the two as one text, joined with nothing between. A default (and left
    out of the encoding when false), so Turns stored before it existed decode as they
    were, and encode as they did. Not tracked by the garbage collector (``gc=False``: it
    holds no reference back to itself), nor are the blocks: a long history's load made
    collections over them all."""

    role: str
    content: list[ContentBlock]
    continues: bool = False

    def copy(self) -> Turn:
        """The same message with its own content list (the flag kept)."""
        return Turn(self.role, list(self.content), self.continues)


class Placement(NamedTuple):
    """A message of the history now at ``node`` under ``parent`` (new there, or an
    identical node prefix matching reused on a new path)."""

    node: str
    parent: str
    turn: Turn


class Conversation(msgspec.Struct, kw_only=True, dict=True):
    """A tree of messages and where one session stands on it.

    ``mirrored`` counts the leading messages of the history mirrored under the root of
    ``prompt``; ``prompt`` None means the next :meth:`sync` walks the whole history again
    from the root (after the history was rewritten). What syncs placed is gathered, not
    kept (a snapshot leaves it out), until :meth:`take_placed` (the session's core
    publishes it)."""

    tree: ForestState
    cursor: str = ""
    mirrored: int = 0
    prompt: str | None = None

    @classmethod
    def of_session(cls, session_id: str) -> Conversation:
        """An empty conversation; its node ids are those a session's Forest had (the same
        namespace), so a tree imported from one keeps counting where it stopped."""
        return cls(tree=ForestState(forest_id=str(forest_uuid(session_id))))

    def sync(self, system_prompt: str, history: Sequence[Turn],
             limit: int | None = None) -> list[Placement]:
        """Mirror the complete messages of ``history`` (:func:`complete_messages`; the
        first ``limit`` at most, when given) not mirrored yet, under the root of
        ``system_prompt``; returns what it placed (also added to ``placed``). With no
        system prompt yet nothing is mirrored: the root a message hangs under is the
        prompt it is sent with. A system prompt other
        than the last sync's walks the whole history again under its root (cheap where
        the tree has it: prefix matching reuses every identical node).

        A message once mirrored is not mirrored again until the history is rewritten
        (:meth:`rewritten`), so only complete messages are counted. A continuation Turn is
        mirrored as a continuation where its parent can be continued
        (:meth:`ForestState.can_continue`), else as a plain message (as
        :func:`actors.model.context.coalesce` then sends it)."""
        placed: list[Placement] = []
        if not system_prompt:
            return placed
        complete = complete_messages(history)
        limit = complete if limit is None else min(limit, complete)
        if system_prompt != self.prompt or self.mirrored > len(history) or not self.cursor:
            self.prompt, self.mirrored = system_prompt, 0
            if not limit:  # nothing to mirror: no root is made for an empty conversation
                self.cursor = ""
                return placed
            self.cursor = self.add_root(system_prompt)
        for turn in history[self.mirrored:limit]:
            parent = self.cursor
            self.cursor = self.append(parent, turn.role, turn.content,
                                      _continues(self.tree, parent, turn))
            if self.cursor != parent:
                placed.append(Placement(self.cursor, parent, turn))
        self.mirrored = max(self.mirrored, limit)
        self._gathered().extend(placed)
        return placed

    def take_placed(self) -> list[Placement]:
        """What syncs placed since the last call (and forget it)."""
        return self.__dict__.pop("placed", [])

    def _gathered(self) -> list[Placement]:
        gathered: list[Placement] = self.__dict__.setdefault("placed", [])
        return gathered

    def rewritten(self) -> None:
        """The history was replaced (compacted, cleared, forked): the next sync walks it
        again from the root."""
        self.prompt, self.mirrored, self.cursor = None, 0, ""

    def stand_at(self, node_id: str, system_prompt: str, history: Sequence[Turn]) -> str:
        """The session now stands at ``node_id`` (a branch, an edit) with ``history``, the
        path to it (as :func:`actors.conversation.history_at` gives it). The cursor is that
        very node, not one found again by prefix matching (which could pick an identical
        sibling). Returns the cursor.

        When ``node_id`` hangs under another root than ``system_prompt``'s (a message
        sent with an earlier system prompt), the next messages are sent with
        ``system_prompt``: the history is then mirrored under its root, as :meth:`sync`
        does. Raises ValueError when ``history`` is not the path to ``node_id`` (its
        messages compared as prefix matching does), ForestError for an unknown node."""
        path = self.tree.path(node_id)
        if len(path) - 1 != len(history) or any(
            not same_message(node, turn.role, turn.content)
            for node, turn in zip(path[1:], history, strict=False)
        ):
            raise ValueError(f"that history is not the path to node {node_id}")
        if self.tree.find_root(system_prompt) != path[0].id or not history:
            self.rewritten()
            self.sync(system_prompt, history)
            return self.cursor
        self.cursor, self.prompt, self.mirrored = node_id, system_prompt, len(history)
        return self.cursor

    def add_root(self, system_prompt: str) -> str:
        """The root for ``system_prompt``, made when the tree has none."""
        node_id, changes = self.tree.plan_root(system_prompt)
        self.tree.apply(changes)
        return node_id

    def append(self, parent: str, role: str, content: Sequence[ContentBlock],
               continues: bool = False) -> str:
        """Append a message under ``parent`` with prefix matching (the rules:
        :meth:`ForestState.plan_append`); returns its node."""
        node_id, changes = self.tree.plan_append(parent, role, content, continues)
        self.tree.apply(changes)
        return node_id

    def apply(self, changes: Sequence[Change]) -> None:
        """Apply changes an operation on the tree recorded (an edit, a split, a delete, a
        bookmark)."""
        self.tree.apply(changes)


def complete_messages(history: Sequence[Turn]) -> int:
    """How many leading messages of ``history`` are complete: all of them, except a
    trailing user message of tool results that does not yet answer every tool_use of the
    assistant message before it (the session adds the results to that message one by
    one, as the calls end)."""
    if len(history) >= 2:
        before, last = history[-2], history[-1]
        if before.role == "assistant" and last.role == "user" and any(
                isinstance(b, ToolResultBlock) for b in last.content):
            unanswered, _ = answers(before.content, last.content)
            if unanswered:
                return len(history) - 1
    return len(history)


def answers(before: Sequence[ContentBlock], after: Sequence[ContentBlock]
            ) -> tuple[set[str], set[str]]:
    """(the calls of ``before`` that ``after`` does not answer, the results in ``after``
    of calls ``before`` did not make)."""
    calls = {b.id for b in before if isinstance(b, ToolUseBlock)}
    answered = {b.tool_use_id for b in after if isinstance(b, ToolResultBlock)}
    return calls - answered, answered - calls


def locate(tree: ForestState, system_prompt: str, history: Sequence[Turn]) -> str:
    """The node a session with ``history`` under ``system_prompt`` stands at, found
    without changing the tree; ``""`` when the tree does not hold that path (yet)."""
    node = tree.find_root(system_prompt) if history else None
    if node is None:
        return ""
    for turn in history:
        node, changes = tree.plan_append(node, turn.role, turn.content,
                                         _continues(tree, node, turn))
        if changes:
            return ""
    return node


def _continues(tree: ForestState, parent: str, turn: Turn) -> bool:
    """The continuation flag ``turn`` is mirrored with under ``parent``."""
    return turn.continues and tree.can_continue(parent, turn.role, turn.content)
