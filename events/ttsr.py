"""The RuleLog aggregate: a session's TTSR monitor's record of rules that fired.

The monitor rebuilds its injection history (each rule with the turn it fired in) from
this log after a restart, a resume or a fork, so ``once`` and ``after-gap`` hold across
them. One log per session: records never leak between sessions.
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
        self.injections: list[tuple[str, int]] = []

    class TtsrTriggered(Aggregate.Event):
        """Declared explicitly so fields added later have defaults: triggers stored before
        ``turn`` and ``deferred`` existed still load (turn 0, not deferred)."""

        rules: list[str]
        source: str
        offset: int
        generation: int
        turn: int = 0
        deferred: bool = False

    @event(TtsrTriggered)
    def trigger(
        self,
        rules: list[str],
        source: str,
        offset: int,
        generation: int,
        turn: int = 0,
        deferred: bool = False,
    ) -> None:
        """``rules`` matched in ``source`` (ending at ``offset``) during ``turn``
        (completed turns before it); ``deferred``: reminded after the turn, no abort."""
        for name in rules:
            if name not in self.fired:
                self.fired.append(name)
            self.injections.append((name, turn))
