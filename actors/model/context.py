"""Context assembly: the model request for a session's next call, from its history.

Pure: no I/O. Consecutive turns of the same role are merged (a tool result followed by a
TTSR reminder becomes one user message) because the Messages API expects the roles to
alternate.

Context shaping, also pure and never changing the stored history: token estimates and
the ``max_tokens`` clamp (figures from :mod:`actors.model.models`), stale tool results turned
into one-line summaries, coalescing of same-role text messages, and the planning half of
compaction (budget, trigger, split, the two prompts, the summary message and the
MEMORY.md text); the model calls themselves are made by the caller.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, NamedTuple, TypeVar, cast

import msgspec

from actors.model.models import model_info
from actors.ports import ModelRequest
from events.messages import TextBlock, ToolResultBlock, ToolUseBlock
from events.session import Turn

DEFAULT_SYSTEM_PROMPT = (
    "You are a coding agent working inside the user's workspace. Use the tools to read, "
    "write and run things there; keep answers short and say what you did."
)


def to_api_messages(history: list[Turn]) -> list[dict[str, Any]]:
    """The history in Messages API form, same-role neighbours merged."""
    messages: list[dict[str, Any]] = []
    for turn in history:
        blocks = [msgspec.to_builtins(block) for block in turn.content]
        if messages and messages[-1]["role"] == turn.role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": turn.role, "content": blocks})
    return messages


def build_request(
    history: list[Turn],
    *,
    model: str,
    tools: list[dict[str, Any]],
    max_tokens: int,
    system: str = DEFAULT_SYSTEM_PROMPT,
    window: int = 0,
) -> ModelRequest:
    """The request for the next model call of a session with ``history``: stale tool
    results summarized and neighbours coalesced (:func:`shape_messages`), ``max_tokens``
    clamped to what the model and its window allow (:func:`clamp_max_tokens`; ``window``
    overrides the model table's when not 0)."""
    messages = shape_messages(history)
    history_tokens = estimate_history_tokens(messages)
    used = estimate_tokens(system) + history_tokens + sum(
        estimate_tokens(_json(tool)) for tool in tools)
    return ModelRequest(
        model=model,
        system=system,
        messages=messages,
        tools=tools,
        max_tokens=clamp_max_tokens(max_tokens, model, used, window),
        history_tokens=history_tokens,
        input_tokens=used,
    )


# --- turns --------------------------------------------------------------------------------
#
# A *turn* starts with user text: a user message holding any block that is not a
# tool_result (what the user typed, or text the engine put in the user's place: a TTSR
# reminder, a compaction's summary). Tool results belong to the turn of the tool_use they
# answer, the one in progress when they arrive, also when text follows them in the same
# message (as it does once to_api_messages has merged a reminder or the next question into
# the message of results): such a mixed message ends one turn and starts the next.
# Messages before the first turn start are in turn 0. Stored histories never mix the two
# (a result never joins a text Turn), so counting on Turns and on API dicts agrees.
#
# A history may be cut only before a *clean* turn start: a user message with blocks and no
# tool_result. Everything before it has its tool_use blocks answered; cutting before a
# mixed message would part its results from the tool_use blocks they answer.
#
# A continuation Turn (``continues``: the rest of a message the conversation tree holds
# in two parts) never starts a turn: it is the same message as the one before it, so a
# history is never cut between the two.

Msg = TypeVar("Msg", Turn, dict[str, Any])
"""A message as stored (a Turn) or as sent (a Messages API dict)."""


def _role(message: Turn | dict[str, Any]) -> str:
    return message.role if isinstance(message, Turn) else str(message["role"])


def _blocks(message: Turn | dict[str, Any]) -> list[Any]:
    if isinstance(message, Turn):
        return list(message.content)
    content = message["content"]
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content)


def _kind(block: Any) -> str:
    if isinstance(block, TextBlock):
        return "text"
    if isinstance(block, ToolUseBlock):
        return "tool_use"
    if isinstance(block, ToolResultBlock):
        return "tool_result"
    return str(block.get("type", "")) if isinstance(block, dict) else ""


