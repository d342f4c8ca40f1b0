"""Chat commands, handled before the model: parsing and the replies. Pure.

A message whose text starts with ``/`` is a command. It never reaches the model and is
not a user message of the conversation; the session records what it did.
"""

from __future__ import annotations

import os

import msgspec

from tether.actors.paths import inside
from tether.events.session import Session

COMMANDS = {
    "status": "show the session's mode, working directory, messages, tokens and cost",
    "clear": "start a fresh context with the next message (the history stays stored)",
    "dir": "/dir PATH: work in another folder inside the engine's workspace",
    "approve": "/approve ID: let the tool call waiting for approval run",
    "deny": "/deny ID [why]: refuse it (any other message while one waits also says no)",
    "plan": "switch to plan mode: explore, write the plan file, then review the plan",
    "edit": "switch to auto mode: the configured tools' escalations are approved",
    "default": "switch to default mode: escalations are asked (during a plan review: "
               "implement the plan in it)",
    "proceed": "implement the plan waiting for review",
    "clean": "implement the plan with a fresh context",
    "adjust": "/adjust WHAT: send the plan back with what to change",
    "stop": "stop the turn that is running (the session stays, waiting for input)",
    "help": "list the commands",
}


MODE_COMMANDS = {"plan": "plan", "edit": "auto", "default": "default"}
"""Commands that switch the session's mode, and the mode each switches to."""

PLAN_COMMANDS = {"proceed": "proceed", "clean": "clean_proceed", "adjust": "adjust"}
"""Answers to a plan review, and the choice each makes."""


class Command(msgspec.Struct, frozen=True):
    """A parsed command: its name (lower case, without the slash) and its argument text."""

    name: str
    args: str


def parse_command(text: str) -> Command | None:
    """The command in ``text``, or None when it is an ordinary message."""
    stripped = text.strip()
    if not stripped.startswith("/") or stripped.startswith("//"):
        return None
    head, _, rest = stripped[1:].partition(" ")
    if not head:
        return None
    return Command(head.lower(), rest.strip())


def help_text() -> str:
    """Every command with what it does: a heading, then one line each."""
    width = max(len(name) for name in COMMANDS) + 1
    lines = [f"  /{name:<{width}} {what}" for name, what in COMMANDS.items()]
    return "commands:\n" + "\n".join(lines)


def status_text(session: Session) -> str:
    """What /status shows."""
    return (
        f"session {session.session_id} ({session.name}): {session.status}; mode "
        f"{session.mode}; "
        f"working directory {session.workspace}; {len(session.history)} messages in "
        f"context, {session.turns} turn(s); {session.input_tokens}+{session.output_tokens} "
        f"tokens, ${session.cost_usd:.4f}; auto-approvals: "
        f"{', '.join(session.auto_approve) or 'none'}"
    )


def resolve_dir(current: str, requested: str, root: str) -> str | None:
    """The folder ``/dir requested`` means (relative to ``current``), or None when it is
    outside ``root`` or is not a folder."""
    try:
        path = os.path.realpath(os.path.join(current, os.path.expanduser(requested)))
        root = os.path.realpath(root)
    except (ValueError, OSError):  # a NUL byte, say: no such folder
        return None
    if not inside(path, root):
        return None
    return path if os.path.isdir(path) else None
