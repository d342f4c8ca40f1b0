"""The RuleLog aggregate: a session's TTSR monitor's record of rules that fired.

The monitor rebuilds its "already fired" set from this log after a restart, so a rule
limited to once per session stays limited across restarts.
"""

from __future__ import annotations

import uuid
from typing import Any

from eventsourcing.domain import Aggregate, event

RULELOG_NAMESPACE = uuid.UUID("a7d9e0c4-2b61-4f3a-8e25-93c1d4b6f702")


def rulelog_uuid(session_id: str) -> uuid.UUID:
    """The aggregate id of session ``session_id``'s rule log."""
    return uuid.uuid5(RULELOG_NAMESPACE, f"ttsr:{session_id}")


class RuleLog(Aggregate):
    """Rules that fired in one session's stream."""

    @staticmethod
    def create_id(session_id: str, **_: Any) -> uuid.UUID:
        return rulelog_uuid(session_id)

    @event("Started")
    def __init__(self, session_id: str):
        self.session_id = session_id
        self.fired: list[str] = []

    @event("TtsrTriggered")
    def trigger(self, rules: list[str], source: str, offset: int, generation: int) -> None:
        for name in rules:
            if name not in self.fired:
                self.fired.append(name)
