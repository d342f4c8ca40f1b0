"""The Interaction aggregate: one question put to a chat (today: a tool-call approval).

Opened when the coordinator asks; then exactly one of answered (by whom, yes or no, why),
expired (no answer in time: a deny) or cancelled (the session failed or was killed).
"""

from __future__ import annotations

from eventsourcing.domain import Aggregate, event


class Interaction(Aggregate):
    """An approval asked of a session's chat."""

    @event("Opened")
    def __init__(self, interaction_id: str, session_id: str, call_id: str, tool: str,
                 summary: str, reason: str, channel: str, deadline: str):
        self.interaction_id = interaction_id
        self.session_id = session_id
        self.call_id = call_id
        self.outcome = "pending"

    @event("Answered")
    def answer(self, approved: bool, by: str, reason: str) -> None:
        self.outcome = "approved" if approved else "denied"

    @event("Expired")
    def expire(self) -> None:
        self.outcome = "expired"

    @event("Cancelled")
    def cancel(self, reason: str) -> None:
        self.outcome = "cancelled"
