"""What a user is told about a stored session event: pure, one function.

``notice_for`` turns a relayed session event into the ChannelMessage kind and text a chat
shows, or None when the event is not worth a message.
"""

from __future__ import annotations

import json
from typing import Any

ARG_PREVIEW = 80


APPROVAL_INPUT = 2000
"""Characters of a tool's input shown when a person is asked to approve it."""


def full_input(tool_input: dict[str, Any]) -> str:
    """A tool's whole input as JSON (up to APPROVAL_INPUT characters, then says how much
    more there is): what a person must see before approving it."""
    text = json.dumps(tool_input, ensure_ascii=False, sort_keys=True)
    if len(text) <= APPROVAL_INPUT:
        return text
    return text[:APPROVAL_INPUT] + f"… ({len(text) - APPROVAL_INPUT} more characters)"


def preview(tool_input: dict[str, Any]) -> str:
    """A one-line, bounded view of a tool's input (``path=a.txt, content=...``)."""
    parts = [f"{k}={v!r}" if not isinstance(v, str) else f"{k}={v}" for k, v in tool_input.items()]
    text = " ".join(", ".join(parts).split())
    return text if len(text) <= ARG_PREVIEW else text[: ARG_PREVIEW - 1] + "…"


def notice_for(event: str, data: dict[str, Any]) -> tuple[str, str] | None:
    """(kind, text) for a session event, or None.

    Raises KeyError, TypeError or AttributeError when ``data`` does not have the event's
    shape (anyone can publish on the event subjects); the router treats that as bad input.
    """
    if event == "AssistantMessageAppended":
        text = "".join(b.get("text", "") for b in data["content"] if b.get("type") == "text")
        return ("reply", text) if text.strip() else None
    if event == "ToolCallProposed":
        return "tool", f"→ {data['tool']}({preview(data['tool_input'])})"
    if event == "ToolCallDecided" and data["decision"] == "escalate":
        return None  # the coordinator's approval question says it
    if event == "ToolCallDecided" and data["decision"] != "allow":
        return "tool", f"✗ denied ({data['tier']}): {data['reason']}"
    if event == "ToolCallExecuted":
        first = (data["output"].strip().splitlines() or [""])[0][:ARG_PREVIEW]
        mark = "✗" if data["is_error"] else "✓"
        return "tool", f"{mark} {data['tool']}: {first}"
    if event == "ToolCallRefused":
        return None  # the decision notice already said why
    if event == "TtsrInterrupted":
        names = ", ".join(data["rules"])
        return "interrupted", f"rule {names} interrupted the reply; retrying"
    if event == "TurnCompleted":
        usage = data["usage"]
        return (
            "completed",
            f"done: {data['rounds']} round(s), {usage['input_tokens']} in / "
            f"{usage['output_tokens']} out tokens, ${data['cost_usd']:.4f}"
            + (" (round limit reached)" if data["stop"] == "round_limit" else ""),
        )
    if event == "TurnFailed":
        return "failed", f"the turn failed: {data['error']}"
    if event == "StatusChanged" and data["status"] == "killed":
        return "status", f"session killed: {data['reason']}"
    return None
