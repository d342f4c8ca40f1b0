"""A read model kept exactly once: tables, a position, and the changes each event makes.

Subclasses declare ``NAME`` and ``TABLES`` and implement :meth:`TrackedView.changes` (pure:
the row changes one domain event makes). The base class builds the recorder for the
store in use, reports its position, and applies each notification with its tracking
record in one transaction; a position already applied is skipped.

An event the view cannot make a change of (it does not decode, the view's code fails on
it, or the store refuses its values, say a key too long to index) is passed over: logged
as an ERROR with its position, and recorded, with its tracking record, in the view's own
``passed_over`` table (:meth:`TrackedView.passed_over`: a query can say it is
incomplete), so one odd event cannot stop the view, or the engine start that waits for
it. The event stays in the log: a view rebuilt once that is fixed applies it. A store
that fails (down, locked, its tables missing) is not passed over: the batch is raised,
to be tried again.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any, ClassVar

from eventsourcing.domain import EventSourcingError
from eventsourcing.persistence import (
    DataError,
    InfrastructureFactory,
    IntegrityError,
    MapperDeserialisationError,
    Tracking,
)
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
log = logging.getLogger(__name__)

PASSED_OVER = Table("passed_over", (("position", "int"), ("topic", "text"),
                                    ("originator", "text"), ("error", "text")),
                    key=("position",))
"""Every view's record of the events it passed over."""


def _caused_by_the_event(error: EventSourcingError) -> bool:
    """Whether the store refused the event's values (a data exception, SQLSTATE class
    22, or a limit exceeded, class 54, such as a key too long to index), which trying
    again cannot change, rather than failing itself."""
    if isinstance(error, DataError):
        return True
    state = str(getattr(error.__cause__, "sqlstate", "") or "")
    return state[:2] in ("22", "54")


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
        self.recorder: Any = self.factory.tracking_recorder(
            recorder_class(base, (*self.TABLES, PASSED_OVER)))

    def changes(self, domain_event: Any, position: int) -> list[Change]:
        """The row changes ``domain_event`` (at notification id ``position``) makes; none
        for events the view ignores."""
        raise NotImplementedError

    def position(self) -> int:
        """The last notification id applied (0 before the first)."""
        return int(self.recorder.max_tracking_id(APPLICATION) or 0)

    def consume(self, notifications: Sequence[Any]) -> None:
        """Apply a batch of notifications, each exactly once (an event no change can be
        made of is passed over; a store that fails raises)."""
        for notification in notifications:
            tracking = Tracking(APPLICATION, notification.id)
            try:
                domain_event = self.app.mapper.to_domain_event(notification)
                self.recorder.apply(self.changes(domain_event, notification.id), tracking)
            except IntegrityError:
                continue  # already applied (another follower got there first)
            except MapperDeserialisationError as exc:
                self._pass_over(notification, tracking, exc)
            except EventSourcingError as exc:
                if not _caused_by_the_event(exc):
                    raise  # the store or its connections failed: not this event's doing
                self._pass_over(notification, tracking, exc)
            except Exception as exc:  # the view's own code failed on this event
                self._pass_over(notification, tracking, exc)

    def _pass_over(self, notification: Any, tracking: Tracking, error: Exception) -> None:
        log.error("%s: passed over the event at position %d (%s of %s): %s: %s",
                  self.NAME, notification.id, notification.topic, notification.originator_id,
                  type(error).__name__, error, exc_info=error)
        row = {"position": notification.id, "topic": notification.topic,
               "originator": str(notification.originator_id),
               "error": f"{type(error).__name__}: {error}"[:1000]}
        with contextlib.suppress(IntegrityError):  # another follower got there first
            self.recorder.apply([Change(PASSED_OVER.name, (notification.id,), lambda _: row)],
                                tracking)

    def passed_over(self) -> list[Row]:
        """The events this view passed over (position, topic, originator, error), oldest
        first."""
        return self.rows(PASSED_OVER.name, order="position")

    def rows(self, table: str, where: Row | None = None, order: str = "") -> list[Row]:
        """Rows of one of the view's tables."""
        result: list[Row] = self.recorder.rows(table, where, order)
        return result

    def close(self) -> None:
        """Release the view's database connections."""
        self.factory.close()
