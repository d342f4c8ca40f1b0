"""Messages as stored (a Turn) or as sent (a Messages API dict), read alike.

Pure. Their role, blocks and texts, a copy holding other blocks, a tool result's content
as text, and the turn structure: where a turn starts (:func:`starts_turn`), where a history
may be cut (:func:`can_split_before`) and which turn each message ends in
(:func:`turn_numbers`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TypeVar, cast

import msgspec

from tether.events.messages import TextBlock, ToolResultBlock, ToolUseBlock
from tether.events.session import Turn

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


def role_of(message: Turn | dict[str, Any]) -> str:
    """The role of ``message``: ``user`` or ``assistant``."""
    return message.role if isinstance(message, Turn) else str(message["role"])


def blocks_of(message: Turn | dict[str, Any]) -> list[Any]:
    """The blocks of ``message`` (an API dict's string content as one text block)."""
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
    return any(_kind(b) == "tool_result" for b in blocks_of(message))


def is_continuation(message: Turn | dict[str, Any]) -> bool:
    """``message`` is a continuation Turn (API dicts never are)."""
    return isinstance(message, Turn) and message.continues


def starts_turn(message: Turn | dict[str, Any]) -> bool:
    """``message`` starts a turn: a user message with a block that is not a tool_result,
    and not a continuation (the rest of the message before it)."""
    return role_of(message) == "user" and not is_continuation(message) and any(
        _kind(b) != "tool_result" for b in blocks_of(message)
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


def text_only(message: Turn | dict[str, Any]) -> bool:
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


def texts_of(message: Turn | dict[str, Any]) -> list[str]:
    """The texts of ``message``'s text blocks (of an API dict's every block: for a
    :func:`text_only` one)."""
    if isinstance(message, Turn):
        return [b.text for b in message.content if isinstance(b, TextBlock)]
    return [str(b["text"]) for b in blocks_of(message)]


def with_blocks(message: Msg, blocks: list[Any]) -> Msg:
    """A new message like ``message`` (same kind, same other keys, a Turn's continuation
    flag) holding ``blocks``."""
    if isinstance(message, Turn):
        return cast(Msg, msgspec.structs.replace(message, content=blocks))
    return cast(Msg, {**message, "content": blocks})


def json_text(value: Any) -> str:
    """``value`` as compact JSON with sorted keys (anything unknown as its ``str``)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True,
                      default=str)


def result_text(content: Any) -> str:
    """A tool result's content as text (the API also allows a list of blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(b.get("text", "")) if isinstance(b, dict) and b.get("type") == "text"
            else json_text(b)
            for b in content
        )
    return json_text(content)
