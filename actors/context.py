"""Context assembly: the model request for a session's next call, from its history.

Pure: no I/O. Consecutive turns of the same role are merged (a tool result followed by a
TTSR reminder becomes one user message) because the Messages API expects the roles to
alternate.
"""

from __future__ import annotations

from typing import Any

import msgspec

from actors.ports import ModelRequest
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
) -> ModelRequest:
    """The request for the next model call of a session with ``history``."""
    return ModelRequest(
        model=model,
        system=system,
        messages=to_api_messages(history),
        tools=tools,
        max_tokens=max_tokens,
    )
