"""Token estimates: about one token per four characters, for deciding before a call.

Pure. Used where the engine must judge a request's size before the model counts it: the
``max_tokens`` clamp, the compaction threshold, what the status line shows. The model's
own counts (``Usage``) are what budgets are charged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from tether.actors.model.turns import blocks_of, result_text
from tether.events.messages import TextBlock, ToolResultBlock, ToolUseBlock
from tether.events.session import Turn

__all__ = ["CHARS_PER_TOKEN", "MESSAGE_OVERHEAD", "estimate_history_tokens",
           "estimate_message_tokens", "estimate_request_tokens", "estimate_tokens",
           "json_tokens"]

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD = 4
"""Tokens counted for each message besides its content (role and framing)."""


def estimate_tokens(text: str) -> int:
    """About one token per four characters; at least 1 for any non-empty text."""
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def json_tokens(value: Any) -> int:
    """The estimate of ``value`` as compact JSON text, as long as :func:`json_text`'s but
    made by msgspec: a request's tool definitions and tool inputs are measured at each
    model call, and the json module takes eight times as long."""
    return estimate_tokens(msgspec.json.encode(value, enc_hook=str).decode())


def _block_tokens(block: Any) -> int:
    if isinstance(block, TextBlock):
        return estimate_tokens(block.text)
    if isinstance(block, ToolUseBlock):
        return estimate_tokens(block.name) + json_tokens(block.input)
    if isinstance(block, ToolResultBlock):
        return estimate_tokens(block.content)
    if isinstance(block, dict):
        kind = block.get("type")
        if kind == "text":
            return estimate_tokens(str(block.get("text", "")))
        if kind == "tool_use":
            return estimate_tokens(str(block.get("name", ""))) + json_tokens(
                block.get("input", {}))
        if kind == "tool_result":
            return estimate_tokens(result_text(block.get("content", "")))
    return json_tokens(msgspec.to_builtins(block))


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
        + sum(json_tokens(tool) for tool in tools)
    )
