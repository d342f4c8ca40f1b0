"""The RuleLog aggregate: a session's TTSR monitor's record of its rules and their firings.

The monitor rebuilds its injection history (each rule with the turn it fired in) from
this log after a restart, a resume or a fork, so ``once`` and ``after-gap`` hold across
them. It also records the rule files in force whenever they change (``RulesLoaded``), so
``tether rules test --session`` replays the session against the rules it really had,
wherever and by whomever the command is run. One log per session: records never leak
between sessions.
"""

from __future__ import annotations

import uuid
from typing import Any

import msgspec
from eventsourcing.domain import Aggregate, event

RULELOG_NAMESPACE = uuid.UUID("a7d9e0c4-2b61-4f3a-8e25-93c1d4b6f702")


def rulelog_uuid(session_id: str) -> uuid.UUID:
    """The aggregate id of session ``session_id``'s rule log."""
    return uuid.uuid5(RULELOG_NAMESPACE, f"ttsr:{session_id}")


class RuleSource(msgspec.Struct, frozen=True):
    """One rule file as it was loaded: where from and its whole text."""

    path: str
    origin: str
    """The folder's role: ``workspace``, ``configured``, ``user`` or ``given``."""
    text: str


class RuleLog(Aggregate):
    """Rules that fired in one session's stream."""

    @staticmethod
    def create_id(session_id: str, **_: Any) -> uuid.UUID:
        return rulelog_uuid(session_id)

    class Started(Aggregate.Created):
        session_id: str

    @event(Started)
    def __init__(self, session_id: str):
        self.session_id = session_id
        self.fired: list[str] = []
        self.injections: list[tuple[str, int]] = []
        self.sources: list[RuleSource] = []
        """The rule files in force, as last recorded (in loading order)."""

    class RulesLoaded(Aggregate.Event):
        sources: list[RuleSource]

    @event(RulesLoaded)
    def record_rules(self, sources: list[RuleSource]) -> None:
        """The monitor loaded these rule files (the first time, or they changed)."""
        self.sources = list(sources)

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
