"""The ActorLog aggregate: failures of one actor in one engine process.

Sessions record their own failures on their aggregate; every other actor (gatekeeper,
router, manager, TTSR monitor) records them here, one log per process and actor name, so
gatekeepers in several processes never contend for one aggregate.
"""

from __future__ import annotations

import uuid
from typing import Any

from eventsourcing.domain import Aggregate, event

ACTORLOG_NAMESPACE = uuid.UUID("5c2e9f4a-7b1d-4e63-8a0f-2d9c6b3e1f58")


def actorlog_uuid(process: str, actor: str) -> uuid.UUID:
    """The aggregate id of ``actor``'s log in engine process ``process``."""
    return uuid.uuid5(ACTORLOG_NAMESPACE, f"{process}:{actor}")


class ActorLog(Aggregate):
    """What went wrong with one actor of one process."""

    @staticmethod
    def create_id(process: str, actor: str, **_: Any) -> uuid.UUID:
        return actorlog_uuid(process, actor)

    class Opened(Aggregate.Created):
        process: str
        actor: str

    @event(Opened)
    def __init__(self, process: str, actor: str):
        self.process = process
        self.actor = actor
        self.failures = 0
        self.stopped = False

    class ActorFailed(Aggregate.Event):
        error: str
        restarted: bool

    @event(ActorFailed)
    def record_failure(self, error: str, restarted: bool) -> None:
        self.failures += 1
        self.stopped = not restarted
