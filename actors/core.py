"""What a pure core (a session's, the interaction coordinator's) hands its actor shell.

A core's ``decide`` changes no part of the world: it records events on aggregates and
lists effects. Its shell saves the aggregates in one save, then performs the effects in
order. The two effects every core has are here; each core adds its own.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import msgspec
from eventsourcing.domain import Aggregate

__all__ = ["Outcome", "Reply", "Send"]

EffectT = TypeVar("EffectT")


class Send(msgspec.Struct, frozen=True):
    """Tell ``message`` to ``subject``."""

    subject: str
    message: Any


class Reply(msgspec.Struct, frozen=True):
    """Answer the request the decision was about (nothing when it was not a request)."""

    message: Any


class Outcome(msgspec.Struct, Generic[EffectT], frozen=True):
    """What one input decided: the aggregates holding the new events (saved together,
    before any effect), and the effects, in order."""

    aggregates: list[Aggregate]
    effects: list[EffectT]

    @property
    def events(self) -> list[Any]:
        """The new events, aggregate by aggregate, each in the order recorded."""
        return [e for aggregate in self.aggregates for e in aggregate.pending_events]
