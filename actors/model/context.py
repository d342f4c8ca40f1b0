"""Context assembly: the model request for a session's next call, from its history.

Pure: no I/O, and the stored history never changes. Consecutive turns of the same role are
merged (a tool result followed by a TTSR reminder becomes one user message) because the
Messages API expects the roles to alternate.

Shaping each request: stale tool results turned into one-line summaries
(:mod:`actors.model.stale_results`), coalescing of same-role neighbours
(:mod:`actors.model.coalesce`), token estimates (:mod:`actors.model.tokens`), the settled
part of the history shaped once (:mod:`actors.model.shaped_history`), and the
``max_tokens`` clamp (figures from :mod:`actors.model.models`). Compaction is planned in
:mod:`actors.model.compaction`; turns are read with :mod:`actors.model.turns`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from tether.actors.model.coalesce import coalesce
from tether.actors.model.models import model_info
from tether.actors.model.shaped_history import shaped_history
from tether.actors.model.stale_results import KEEP_TURNS
from tether.actors.model.tokens import (
    CHARS_PER_TOKEN,
    MESSAGE_OVERHEAD,
    estimate_history_tokens,
    estimate_message_tokens,
    estimate_request_tokens,
    estimate_tokens,
    json_tokens,
)
from tether.actors.ports import ModelRequest
from tether.events.session import Turn

__all__ = ["CHARS_PER_TOKEN", "DEFAULT_SYSTEM_PROMPT", "MESSAGE_OVERHEAD", "build_request",
           "clamp_max_tokens", "coalesce", "context_window", "estimate_history_tokens",
           "estimate_message_tokens", "estimate_request_tokens", "estimate_tokens",
           "json_tokens", "shape_messages", "to_api_messages"]

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
    messages, history_tokens = shaped_history(history, KEEP_TURNS)
    used = estimate_tokens(system) + history_tokens + sum(json_tokens(tool) for tool in tools)
    return ModelRequest(
        model=model,
        system=system,
        messages=messages,
        tools=tools,
        max_tokens=clamp_max_tokens(max_tokens, model, used, window),
        history_tokens=history_tokens,
        input_tokens=used,
    )


# --- the window and the clamp ------------------------------------------------------------


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



def shape_messages(history: list[Turn], keep_turns: int = KEEP_TURNS) -> list[dict[str, Any]]:
    """What to send for ``history``: stale tool results summarized, then coalesced (on
    the Turns, so continuations are glued), in Messages API form. The history itself is
    not changed; the messages may be shared with other requests' (treat them as
    read-only)."""
    return shaped_history(history, keep_turns).messages
