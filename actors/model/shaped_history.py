"""A history shaped for a model call, its settled part remembered from the call before.

Every model call sends the session's whole history shaped: stale tool results summarized
(:mod:`actors.model.stale_results`), same-role neighbours coalesced, in Messages API form,
with its token estimate (:func:`actors.model.context.build_request`). Shaping is linear in
the history, and a history only grows between one call and the next, so the older part
is shaped once and remembered.

A *settled cut* is a place in the history before which the shape can no longer change as
messages are added:

* the message after it starts a turn (:func:`~actors.model.turns.starts_turn`) and the one
  before it is the assistant's, so coalescing never joins messages across it;
* every message before it is at least ``keep_turns`` turns old, so its tool results are
  summarized already and stay so.

The shape of the messages before the last settled cut is remembered with its token
estimate. A later history that holds those very messages (the same objects) first, and
still has ``keep_turns`` turn starts after them, is shaped from the cut on only. Pure in
effect: :func:`shaped_history` gives what shaping the whole history gives (checked against
it on random histories by ``tests/actors/test_shaped_history.py``).
"""

from __future__ import annotations

import operator
import threading
from collections import OrderedDict
from typing import Any, NamedTuple

import msgspec

from tether.actors.model.coalesce import coalesce
from tether.actors.model.stale_results import summarize_stale
from tether.actors.model.tokens import estimate_message_tokens
from tether.actors.model.turns import role_of, starts_turn, turn_numbers
from tether.events.session import Turn

__all__ = ["Shaped", "shaped_history"]

MEMO_SESSIONS = 64
"""Histories remembered at most (the least recently used forgotten first)."""


class Shaped(NamedTuple):
    """A history in Messages API form and its estimated tokens."""

    messages: list[dict[str, Any]]
    tokens: int


class _Settled(NamedTuple):
    """The messages before a settled cut (held, so that their identities stay theirs) and
    their shape."""

    history: list[Turn]
    shaped: Shaped


class _Memo:
    """The settled part of the histories shaped last, keyed by their first message's
    identity (a key shared by chance only costs a miss: the whole part is compared by
    identity). Thread-safe: each session builds its requests on its own thread."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[tuple[int, int], _Settled] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, history: list[Turn], keep_turns: int) -> _Settled | None:
        with self._lock:
            settled = self._items.get((id(history[0]), keep_turns))
        if settled is None:
            return None
        cut = len(settled.history)
        if len(history) <= cut or not all(map(operator.is_, settled.history,
                                               history[:cut])):
            return None
        return settled

    def put(self, keep_turns: int, settled: _Settled) -> None:
        key = (id(settled.history[0]), keep_turns)
        with self._lock:
            self._items[key] = settled
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


_MEMO = _Memo(MEMO_SESSIONS)


def shaped_history(history: list[Turn], keep_turns: int) -> Shaped:
    """``history`` shaped for a model call, and its estimated tokens (see the module
    docstring). ``history`` is not changed; the result's messages
    may be shared with earlier results: treat them as read-only."""
    start, head = 0, Shaped([], 0)
    settled = _MEMO.get(history, keep_turns) if history else None
    rest = history
    if settled is not None:
        cut = len(settled.history)
        numbers = turn_numbers(history[cut:])
        # Counted from the cut: the first message starts turn 1, so the messages before
        # the cut stay at least keep_turns turns old while the last is turn keep_turns on.
        if starts_turn(history[cut]) and numbers[-1] >= keep_turns:
            start, head, rest = cut, settled.shaped, history[cut:]
        else:
            numbers = turn_numbers(history)
    else:
        numbers = turn_numbers(history)
    current = numbers[-1] if numbers else 0
    cut = _last_cut(rest, numbers, current, keep_turns)
    middle = _shape(rest[:cut], numbers[:cut], current, keep_turns)
    tail = _shape(rest[cut:], numbers[cut:], current, keep_turns)
    if cut:
        head = Shaped(head.messages + middle.messages, head.tokens + middle.tokens)
        _MEMO.put(keep_turns, _Settled(history[:start + cut], head))
    return Shaped(head.messages + tail.messages, head.tokens + tail.tokens)


def _last_cut(messages: list[Turn], numbers: list[int], current: int,
              keep_turns: int) -> int:
    """The last settled cut in ``messages`` (an index from 1), or 0 when there is none."""
    for i in range(len(messages) - 1, 0, -1):
        if numbers[i - 1] > current - keep_turns:
            continue
        if role_of(messages[i - 1]) == "assistant" and starts_turn(messages[i]):
            return i
    return 0


def _shape(messages: list[Turn], numbers: list[int], current: int, keep_turns: int
           ) -> Shaped:
    shaped = coalesce(summarize_stale(messages, numbers, current, keep_turns))
    api = [{"role": t.role, "content": [msgspec.to_builtins(b) for b in t.content]}
           for t in shaped]
    return Shaped(api, sum(estimate_message_tokens(m) for m in api))
