"""Stale tool results: what a model call is sent in place of an old tool result.

A tool result ``KEEP_TURNS`` or more turns old is sent as a one-line summary (its size, line
count, kind of content and, for an error, its first line); the stored history never
changes. Pure, apart from a bounded memo of the summaries made last.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from typing import Any

from tether.actors.model.turns import (
    Msg,
    blocks_of,
    result_text,
    starts_turn,
    turn_numbers,
    with_blocks,
)
from tether.events.messages import ToolResultBlock

KEEP_TURNS = 4
SUMMARY_MARK = "[tool result summarized:"
"""How a summarized tool result starts; such a result is never summarized again."""
ERROR_LINE_CHARS = 100

# Each pattern counts lines of a whole text at once (multiline mode): the loop runs in C.
_PYTHON_LINES = re.compile(
    r"^[ \t]*(?:def \w|async def \w|class \w|import \w|from [\w.]+ import |@\w|"
    r"if __name__ == )", re.MULTILINE)
_LISTING_LINES = re.compile(  # a path alone on its line, or a line of `ls -l`
    r"^(?:[\w.+@~/-]+/?$|[dlcbps-][rwxsStT-]{9}[.@+]?[ \t])", re.MULTILINE)
_NONBLANK_LINES = re.compile(r"^[ \t]*\S", re.MULTILINE)
_DIFF_GIT = re.compile(r"^diff --git ", re.MULTILINE)
_DIFF_PARTS = [re.compile(p, re.MULTILINE) for p in (r"^--- ", r"^\+\+\+ ", r"^@@ ")]


KIND_SAMPLE_CHARS = 16_384
"""The lines :func:`content_kind` judges lie in a result's first this many characters."""


def content_kind(text: str) -> str:
    """What a tool result looks like: empty, JSON, a diff, Python source, a listing or
    text (cheap heuristics, first match in that order). JSON is told by parsing the
    whole text; the rest by the lines of its first :data:`KIND_SAMPLE_CHARS` characters,
    so a long result costs no more than a short one."""
    stripped = text.strip()
    if not stripped:
        return "empty"
    if stripped[0] in "{[" and stripped[-1] in "}]":
        try:
            json.loads(stripped)
        except ValueError:
            pass
        else:
            return "JSON"
    sample = stripped[:KIND_SAMPLE_CHARS]
    if len(stripped) > KIND_SAMPLE_CHARS:
        sample = sample[: sample.rfind("\n") + 1] or sample  # whole lines only
    if "\r" in sample:
        sample = sample.replace("\r\n", "\n").replace("\r", "\n")
    if _DIFF_GIT.search(sample) or all(part.search(sample) for part in _DIFF_PARTS):
        return "a diff"
    lines = len(_NONBLANK_LINES.findall(sample))
    python = len(_PYTHON_LINES.findall(sample))
    if python >= 2 or (python == 1 and lines <= 3):
        return "Python source"
    listed = len(_LISTING_LINES.findall(sample))
    if lines >= 2 and listed * 10 >= lines * 9:
        return "a listing"
    return "text"


def _line_count(text: str) -> int:
    return len(text.splitlines())


