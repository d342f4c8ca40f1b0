"""Typed snapshots: an aggregate's state kept as a msgspec Struct, so it loads back exactly.

The library's ``Snapshot`` keeps the state as a ``dict``; the typed mapper
(:mod:`events.mapper`) can then only decode it untyped (a session's history would come
back as dicts, its timestamps as strings). A :class:`TypedSnapshot` subclass declares its
``state`` as a Struct of the aggregate's attributes; the mapper decodes the stored state
straight into it, and :meth:`TypedSnapshot.mutate` gives the aggregate those values.

A snapshot is a cache of the events before it, never the record: an application loads
the events when a snapshot cannot be decoded (:meth:`events.application.TetherApplication.load`),
so changing a state Struct needs no migration, only new snapshots.
"""

from __future__ import annotations

import typing
import uuid
from dataclasses import dataclass
from typing import Any

import msgspec
from eventsourcing.domain import Aggregate, CanSnapshotAggregate, DomainEvent
from eventsourcing.utils import get_topic, resolve_topic

__all__ = ["TypedSnapshot"]

_ENVELOPE = ("_id", "_version", "_pending_events")


@dataclass(frozen=True)
class TypedSnapshot(CanSnapshotAggregate[uuid.UUID], DomainEvent):
    """A snapshot whose ``state`` is a msgspec Struct (subclasses annotate ``state`` with
    it). The Struct's fields are the aggregate's attributes, ``_created_on`` and
    ``_modified_on`` included; an attribute it lacks is refused when the snapshot is taken,
    not lost."""

    topic: str
    state: Any

    @classmethod
    def state_type(cls) -> type[msgspec.Struct]:
        """The Struct ``state`` is declared as."""
        state: type[msgspec.Struct] = typing.get_type_hints(cls)["state"]
        return state

    @classmethod
    def take(cls, aggregate: Any) -> TypedSnapshot:
        """The snapshot of ``aggregate`` as it stands (its recorded state: no pending
        events may be waiting)."""
        state_type = cls.state_type()
        attributes = {k: v for k, v in vars(aggregate).items() if k not in _ENVELOPE}
        missing = set(attributes) - set(state_type.__struct_fields__)
        if missing:
            raise TypeError(f"{state_type.__name__} lacks {sorted(missing)}: a snapshot "
                            "would lose them")
        return cls(
            originator_id=aggregate.id,
            originator_version=aggregate.version,
            timestamp=cls.create_timestamp(),
            topic=get_topic(type(aggregate)),
            state=state_type(**attributes),
        )

    def mutate(self, _: None) -> Aggregate:
        """The aggregate the snapshot was taken of."""
        cls = resolve_topic(self.topic)
        state: Any = self.state
        attributes = {name: getattr(state, name) for name in state.__struct_fields__}
        originator_id = self.originator_id
        attributes["_id"] = (originator_id if isinstance(originator_id, uuid.UUID)
                             else uuid.UUID(str(originator_id)))
        attributes["_version"] = self.originator_version
        attributes["_pending_events"] = []
        aggregate = object.__new__(cls)
        object.__setattr__(aggregate, "__dict__", attributes)
        result: Aggregate = aggregate
        return result