def _has_result(message: Turn | dict[str, Any]) -> bool:
    return any(_kind(b) == "tool_result" for b in _blocks(message))


def _continues(message: Turn | dict[str, Any]) -> bool:
    """``message`` is a continuation Turn (API dicts never are)."""
    return isinstance(message, Turn) and message.continues


def starts_turn(message: Turn | dict[str, Any]) -> bool:
    """``message`` starts a turn: a user message with a block that is not a tool_result,
    and not a continuation (the rest of the message before it)."""
    return _role(message) == "user" and not _continues(message) and any(
        _kind(b) != "tool_result" for b in _blocks(message)
    )


def can_split_before(message: Turn | dict[str, Any]) -> bool:
    """A history may be cut before ``message``: a turn start without tool results."""
    return starts_turn(message) and not _has_result(message)


def turn_numbers(messages: Sequence[Turn | dict[str, Any]]) -> list[int]:
    """The turn each message ends in: 0 before the first turn start, then 1, 2, ...
    (the tool results of a mixed message are in the turn before its number)."""
    numbers: list[int] = []
    current = 0
    for message in messages:
        if starts_turn(message):
            current += 1
        numbers.append(current)
    return numbers


# --- token estimates and clamping ---------------------------------------------------------

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD = 4
"""Tokens counted for each message besides its content (role and framing)."""


def estimate_tokens(text: str) -> int:
    """About one token per four characters; at least 1 for any non-empty text."""
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True,
                      default=str)


