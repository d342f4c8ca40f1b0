"""The Interaction aggregate: one thing put to a chat and its answer.

Kinds: ``approval`` (may a tool call run?), ``question`` (the model asks the user) and
``plan_review`` (proceed, clean proceed or adjust). Opened when the coordinator asks;
then exactly one of answered (an approval: by whom, yes or no, why), replied (a question's
answer), chosen (a plan review's choice), expired (no answer in time: a no) or cancelled
(the session failed, was killed or restarted).
"""

from __future__ import annotations

from eventsourcing.domain import Aggregate, event


class Interaction(Aggregate):
    """Something asked of a session's chat."""

    class Opened(Aggregate.Created):
        """Declared explicitly so that ``kind`` and ``text``, added later, have defaults:
        interactions stored before them were approvals."""

        interaction_id: str
        session_id: str
        call_id: str
        tool: str
        summary: str
        reason: str
        channel: str
        deadline: str
        kind: str = "approval"
        text: str = ""

    @event(Opened)
    def __init__(self, interaction_id: str, session_id: str, call_id: str, tool: str,
                 summary: str, reason: str, channel: str, deadline: str,
                 kind: str = "approval", text: str = ""):
        self.interaction_id = interaction_id
        self.session_id = session_id
        self.call_id = call_id
        self.kind = kind
        self.outcome = "pending"

    class Answered(Aggregate.Event):
        approved: bool
        by: str
        reason: str

    @event(Answered)
    def answer(self, approved: bool, by: str, reason: str) -> None:
        self.outcome = "approved" if approved else "denied"

    class Replied(Aggregate.Event):
        answer: str
        by: str

    @event(Replied)
    def reply(self, answer: str, by: str) -> None:
        self.outcome = "answered"

    class Chosen(Aggregate.Event):
        choice: str
        feedback: str
        by: str

    @event(Chosen)
    def choose(self, choice: str, feedback: str, by: str) -> None:
        self.outcome = choice

    class Expired(Aggregate.Event):
        pass

    @event(Expired)
    def expire(self) -> None:
        self.outcome = "expired"

    class Cancelled(Aggregate.Event):
        reason: str

    @event(Cancelled)
    def cancel(self, reason: str) -> None:
        self.outcome = "cancelled"
