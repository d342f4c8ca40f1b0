"""The Deliveries aggregate: what the notification router did for one session.

One per session. ``Delivered``: a planned notice (id ``<notification>.<n>``, see
:mod:`projections.outbox`) went to a route, or was skipped (debounced, nobody to tell).
``Watched``: a channel started or stopped watching the session in the foreground, with
the last output block it had seen. The router rebuilds its view of a session from this
log after a restart, and the outbox marks each delivered notice from it, so nothing is
sent twice and nothing is dropped.
"""

from __future__ import annotations

import uuid
from typing import Any

from eventsourcing.domain import Aggregate, event

DELIVERIES_NAMESPACE = uuid.UUID("3c0f7a9e-51d2-4c8b-9f6e-2a4d8b1e7c53")


def deliveries_uuid(session_id: str) -> uuid.UUID:
    """The aggregate id of session ``session_id``'s delivery log."""
    return uuid.uuid5(DELIVERIES_NAMESPACE, f"deliveries:{session_id}")


class Deliveries(Aggregate):
    """Deliveries of one session's notices, and who watches it."""

    @staticmethod
    def create_id(session_id: str, **_: Any) -> uuid.UUID:
        return deliveries_uuid(session_id)

    class Started(Aggregate.Created):
        session_id: str

    @event(Started)
    def __init__(self, session_id: str):
        self.session_id = session_id
        self.delivered = 0
        self.watchers: dict[str, int] = {}
        """Channels watching in the foreground -> the last block they had seen."""
        self.away: dict[str, int] = {}
        """Channels that went to the background -> the last block they had seen."""

    class Delivered(Aggregate.Event):
        notice: str
        kind: str
        route: str
        outcome: str

    @event(Delivered)
    def deliver(self, notice: str, kind: str, route: str, outcome: str) -> None:
        """Notice ``notice`` (of ``kind``) went to ``route``: ``sent``, ``webhook``,
        ``skipped: why`` or ``failed: why``."""
        self.delivered += 1

    class Watched(Aggregate.Event):
        channel: str
        foreground: bool
        seen: int

    @event(Watched)
    def watch(self, channel: str, foreground: bool, seen: int) -> None:
        """``channel`` watches in the foreground (or went to the background) having seen
        output blocks up to ``seen``."""
        if foreground:
            self.away.pop(channel, None)
            self.watchers[channel] = seen
        else:
            self.watchers.pop(channel, None)
            self.away[channel] = seen
