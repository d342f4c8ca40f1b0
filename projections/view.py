"""A read model kept exactly once: tables, a position, and the changes each event makes.

Subclasses declare ``NAME`` and ``TABLES`` and implement :meth:`TrackedView.changes` (pure:
the row changes one domain event makes). The base class builds the recorder for the
store in use, reports its position, and applies each notification with its tracking
record in one transaction; a position already applied is skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from eventsourcing.persistence import InfrastructureFactory, IntegrityError, Tracking
from eventsourcing.utils import Environment

from tether.events.application import TetherApplication
from tether.projections.tables import (
    Change,
    PostgresViewRecorder,
    Row,
    SQLiteViewRecorder,
    Table,
    recorder_class,
)

APPLICATION = TetherApplication.name


class TrackedView:
    """Base of every projection over the Tether application's log."""

    NAME: ClassVar[str] = ""
    TABLES: ClassVar[tuple[Table, ...]] = ()

    def __init__(self, app: TetherApplication, env: dict[str, str]) -> None:
        self.app = app
        self.factory = InfrastructureFactory.construct(Environment(self.NAME, env))
        base = (
            PostgresViewRecorder
            if env.get("PERSISTENCE_MODULE") == "eventsourcing.postgres"
            else SQLiteViewRecorder
        )
        self.recorder: Any = self.factory.tracking_recorder(recorder_class(base, self.TABLES))

    def changes(self, domain_event: Any, position: int) -> list[Change]:
        """The row changes ``domain_event`` (at notification id ``position``) makes; none
        for events the view ignores."""
        raise NotImplementedError

    def position(self) -> int:
        """The last notification id applied (0 before the first)."""
        return int(self.recorder.max_tracking_id(APPLICATION) or 0)

    def consume(self, notifications: Sequence[Any]) -> None:
        """Apply a batch of notifications, each exactly once."""
        for notification in notifications:
            domain_event = self.app.mapper.to_domain_event(notification)
            try:
                self.recorder.apply(
                    self.changes(domain_event, notification.id),
                    Tracking(APPLICATION, notification.id),
                )
            except IntegrityError:
                continue  # already applied (another follower got there first)

    def rows(self, table: str, where: Row | None = None, order: str = "") -> list[Row]:
        """Rows of one of the view's tables."""
        result: list[Row] = self.recorder.rows(table, where, order)
        return result

    def close(self) -> None:
        """Release the view's database connections."""
        self.factory.close()
