"""Who may decide for a session: send it messages and commands, approve its calls, answer
its questions, review its plans, act on it through the manager (kill, fork, read or change
its conversation).

Its owner (the principal whose message started it; a fork's is its source's) and the
approvers the settings name for its home channel, the one it was started on (``approvers
= {channel = [users]}``; the channel ``"*"`` names approvers for every chat). Anyone else
who tries is refused, and the refusal is recorded (``tether audit --refused``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["Approvers", "may_decide", "refusal_reason"]

Approvers = Mapping[str, Sequence[str]]
"""Per channel (or ``"*"``), the principals who may decide besides a session's owner."""


def may_decide(user: str, owner: str, channel: str, approvers: Approvers) -> bool:
    """Whether ``user`` may decide for a session ``owner`` owns, asked in ``channel``."""
    return bool(user) and (user == owner or user in approvers.get(channel, ())
                           or user in approvers.get("*", ()))


def refusal_reason(user: str, what: str, session: str) -> str:
    """The sentence a refused decision is recorded and answered with; ``what`` reads
    before the session's name ("approve the calls of", "send messages to")."""
    return (f"{user} may not {what} session {session}: only its owner and the approvers "
            "the settings name for its home channel may")
