"""Context assembly: the model request for a session's next call, from its history.

Pure: no I/O, and the stored history never changes. Consecutive turns of the same role are
merged (a tool result followed by a TTSR reminder becomes one user message) because the
Messages API expects the roles to alternate.

Shaping each request: stale tool results turned into one-line summaries
(:mod:`actors.model.stale_results`), coalescing of same-role text messages, token estimates
and the ``max_tokens`` clamp (figures from :mod:`actors.model.models`). Compaction is
planned in :mod:`actors.model.compaction`; turns are read with :mod:`actors.model.turns`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from tether.actors.model.models import model_info
from tether.actors.model.stale_results import KEEP_TURNS, summarize_stale_results
from tether.actors.model.turns import (
    Msg,
    blocks_of,
    is_continuation,
    json_text,
    result_text,
    role_of,
    text_only,
    texts_of,
    with_blocks,
)
from tether.actors.ports import ModelRequest
from tether.events.messages import TextBlock, ToolResultBlock, ToolUseBlock
from tether.events.session import Turn

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
        estimate_tokens(json_text(tool)) for tool in tools)
    return ModelRequest(
        model=model,
        system=system,
        messages=messages,
        tools=tools,
        max_tokens=clamp_max_tokens(max_tokens, model, used, window),
        history_tokens=history_tokens,
        input_tokens=used,
    )


# --- token estimates and clamping ---------------------------------------------------------

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD = 4
"""Tokens counted for each message besides its content (role and framing)."""


def estimate_tokens(text: str) -> int:
    """About one token per four characters; at least 1 for any non-empty text."""
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def _block_tokens(block: Any) -> int:
    if isinstance(block, TextBlock):
        return estimate_tokens(block.text)
    if isinstance(block, ToolUseBlock):
        return estimate_tokens(block.name) + estimate_tokens(json_text(block.input))
    if isinstance(block, ToolResultBlock):
        return estimate_tokens(block.content)
    if isinstance(block, dict):
        kind = block.get("type")
        if kind == "text":
            return estimate_tokens(str(block.get("text", "")))
        if kind == "tool_use":
            return estimate_tokens(str(block.get("name", ""))) + estimate_tokens(
                json_text(block.get("input", {}))
            )
        if kind == "tool_result":
            return estimate_tokens(result_text(block.get("content", "")))
    return estimate_tokens(json_text(msgspec.to_builtins(block)))


def estimate_message_tokens(message: Turn | dict[str, Any]) -> int:
    """Estimated tokens of one message (its blocks and a small per-message overhead)."""
    return MESSAGE_OVERHEAD + sum(_block_tokens(b) for b in blocks_of(message))


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
        + sum(estimate_tokens(json_text(tool)) for tool in tools)
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



# --- coalescing ---------------------------------------------------------------------------


def _joined(run: list[Msg]) -> list[Msg]:
    """A run of same-role text-only messages as one message with one text block: the
    non-blank texts with a blank line between, except that a continuation's first text
    goes on from the text before it with nothing between (neither stripped)."""
    if len(run) < 2:
        return run
    pieces: list[str] = []
    glue = False  # the message before put a text last: a continuation goes on from it
    for message in run:
        texts = [t for t in texts_of(message) if t.strip()]
        if not texts:
            glue = False
            continue
        if glue and is_continuation(message):
            pieces[-1] += texts[0]
            texts = texts[1:]
        pieces.extend(texts)
        glue = True
    text = "\n\n".join(pieces)
    if not text:
        return run
    first = run[0]
    block: Any = TextBlock(text) if isinstance(first, Turn) else {"type": "text", "text": text}
    return [with_blocks(first, [block])]


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
        if run and text_only(message) and role_of(run[-1]) == role_of(message):
            run.append(message)
            continue
        runs.extend(_joined(run))
        run = [message] if text_only(message) else []
        if not run:
            runs.append(message)
    runs.extend(_joined(run))

    out: list[Msg] = []
    for message in runs:
        if out and role_of(out[-1]) == role_of(message):
            out[-1] = with_blocks(out[-1], blocks_of(out[-1]) + blocks_of(message))
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
