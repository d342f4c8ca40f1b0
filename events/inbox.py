"""The RefusedMessage aggregate: a user message the inbox middleware turned away.

It is not a user message of any session (nothing of it reaches the model), but it is part
of the audit trail: who tried, on which channel, why it was refused, and how big it was.
"""

from __future__ import annotations

from eventsourcing.domain import Aggregate, event

EXCERPT = 200
"""Characters of a refused message kept for the audit trail."""


class RefusedMessage(Aggregate):
    """One refused message (its id is random: every refusal is its own record)."""

    class Refused(Aggregate.Created):
        channel: str
        user: str
        kind: str
        reason: str
        size: int
        excerpt: str

    @event(Refused)
    def __init__(self, channel: str, user: str, kind: str, reason: str, size: int,
                 excerpt: str):
        self.channel = channel
        self.user = user
        self.kind = kind
        self.reason = reason
        self.size = size
        self.excerpt = excerpt[:EXCERPT]