class _SummaryMemo:
    """The summaries of the tool results summarized last, remembering at most
    ``max_chars`` characters of results (the least recently used forgotten first), so
    it never keeps much alive that the sessions have let go. Thread-safe: every session
    actor builds its requests on its own thread."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self._items: OrderedDict[tuple[str, bool], str] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def get(self, content: str, is_error: bool) -> str | None:
        with self._lock:
            summary = self._items.get((content, is_error))
            if summary is not None:
                self._items.move_to_end((content, is_error))
            return summary

    def put(self, content: str, is_error: bool, summary: str) -> None:
        if len(content) > self.max_chars:
            return
        with self._lock:
            if (content, is_error) not in self._items:
                self._chars += len(content)
            self._items[(content, is_error)] = summary
            while self._chars > self.max_chars:
                (old, _), _ = self._items.popitem(last=False)
                self._chars -= len(old)


_SUMMARIES = _SummaryMemo(max_chars=4_000_000)


def summarize_result(content: str, is_error: bool = False) -> str:
    """The one-line summary of a tool result: its size in bytes and lines, what kind of
    content it is, and for an error its first non-blank line (up to 100 characters).

    Every model call of a long session sends its stale results again: a summary made
    lately is remembered (:class:`_SummaryMemo`; a string keeps its hash, so a hit costs
    a lookup), and one made anew does its reading in C (:func:`content_kind`)."""
    known = _SUMMARIES.get(content, is_error)
    if known is not None:
        return known
    summary = _summary_of(content, is_error)
    _SUMMARIES.put(content, is_error, summary)
    return summary


def _summary_of(content: str, is_error: bool) -> str:
    size = len(content.encode("utf-8"))
    lines = _line_count(content)
    parts = [
        "error" if is_error else "",
        f"{size} byte{'' if size == 1 else 's'}",
        f"{lines} line{'' if lines == 1 else 's'}",
        content_kind(content),
    ]
    summary = f"{SUMMARY_MARK} {', '.join(p for p in parts if p)}"
    if is_error:
        first = next((line.strip() for line in content.splitlines() if line.strip()), "")
        if first:
            summary += f"; first line: {first[:ERROR_LINE_CHARS]}"
    return summary + "]"


def is_summarized(content: Any) -> bool:
    """A tool result's content is already a summary."""
    return isinstance(content, str) and content.startswith(SUMMARY_MARK)


def _summarized_block(block: Any) -> Any:
    """``block`` with its content summarized, or ``block`` itself when it is not a tool
    result, is a summary already, or would not get shorter."""
    if isinstance(block, ToolResultBlock):
        content, is_error = block.content, block.is_error
    elif isinstance(block, dict) and block.get("type") == "tool_result":
        content, is_error = block.get("content", ""), bool(block.get("is_error", False))
    else:
        return block
    if is_summarized(content):
        return block
    text = result_text(content)
    summary = summarize_result(text, is_error)
    if len(summary) >= len(text):
        return block
    if isinstance(block, ToolResultBlock):
        return ToolResultBlock(block.tool_use_id, summary, block.is_error)
    return {**block, "content": summary}


def summarize_stale_results(messages: list[Msg], keep_turns: int = KEEP_TURNS) -> list[Msg]:
    """``messages`` with each tool result ``keep_turns`` or more turns old replaced by a
    one-line summary (see :func:`summarize_result`); for what is sent, never what is stored.

    Age counts turns ago: the current (last) turn is 0 turns old, the one before it 1,
    and so on (turns as :mod:`actors.model.turns` defines them), so the current turn and
    the ``keep_turns - 1`` before it keep their results whole (seed 001: ``current - turn
    >= 4`` is stale). A result keeps its ``tool_use_id`` and ``is_error``; a summary is not
    summarized again, and a result the summary would not shorten stays.
    ``messages`` (Turns or API dicts) is not changed: changed messages are new objects,
    unchanged ones are shared with the input (treat the result as read-only).
    """
    numbers = turn_numbers(messages)
    return summarize_stale(messages, numbers, numbers[-1] if numbers else 0, keep_turns)


def summarize_stale(messages: list[Msg], numbers: list[int], current: int,
                    keep_turns: int = KEEP_TURNS) -> list[Msg]:
    """:func:`summarize_stale_results` of a part of a history: ``numbers`` are the turn
    numbers of its messages (:func:`~actors.model.turns.turn_numbers`) and ``current``
    the history's last, both counted from any one place in the history (only their
    differences count)."""
    if keep_turns < 1:
        raise ValueError("keep_turns must be >= 1")
    out: list[Msg] = []
    for message, number in zip(messages, numbers, strict=True):
        # the results of a mixed message answer the turn before the one its text starts
        results_turn = number - 1 if starts_turn(message) else number
        age = current - results_turn
        if age < keep_turns:
            out.append(message)
            continue
        blocks = blocks_of(message)
        shaped = [_summarized_block(b) for b in blocks]
        if all(a is b for a, b in zip(blocks, shaped, strict=True)):
            out.append(message)
        else:
            out.append(with_blocks(message, shaped))
    return out
