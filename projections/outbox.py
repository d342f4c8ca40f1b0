"""The notification outbox: every notice a session event makes, planned exactly once.

Each session event becomes zero or more rows (id ``<notification id>.<n>``, in log
order) with the notice's kind, text and audience (:func:`projections.notices.plan_notices`);
a ``Deliveries.Delivered`` event marks its row delivered. Both happen with the view's
tracking record, so after a restart the router finds exactly the notices still to send:
the undelivered rows at or before the view's position.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from tether.events.application import event_data
from tether.events.deliveries import Deliveries
from tether.events.messages import PlannedNotice
from tether.events.session import Session
from tether.projections.notices import plan_notices
from tether.projections.tables import Change, Row, Table
from tether.projections.view import TrackedView

log = logging.getLogger(__name__)

OUTBOX = Table(
    "notice_outbox",
    (
        ("id", "text"), ("position", "int"), ("n", "int"), ("session_id", "text"),
        ("kind", "text"), ("text", "text"), ("audience", "text"), ("delivered", "int"),
        ("generation", "int"),
    ),
    key=("id",),
)


def notice_id(position: int, n: int) -> str:
    """The id of the ``n``-th notice of the event at notification id ``position``."""
    return f"{position}.{n}"


class Outbox(TrackedView):
    """Planned notices and whether each was delivered."""

    NAME = "NoticeOutbox"
    TABLES = (OUTBOX,)

    def changes(self, domain_event: Any, position: int) -> list[Change]:
        if isinstance(domain_event, Deliveries.Delivered):
            def mark(row: Row | None) -> Row | None:
                return {**row, "delivered": 1} if row is not None else None
            return [Change(OUTBOX.name, (domain_event.notice,), mark)]
        if not isinstance(domain_event, Session.Event):
            return []
        session_id = self.app.session_id_of(domain_event)
        if session_id is None:
            return []
        return [Change(OUTBOX.name, (notice.id,), _insert({
                    **msgspec.structs.asdict(notice), "delivered": 0}))
                for notice in planned_notices(domain_event, position, session_id)]

    def pending(self) -> list[Row]:
        """Notices not delivered yet, in the order they were planned."""
        return self.rows(OUTBOX.name, {"delivered": 0}, order="position,n")

    def replies(self, session_id: str) -> list[Row]:
        """A session's replies (its output blocks), oldest first."""
        return self.rows(OUTBOX.name, {"session_id": session_id, "kind": "reply"},
                         order="position,n")


def planned_notices(domain_event: Any, position: int, session_id: str) -> list[PlannedNotice]:
    """The notices session event ``domain_event``, stored at notification id
    ``position``, makes (as the bus sees it: its name and data); none for an event
    whose data does not have its event's shape (logged)."""
    try:
        planned = plan_notices(type(domain_event).__name__, event_data(domain_event))
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        log.warning("outbox: no notice for %s at %d: %r", domain_event, position, exc)
        return []
    return [
        PlannedNotice(id=notice_id(position, n), position=position, n=n,
                      session_id=session_id, kind=p.kind, text=p.text, audience=p.audience,
                      generation=int(getattr(domain_event, "generation", 0) or 0)
                      if p.kind == "reply" else 0)
        for n, p in enumerate(planned)
    ]


def _insert(row: Row) -> Any:
    def update(current: Row | None) -> Row | None:
        return current if current is not None else row
    return update
