"""The ToolDecision aggregate: the gatekeeper's audit record of one tool call.

One aggregate per tool call (id derived from the session, the call id and the action
hash), so gatekeepers in a queue group never contend for the same aggregate.
"""

from __future__ import annotations

import uuid
from typing import Any

import msgspec
from eventsourcing.domain import Aggregate, event

DECISION_NAMESPACE = uuid.UUID("0b8f3c1e-3c55-4d7e-9a3f-5f0e7d9b2a44")


def decision_uuid(session_id: str, call_id: str, action_hash: str) -> uuid.UUID:
    """The aggregate id of the decision about one call: a session's call id and the hash
    of what it does (a model may reuse an id for another call; that is judged anew)."""
    return uuid.uuid5(DECISION_NAMESPACE, f"decision:{session_id}:{call_id}:{action_hash}")


class StageRecord(msgspec.Struct, frozen=True):
    """One stage of a decision: ``verdict`` allow, deny, escalate or pass, and why."""

    stage: str
    verdict: str
    reason: str
    min_tier: int = 0
    rule: str = ""


class ToolDecision(Aggregate):
    """Who decided what about one tool call, and why."""

    @staticmethod
    def create_id(call_id: str, session_id: str, action_hash: str, **_: Any) -> uuid.UUID:
        return decision_uuid(session_id, call_id, action_hash)

    class Evaluated(Aggregate.Created):
        call_id: str
        session_id: str
        tool: str
        tool_input: dict[str, Any]
        action_hash: str
        decision: str
        reason: str
        tier: str

    @event(Evaluated)
    def __init__(
        self,
        call_id: str,
        session_id: str,
        tool: str,
        tool_input: dict[str, Any],
        action_hash: str,
        decision: str,
        reason: str,
        tier: str,
    ):
        self.call_id = call_id
        self.session_id = session_id
        self.tool = tool
        self.tool_input = tool_input
        self.action_hash = action_hash
        self.decision = decision
        self.reason = reason
        self.tier = tier
        self.stages: list[StageRecord] = []

    class StagesRecorded(Aggregate.Event):
        stages: list[StageRecord]

    @event(StagesRecorded)
    def record_stages(self, stages: list[StageRecord]) -> None:
        """Every stage the decision went through, in order (saved with the decision)."""
        self.stages = list(stages)
