"""A read model kept exactly once: tables, a position, and the changes each event makes.

Subclasses declare ``NAME`` and ``TABLES`` and implement :meth:`TrackedView.changes` (pure:
the row changes one domain event makes). The base class builds the recorder for the
store in use, reports its position, and applies a batch of notifications with their
tracking records in one transaction (one commit per batch, not per event); a position
already applied is skipped.

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

import logging
from collections.abc import Sequence
from dataclasses import dataclass
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
        """Apply a batch of notifications, each exactly once, in one transaction (an event
        no change can be made of is passed over; a store that fails raises). When the
        batch cannot be applied whole (a position already applied, an event whose values
        the store refuses), it is applied one notification at a time."""
        planned = [self._plan(notification) for notification in notifications]
        try:
            self.recorder.apply_all([(p.changes, p.tracking) for p in planned])
        except EventSourcingError as exc:
            if not isinstance(exc, IntegrityError) and not _caused_by_the_event(exc):
                raise  # the store or its connections failed: not this batch's doing
            # else another follower applied some, or the store refused one event's values
        except Exception:
            pass  # the view's code failed on one event's row: one at a time finds which
        else:
            for p in planned:
                p.log_if_passed_over(self.NAME)
            return
        for p in planned:
            self._apply_one(p)

    def _plan(self, notification: Any) -> _Planned:
        tracking = Tracking(APPLICATION, notification.id)
        try:
            domain_event = self.app.mapper.to_domain_event(notification)
            return _Planned(notification, tracking, self.changes(domain_event, notification.id))
        except MapperDeserialisationError as exc:  # it does not decode
            return _Planned.passing_over(notification, tracking, exc)
        except EventSourcingError as exc:  # a read of the store failed (changes() may read)
            if not _caused_by_the_event(exc):
                raise
            return _Planned.passing_over(notification, tracking, exc)
        except Exception as exc:  # the view's own code failed on it
            return _Planned.passing_over(notification, tracking, exc)

    def _apply_one(self, p: _Planned) -> None:
        try:
            self.recorder.apply(p.changes, p.tracking)
        except IntegrityError:
            return  # already applied (another follower got there first)
        except EventSourcingError as exc:
            if not _caused_by_the_event(exc):
                raise
            self._record_passing_over(p, exc)
        except Exception as exc:  # the view's own code failed on this event's row
            self._record_passing_over(p, exc)
        else:
            p.log_if_passed_over(self.NAME)

    def _record_passing_over(self, p: _Planned, error: Exception) -> None:
        passing = _Planned.passing_over(p.notification, p.tracking, error)
        try:
            self.recorder.apply(passing.changes, passing.tracking)
        except IntegrityError:
            return  # another follower got there first (and said so)
        passing.log_if_passed_over(self.NAME)

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


@dataclass(frozen=True)
class _Planned:
    """What one notification changes in a view: its changes, or the record that it was
    passed over (``error``)."""

    notification: Any
    tracking: Tracking
    changes: Sequence[Change]
    error: Exception | None = None

    @classmethod
    def passing_over(cls, notification: Any, tracking: Tracking, error: Exception
                     ) -> _Planned:
        row = {"position": notification.id, "topic": notification.topic,
               "originator": str(notification.originator_id),
               "error": f"{type(error).__name__}: {error}"[:1000]}
        return cls(notification, tracking,
                   [Change(PASSED_OVER.name, (notification.id,), lambda _: row)], error)

    def log_if_passed_over(self, view: str) -> None:
        if self.error is not None:
            n = self.notification
            log.error("%s: passed over the event at position %d (%s of %s): %s: %s",
                      view, n.id, n.topic, n.originator_id, type(self.error).__name__,
                      self.error, exc_info=self.error)
