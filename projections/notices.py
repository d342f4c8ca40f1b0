"""What a user is told about a stored session event. Pure.

``notice_for`` turns a session event into the ChannelMessage kind and text a chat shows,
or None when the event is not worth a message; ``plan_notices`` adds who should get it:
the channels watching the session in the foreground (the play-by-play), everyone (its
ending: those in the background also get the last lines of output), or only its origin
when nobody watches (waiting for input).
"""

from __future__ import annotations

import json
from typing import Any, Literal

import msgspec

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
            + (f"; stopped at the round limit ({data['rounds']} rounds) while the model "
               "still wanted tools: send a message to let it go on"
               if data["stop"] == "round_limit" else ""),
        )
    if event == "TurnFailed":
        if data.get("kind") == "killed":
            return None  # the kill's own notice (StatusChanged) says it
        return "failed", f"the turn failed: {data['error']}"
    if event == "StatusChanged" and data["status"] == "killed":
        return "status", f"session killed: {data['reason']}"
    return None


Audience = Literal["watchers", "everyone", "background"]

ENDINGS = frozenset({"completed", "failed", "budget"})
"""Notice kinds that end a turn or a session: sent to everyone, with the last lines of
output for channels that were not watching."""


class Planned(msgspec.Struct, frozen=True):
    """A notice to deliver: its kind, text and audience."""

    kind: str
    text: str
    audience: Audience


def plan_notices(event: str, data: dict[str, Any]) -> list[Planned]:
    """The notices one session event makes (same errors as :func:`notice_for`)."""
    if event == "BudgetExhausted":
        return [Planned("budget", f"budget exhausted: ${data['cost_usd']:.4f} spent of "
                                  f"${data['budget_usd']:.2f}; the session failed",
                        "everyone")]
    if event == "WaitingForInput":
        return [Planned("waiting", f"waiting for input ({data['reason']})", "background")]
    notice = notice_for(event, data)
    if notice is None:
        return []
    kind, text = notice
    ending = kind in ENDINGS or (event == "StatusChanged" and data["status"] == "killed")
    return [Planned(kind, text, "everyone" if ending else "watchers")]
