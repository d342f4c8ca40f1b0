"""The session lifecycle: which status may follow which. Pure.

``starting -> running -> completed | failed | killed``. A multi-turn session stays
``running`` between turns (it signals "waiting for input" instead); a finished session
goes back to ``running`` when it is resumed. Anything else is refused (and logged by the
caller), so a late or duplicate transition can never rewrite how a session ended.
"""

from __future__ import annotations

STATUSES = ("starting", "running", "completed", "failed", "killed")
ACTIVE = frozenset({"starting", "running"})
FINISHED = frozenset({"completed", "failed", "killed"})
LEGACY_STATUSES = {"waiting": "running"}
"""Statuses stored by earlier versions, and what they mean now: a multi-turn session
between turns used to be ``waiting``; it is ``running`` (and waiting for input)."""

_ALLOWED: dict[str, frozenset[str]] = {
    "starting": frozenset({"running", "failed", "killed"}),
    "running": FINISHED,
    "completed": frozenset({"running"}),
    "failed": frozenset({"running"}),
    "killed": frozenset({"running"}),
}


def allowed(current: str, new: str) -> bool:
    """Whether a session in ``current`` may move to ``new``."""
    return new in _ALLOWED.get(current, frozenset())


def refusal(current: str, new: str) -> str | None:
    """Why ``current -> new`` is refused, or None when it is allowed."""
    if allowed(current, new):
        return None
    if new not in STATUSES:
        return f"{new!r} is not a session status (one of {', '.join(STATUSES)})"
    return f"a {current} session cannot become {new}"