def _result_text(content: Any) -> str:
    """A tool result's content as text (the API also allows a list of blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(b.get("text", "")) if isinstance(b, dict) and b.get("type") == "text"
            else _json(b)
            for b in content
        )
    return _json(content)


def _block_tokens(block: Any) -> int:
    if isinstance(block, TextBlock):
        return estimate_tokens(block.text)
    if isinstance(block, ToolUseBlock):
        return estimate_tokens(block.name) + estimate_tokens(_json(block.input))
    if isinstance(block, ToolResultBlock):
        return estimate_tokens(block.content)
    if isinstance(block, dict):
        kind = block.get("type")
        if kind == "text":
            return estimate_tokens(str(block.get("text", "")))
        if kind == "tool_use":
            return estimate_tokens(str(block.get("name", ""))) + estimate_tokens(
                _json(block.get("input", {}))
            )
        if kind == "tool_result":
            return estimate_tokens(_result_text(block.get("content", "")))
    return estimate_tokens(_json(msgspec.to_builtins(block)))


def estimate_message_tokens(message: Turn | dict[str, Any]) -> int:
    """Estimated tokens of one message (its blocks and a small per-message overhead)."""
    return MESSAGE_OVERHEAD + sum(_block_tokens(b) for b in _blocks(message))


def estimate_history_tokens(messages: Sequence[Turn | dict[str, Any]]) -> int:
    """Estimated tokens of a list of messages (stored Turns or API dicts)."""
    return sum(estimate_message_tokens(m) for m in messages)


def estimate_request_tokens(
    system: str,
    messages: Sequence[Turn | dict[str, Any]],
    tools: Sequence[dict[str, Any]] = (),
) -> int:
    """Estimated input tokens of a request: system prompt, messages and tool definitions."""
    return (
        estimate_tokens(system)
        + estimate_history_tokens(messages)
        + sum(estimate_tokens(_json(tool)) for tool in tools)
    )


def context_window(model: str, override: int = 0) -> int:
    """Tokens ``model``'s window holds: ``override`` when not 0, else the model table's."""
    return override if override > 0 else model_info(model).context_window


def clamp_max_tokens(requested: int, model: str, input_tokens: int, window: int = 0) -> int:
    """The ``max_tokens`` to send: the least of ``requested``, the model's output limit and
    what the window (``window`` when not 0, else the model's) leaves after
    ``input_tokens``; never below 1 (the API's minimum; a request that leaves no room then
    fails at the API with a clear error instead of being sent with a nonsensical limit)."""
    info = model_info(model)
    room = context_window(model, window) - input_tokens
    return max(1, min(requested, info.max_output, room))


# --- stale tool results -------------------------------------------------------------------

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
    text = _result_text(content)
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
    and so on (turns are defined above), so the current turn and the ``keep_turns - 1``
    before it keep their results whole (seed 001: ``current - turn >= 4`` is stale). A
    result keeps its ``tool_use_id`` and ``is_error``; a summary is not summarized again,
    and a result the summary would not shorten stays.
    ``messages`` (Turns or API dicts) is not changed: changed messages are new objects,
    unchanged ones are shared with the input (treat the result as read-only).
    """
    if keep_turns < 1:
        raise ValueError("keep_turns must be >= 1")
    numbers = turn_numbers(messages)
    current = numbers[-1] if numbers else 0
    out: list[Msg] = []
    for message, number in zip(messages, numbers, strict=True):
        # the results of a mixed message answer the turn before the one its text starts
        results_turn = number - 1 if starts_turn(message) else number
        age = current - results_turn
        if age < keep_turns:
            out.append(message)
            continue
        blocks = _blocks(message)
        shaped = [_summarized_block(b) for b in blocks]
        if all(a is b for a, b in zip(blocks, shaped, strict=True)):
            out.append(message)
        else:
            out.append(_with_blocks(message, shaped))
    return out


# --- coalescing ---------------------------------------------------------------------------


def _text_only(message: Turn | dict[str, Any]) -> bool:
    """Every block is plain text (a dict block with other keys, such as cache_control or
    citations, is not plain)."""
    if isinstance(message, Turn):
        return bool(message.content) and all(isinstance(b, TextBlock) for b in message.content)
    content = message["content"]
    if isinstance(content, str):
        return True
    return bool(content) and all(
        isinstance(b, dict) and b.get("type") == "text" and set(b) <= {"type", "text"}
        for b in content
    )


def _texts(message: Turn | dict[str, Any]) -> list[str]:
    if isinstance(message, Turn):
        return [b.text for b in message.content if isinstance(b, TextBlock)]
    return [str(b["text"]) for b in _blocks(message)]


def _with_blocks(message: Msg, blocks: list[Any]) -> Msg:
    """A new message like ``message`` (same kind, same other keys, a Turn's continuation
    flag) holding ``blocks``."""
    if isinstance(message, Turn):
        return cast(Msg, msgspec.structs.replace(message, content=blocks))
    return cast(Msg, {**message, "content": blocks})


def _joined(run: list[Msg]) -> list[Msg]:
    """A run of same-role text-only messages as one message with one text block: the
    non-blank texts with a blank line between, except that a continuation's first text
    goes on from the text before it with nothing between (neither stripped)."""
    if len(run) < 2:
        return run
    pieces: list[str] = []
    glue = False  # the message before put a text last: a continuation goes on from it
    for message in run:
        texts = [t for t in _texts(message) if t.strip()]
        if not texts:
            glue = False
            continue
        if glue and _continues(message):
            pieces[-1] += texts[0]
            texts = texts[1:]
        pieces.extend(texts)
        glue = True
    text = "\n\n".join(pieces)
    if not text:
        return run
    first = run[0]
    block: Any = TextBlock(text) if isinstance(first, Turn) else {"type": "text", "text": text}
    return [_with_blocks(first, [block])]


def coalesce(messages: list[Msg]) -> list[Msg]:
    """Adjacent text-only messages of the same role merged, so the roles alternate.

    1. Each run of adjacent text-only messages of one role becomes one message whose one
       text block joins their non-blank texts (blank lines between). A continuation
       Turn (``continues``: the rest of a message the tree holds in two parts) is glued
       to the text before it with nothing between and nothing stripped, so
       ``"what colour is the "`` and ``"grass"`` read ``"what colour is the grass"``.
       A message with a tool_use or tool_result block is never part of such a run, so
       text never joins across a tool block (a continuation after one stays a message
       of its own, as in step 2).
    2. Same-role neighbours left after that (a user message of tool results followed by
       the user's text, or a reminder) have their block lists put one after the other,
       unchanged and in order, as :func:`to_api_messages` does: the Messages API wants
       the roles to alternate, and tool_result blocks first in their user message, which
       holds since results always follow the assistant message that asked for them.

    Works on Turns or API dicts (which carry no continuation flag); ``messages`` is not
    changed.
    """
    runs: list[Msg] = []
    run: list[Msg] = []
    for message in messages:
        if run and _text_only(message) and _role(run[-1]) == _role(message):
            run.append(message)
            continue
        runs.extend(_joined(run))
        run = [message] if _text_only(message) else []
        if not run:
            runs.append(message)
    runs.extend(_joined(run))

    out: list[Msg] = []
    for message in runs:
        if out and _role(out[-1]) == _role(message):
            out[-1] = _with_blocks(out[-1], _blocks(out[-1]) + _blocks(message))
        else:
            out.append(message)
    return out


def shape_messages(history: list[Turn], keep_turns: int = KEEP_TURNS) -> list[dict[str, Any]]:
    """What to send for ``history``: stale tool results summarized, then coalesced (on
    the Turns, so continuations are glued), in Messages API form. The history itself is
    not changed."""
    shaped = summarize_stale_results(history, keep_turns)
    return [{"role": t.role, "content": [msgspec.to_builtins(b) for b in t.content]}
            for t in coalesce(shaped)]


# --- compaction ---------------------------------------------------------------------------

RESERVE_TOKENS = 4096
BUDGET_FLOOR = 4096
"""The smallest budget: when the system prompt leaves less, compaction still aims at a
usable size (the request may then not fit; :func:`clamp_max_tokens` and the API say so)."""
COMPACT_AT_PERCENT = 70
RECENT_PERCENT = 30
SUMMARY_PREFIX = "[Previous conversation summary: "
TRANSCRIPT_RESULT_CHARS = 2000
"""A tool result longer than this is cut in the transcript given to the compaction calls."""


def context_budget(
    window: int, system_tokens: int, reserve: int = RESERVE_TOKENS, floor: int = BUDGET_FLOOR
) -> int:
    """Tokens the history may take: the window less the system prompt and a reserve (for
    the answer and the estimate's error), at least ``floor``."""
    return max(floor, window - system_tokens - reserve)


def needs_compaction(history_tokens: int, budget: int) -> bool:
    """The history takes 70% or more of the budget."""
    if budget <= 0:
        return history_tokens > 0
    return history_tokens * 100 >= budget * COMPACT_AT_PERCENT


def split_for_compaction(history: list[Msg], budget: int) -> tuple[list[Msg], list[Msg]]:
    """``(older, recent)``: ``recent`` is the longest tail of ``history`` that starts at a
    clean turn start (:func:`can_split_before`) and takes at most 30% of ``budget`` (by
    :func:`estimate_message_tokens`); ``older`` is what comes before it.

    Cutting only there keeps every tool_use with its tool_result. When even the
    last turn takes more than 30%, ``recent`` is empty and all of it is summarized (a
    compaction that kept it would not bring the history under the trigger). Compact only
    when the history ends with a user message: tool calls still waiting for their results
    would otherwise be summarized away from them.
    """
    limit = budget * RECENT_PERCENT // 100
    cut = len(history)
    total = 0
    for index in range(len(history) - 1, -1, -1):
        total += estimate_message_tokens(history[index])
        if total > limit:
            break
        if can_split_before(history[index]):
            cut = index
    return history[:cut], history[cut:]


class CompactionPlan(NamedTuple):
    """What a compaction will do: replace the first ``replaced`` messages of the history
    (``older``, as sent: stale results already summarized) with a summary."""

    older: list[Turn]
    replaced: int
    tokens: int
    """Estimated tokens of the history as sent, before the compaction."""
    budget: int


def plan_compaction(history: list[Turn], *, system: str, window: int,
                    sent_tokens: int | None = None, tools: Sequence[dict[str, Any]] = (),
                    keep_turns: int = KEEP_TURNS) -> CompactionPlan | None:
    """The compaction the history needs before the next model call, or None.

    The history is measured as it is sent (stale tool results summarized, as the seed
    does before compacting; ``sent_tokens``, when the caller has it from the request it
    built, saves measuring again) against :func:`context_budget`, which leaves room for
    the system prompt and the ``tools`` definitions sent with it (many MCP tools can take
    much of a window); at 70% or more it is
    split with :func:`split_for_compaction`. None when under the trigger, when nothing
    older than the recent part is left to summarize, or when that is only an earlier
    summary (summarizing it alone again would gain nothing and could repeat every call).
    """
    budget = context_budget(window, estimate_request_tokens(system, [], tools))
    shaped: list[Turn] | None = None
    if sent_tokens is None:
        shaped = summarize_stale_results(history, keep_turns)
        sent_tokens = estimate_history_tokens(shaped)
    if not needs_compaction(sent_tokens, budget):
        return None
    if shaped is None:
        shaped = summarize_stale_results(history, keep_turns)
    tokens = sent_tokens
    older, _ = split_for_compaction(shaped, budget)
    if not older or (len(older) == 1 and is_summary_message(older[0])):
        return None
    return CompactionPlan(older, len(older), tokens, budget)


def is_summary_message(message: Turn | dict[str, Any]) -> bool:
    """``message`` is a compaction's summary (``[Previous conversation summary: ...]``)."""
    texts = _texts(message) if _text_only(message) else []
    return len(texts) == 1 and texts[0].startswith(SUMMARY_PREFIX)


MEMORY_PROMPT = """\
You read the earlier part of a conversation between a user and a coding agent and pick \
out the durable facts worth keeping in the agent's long-term memory file (MEMORY.md): \
things that stay true after this conversation, such as the user's preferences and \
working conventions, decisions about the project, names, paths, commands that work, \
constraints and requirements.

Leave out what was merely done step by step, passing state, tool output, guesses, and \
anything secret (passwords, tokens, keys, personal data the user did not ask to keep). \
Leave out facts the conversation later contradicted.

Answer with one fact per line, each line starting with "- ", one short sentence each, \
and nothing else. If there is nothing durable, answer exactly: NONE"""

SUMMARY_PROMPT = """\
You summarize the earlier part of a conversation between a user and a coding agent, so \
the agent can carry on without it. The summary replaces those messages.

Keep: what the user asked for and why (their latest request in full), decisions and \
their reasons, the files, commands and tools involved and what came of them, what is \
done and what remains, errors not yet resolved, and open questions. If the conversation \
starts with an earlier summary, fold it in.

Leave out pleasantries and tool output that no longer matters. Write compact notes in \
the past tense, as short as the content allows, with no preamble."""


def render_transcript(messages: Sequence[Turn | dict[str, Any]]) -> str:
    """``messages`` as plain text for the compaction calls (long tool results cut; a
    continuation's text goes on the line of the text before it, as it is sent)."""
    lines: list[str] = []
    text_role = ""  # the role whose text the last line is ("" if it is not text)
    for message in messages:
        role = _role(message)
        speaker = "User" if role == "user" else "Assistant"
        glue = _continues(message) and text_role == role
        for block in _blocks(message):
            data = block if isinstance(block, dict) else msgspec.to_builtins(block)
            kind = data.get("type")
            text_role = role if kind == "text" else ""
            if kind == "text" and glue:
                lines[-1] += str(data.get("text", ""))
            elif kind == "text":
                lines.append(f"{speaker}: {data.get('text', '')}")
            elif kind == "tool_use":
                lines.append(f"Assistant called {data.get('name', '')} "
                             f"({data.get('id', '')}): {_json(data.get('input', {}))}")
            elif kind == "tool_result":
                text = _result_text(data.get("content", ""))
                if len(text) > TRANSCRIPT_RESULT_CHARS:
                    text = (f"{text[:TRANSCRIPT_RESULT_CHARS]}\n[... "
                            f"{len(text) - TRANSCRIPT_RESULT_CHARS} more characters cut]")
                label = "error" if data.get("is_error") else "result"
                lines.append(f"Tool {label} ({data.get('tool_use_id', '')}): {text}")
            else:
                lines.append(f"{speaker}: {_json(data)}")
            glue = False
    return "\n\n".join(lines)


def _compaction_request(prompt: str, older: Sequence[Turn | dict[str, Any]], model: str,
                        max_tokens: int) -> ModelRequest:
    text = f"<conversation>\n{render_transcript(older)}\n</conversation>"
    return ModelRequest(
        model=model,
        system=prompt,
        messages=[{"role": "user", "content": [{"type": "text", "text": text}]}],
        tools=[],
        max_tokens=max_tokens,
    )


def memory_request(older: Sequence[Turn | dict[str, Any]], *, model: str,
                   max_tokens: int = 1024) -> ModelRequest:
    """The model call that extracts durable facts from ``older`` (answer: parse_facts)."""
    return _compaction_request(MEMORY_PROMPT, older, model, max_tokens)


def summary_request(older: Sequence[Turn | dict[str, Any]], *, model: str,
                    max_tokens: int = 2048) -> ModelRequest:
    """The model call that summarizes ``older`` (answer: summary_message)."""
    return _compaction_request(SUMMARY_PROMPT, older, model, max_tokens)


def parse_facts(answer: str) -> list[str]:
    """The facts in the memory call's answer: one per non-blank line, list marks
    removed; ``NONE`` (or nothing) gives none."""
    facts: list[str] = []
    for line in answer.splitlines():
        fact = _unmarked(line)
        if fact and fact.rstrip(".").upper() != "NONE":
            facts.append(fact)
    return facts


def _unmarked(line: str) -> str:
    """``line`` stripped, without a leading list mark."""
    text = line.strip()
    for mark in ("- ", "* ", "• "):
        if text.startswith(mark):
            return text[len(mark):].strip()
    return text


def memory_append(existing: str, facts: Sequence[str], date: dt.date | str) -> str:
    """``existing`` (MEMORY.md) with ``facts`` added as bullets under ``## <date>``.

    Facts already in the file as a bullet, blank ones and repeats are dropped; when none
    is left the text comes back unchanged. When the file's last heading is already that
    date's, the bullets go under it instead of a second one.
    """
    heading = f"## {date.isoformat() if isinstance(date, dt.date) else date}"
    present = {line.strip() for line in existing.splitlines()}
    bullets: list[str] = []
    for fact in facts:
        bullet = "- " + " ".join(_unmarked(fact).split())
        if bullet != "- " and bullet not in present and bullet not in bullets:
            bullets.append(bullet)
    if not bullets:
        return existing
    headings = [line.strip() for line in existing.splitlines() if line.startswith("## ")]
    body = "\n".join(bullets) + "\n"
    if headings and headings[-1] == heading:
        return existing + ("" if existing.endswith("\n") else "\n") + body
    before = existing.rstrip("\n")
    return (before + "\n\n" if before.strip() else "") + heading + "\n\n" + body


def summary_text(summary: str) -> str:
    """``[Previous conversation summary: ...]``."""
    return f"{SUMMARY_PREFIX}{summary.strip()}]"


def summary_message(summary: str) -> Turn:
    """The message that stands first in a compacted history in place of the older part
    (a user message: the Messages API has no system role inside ``messages``)."""
    return Turn("user", [TextBlock(summary_text(summary))])


def compacted_history(summary: str, recent: list[Turn]) -> list[Turn]:
    """The history after a compaction: the summary, then the recent part."""
    return [summary_message(summary), *recent]
