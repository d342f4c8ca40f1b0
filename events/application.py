"""The Tether eventsourcing application: one event log for every aggregate.

Persistence comes from the environment handed in (SQLite or PostgreSQL, see
``adapters.store``); events are stored with the typed :class:`events.mapper.MsgspecMapper`.
After every save the listeners are called with the highest notification id just written,
so followers (the relay, projections) wake at once instead of polling.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, TypeVar

import msgspec
from eventsourcing.application import AggregateNotFoundError, Application, ProcessingEvent
from eventsourcing.domain import Aggregate, BaseAggregate, DomainEvent
from eventsourcing.persistence import MapperDeserialisationError, Recording
from eventsourcing.utils import TopicError, get_topic

from tether.events.callbacks import Callbacks
from tether.events.conversation import Conversation, locate
from tether.events.decisions import ToolDecision
from tether.events.deliveries import Deliveries
from tether.events.forest import Forest, ForestState, forest_uuid
from tether.events.inbox import RefusedMessage
from tether.events.interactions import Interaction
from tether.events.mapper import MsgspecMapper
from tether.events.messages import ContentBlock
from tether.events.session import Session, TreeSnapshot, session_uuid
from tether.events.supervision import ActorLog, actorlog_uuid
from tether.events.tree_records import (
    ContentSource,
    TreeContents,
    TreeRecord,
    TreeRecordError,
    contents_uuid,
    read_tree,
    tree_uuid,
)
from tether.events.ttsr import RuleLog, rulelog_uuid

A = TypeVar("A", bound=Aggregate)
log = logging.getLogger(__name__)

AGGREGATE_NAMES: dict[type, str] = {
    Session: "session",
    ToolDecision: "decision",
    RuleLog: "rulelog",
    ActorLog: "actorlog",
    RefusedMessage: "refusal",
    Interaction: "interaction",
    Deliveries: "delivery",
    Forest: "forest",
}
"""Short aggregate names used in relayed subjects (``<ns>.evt.<name>.<id>.<event>``)."""


def event_data(domain_event: Any) -> dict[str, Any]:
    """The event's own fields as plain JSON types (no originator id, version, time)."""
    return msgspec.to_builtins({
        k: v for k, v in vars(domain_event).items()
        if k not in ("originator_id", "originator_version", "timestamp", "originator_topic")
    })


def project(aggregate: Any, events: Iterable[Any]) -> Any:
    """``aggregate`` (None before its first event) with ``events`` applied in order."""
    # A plain loop: the library's default projector checks each event against a Protocol
    # with isinstance, which costs about half of a replay (see DESIGN.md).
    for domain_event in events:
        aggregate = domain_event.mutate(aggregate)
    return aggregate


class _Collected(ProcessingEvent[uuid.UUID]):
    """The library's :class:`ProcessingEvent`, telling events and aggregates apart by
    their classes. The library checks each object against two runtime Protocols with
    isinstance, about 20 µs apiece on Python 3.11, paid for each object of every save;
    anything that is neither class is left to the library's check."""

    def collect_events(self, *objs: Any, **kwargs: Any) -> None:
        for obj in objs:
            if isinstance(obj, DomainEvent):
                self.events.append(obj)
            elif isinstance(obj, BaseAggregate):
                self.events.extend(obj.collect_events())
                self.aggregates[obj.id] = obj
            elif obj is not None:
                super().collect_events(obj)
        self.saved_kwargs.update(kwargs)


SNAPSHOT_INTERVAL = 200
"""A session or forest is snapshotted at every this-many-th event, so loading one reads a
snapshot and fewer than this many events however long it grew."""

TREE_RECORD_AGE = 5 * SNAPSHOT_INTERVAL
"""A session's snapshot points at the record of its tree (kept apart: the tree holds
every message the session ever had; :mod:`events.tree_records`) for at most this many
events; a newer record is written with the snapshot once the tree was used since, or the
record grew older than this (the messages added since are mirrored as it is read)."""


class TetherApplication(Application[uuid.UUID]):
    """Stores and retrieves Tether's aggregates.

    Sessions and forests are snapshotted (typed, :mod:`events.snapshots`) every
    :data:`SNAPSHOT_INTERVAL` events, in the store's snapshot table. Snapshots are a
    cache: one that cannot be decoded is passed over (the events are read instead), and
    one that cannot be taken is only logged; neither fails a load or a save.
    """

    name = "tether"
    env: ClassVar[dict[str, str]] = {"MAPPER_TOPIC": get_topic(MsgspecMapper)}
    snapshotting_intervals: ClassVar[dict[type[Any], int]] = {
        Session: SNAPSHOT_INTERVAL, Forest: SNAPSHOT_INTERVAL}
    snapshotting_projectors: ClassVar[dict[type[Any], Any]] = {
        Session: project, Forest: project}

    def __init__(self, env: dict[str, str] | None = None) -> None:
        super().__init__(env)
        self._listeners: Callbacks[[int]] = Callbacks()
        self._session_ids: dict[uuid.UUID, str] = {}

    def add_listener(self, listener: Callable[[int], None]) -> Callable[[], None]:
        """Call ``listener(max_notification_id)`` after each save; returns a remover."""
        return self._listeners.add(listener)

    def save(self, *objs: Any, **kwargs: Any) -> list[Recording[uuid.UUID]]:
        """The library's ``save`` (record, snapshot, notify), collecting with
        :class:`_Collected`."""
        processing_event = _Collected()
        processing_event.collect_events(*objs, **kwargs)
        recordings = self._record(processing_event)
        self._take_snapshots(processing_event)
        self._notify(recordings)
        return recordings

    def _notify(self, recordings: list[Recording[uuid.UUID]]) -> None:
        ids = [r.notification.id for r in recordings if r.notification.id is not None]
        if ids:
            self._listeners.call(max(ids))

    def load(self, aggregate_id: uuid.UUID, kind: type[A], version: int | None = None) -> A | None:
        """The aggregate as it stood at ``version`` (latest if None), or None if absent."""
        try:
            aggregate: Any = self.repository.get(
                aggregate_id, version=version, projector_func=self._project_reading_trees
            )
        except AggregateNotFoundError:
            return None
        except (MapperDeserialisationError, TopicError):
            # A snapshot in a shape (or of a class) this release does not decode (or a bad
            # event, which the events alone will raise again): the events are the record.
            log.warning("%s: a snapshot could not be decoded; loading from the events",
                        aggregate_id, exc_info=True)
            aggregate = project(None, self.events.get(aggregate_id, lte=version))
            if aggregate is None:
                return None
        if not isinstance(aggregate, kind):
            raise TypeError(f"{aggregate_id} is a {type(aggregate).__name__}, not {kind.__name__}")
        return aggregate

    def _project_reading_trees(self, aggregate: Any, events: Iterable[Any]) -> Any:
        """:func:`project`, where a session taken from its snapshot (the first of
        ``events``, when it has one) is given the means to read the tree it keeps apart:
        an event after the snapshot may use it."""
        events = iter(events)
        first = next(events, None)
        if first is None:
            return aggregate
        aggregate = first.mutate(aggregate)
        if isinstance(aggregate, Session):  # (a no-op for a tree in hand)
            aggregate.read_tree_with(functools.partial(self._tree_at, aggregate.id))
        return project(aggregate, events)

    def _tree_at(self, session_id: uuid.UUID, at: int) -> Conversation:
        """The tree record of a session stored at its version ``at`` (its messages' blocks
        read as they are used); if it is missing or does not decode (a cache), the tree as
        the session's events up to ``at`` make it. A whole tree as the release before
        kept it (:class:`TreeSnapshot`) is read too."""
        try:
            for record in self.snapshots.get(tree_uuid(session_id), gt=at - 1, lte=at) if (
                    self.snapshots is not None) else ():
                if isinstance(record, TreeRecord):
                    return read_tree(record, ContentSource(
                        functools.partial(self._tree_contents, session_id),
                        functools.partial(self._tree_from_events, session_id, at)))
                if isinstance(record, TreeSnapshot):
                    return record.state
            log.warning("%s: no tree record at version %s; reading the events",
                        session_id, at)
        except (MapperDeserialisationError, TopicError, TreeRecordError):
            log.warning("%s: the tree record at version %s could not be decoded; reading "
                        "the events", session_id, at, exc_info=True)
        return self._replayed_tree(session_id, at)

    def _replayed_tree(self, session_id: uuid.UUID, at: int) -> Conversation:
        session = project(None, self.events.get(session_id, lte=at))
        if not isinstance(session, Session):
            raise LookupError(f"{session_id} has no session events up to version {at}")
        return session.conversation

    def _tree_contents(self, session_id: uuid.UUID, low: int, high: int
                       ) -> dict[int, list[list[ContentBlock]]]:
        """The content records of a session's tree from version ``low`` to ``high``, by
        version; LookupError when they do not decode."""
        if self.snapshots is None:
            return {}
        try:
            return {r.originator_version: r.contents for r in self.snapshots.get(
                contents_uuid(session_id), gt=low - 1, lte=high) if isinstance(r, TreeContents)}
        except (MapperDeserialisationError, TopicError) as exc:
            raise LookupError(f"a content record from version {low} to {high} could not be "
                              f"decoded ({exc})") from exc

    def _tree_from_events(self, session_id: uuid.UUID, at: int, why: str) -> ForestState:
        """What a tree read from its record at ``at`` takes its messages' blocks from when
        a content record fails it (``why``): the tree the events make."""
        log.warning("%s: %s; reading the tree's messages from the events up to version %s",
                    session_id, why, at)
        return self._replayed_tree(session_id, at).tree

    def take_snapshot(self, aggregate_id: uuid.UUID, version: int | None = None,
                      projector_func: Any = project) -> None:
        """Snapshot the aggregate at ``version`` (the library calls this after a save that
        reached an interval), a session's tree apart when it is due
        (:data:`TREE_RECORD_AGE`); a failure is logged, never raised into that save."""
        try:
            aggregate = self.load(aggregate_id, Aggregate, version)
            if aggregate is None or self.snapshots is None:
                return
            records: list[Any] = []
            if isinstance(aggregate, Session):
                records += aggregate.tree_record(every=TREE_RECORD_AGE)
            self.snapshots.put([*records, type(aggregate).Snapshot.take(aggregate)])
        except Exception:
            log.warning("%s: no snapshot at version %s", aggregate_id, version, exc_info=True)

    def session(self, session_id: str, version: int | None = None) -> Session | None:
        """The session with short id ``session_id``, or None."""
        return self.load(session_uuid(session_id), Session, version)

    def catch_up(self, aggregate: A) -> A:
        """``aggregate`` with any events stored after its version applied (others may
        append between an actor's turns); reads only the newer events."""
        caught_up: A = project(aggregate, self.events.get(aggregate.id, gt=aggregate.version))
        return caught_up

    def stored_tree(self, session_id: str) -> ForestState:
        """The tree a session stored before sessions kept their own tree recorded in its
        Forest aggregate (empty when it has none)."""
        forest = self.load(forest_uuid(session_id), Forest)
        return forest.state if forest is not None else Conversation.of_session(
            session_id).tree

    def tree(self, session_id: str) -> tuple[ForestState, str] | None:
        """A session's conversation tree and the node it stands at ("" before its first
        message is mirrored), or None when there is no such session. A session stored
        before sessions kept their own tree, whose actor has not run since, has it in its
        Forest aggregate."""
        session = self.session(session_id)
        if session is None:
            return None
        if session.keeps_tree:
            return session.conversation.tree, session.conversation.cursor
        tree = self.stored_tree(session_id)
        return tree, locate(tree, session.system_prompt, session.history)

    def rule_log(self, session_id: str) -> RuleLog | None:
        """The TTSR rule log of a session, or None if it never had rules."""
        return self.load(rulelog_uuid(session_id), RuleLog)

    def record_actor_failure(
        self, process: str, actor: str, error: str, restarted: bool
    ) -> None:
        """Append ``ActorFailed`` to the actor's log in this process (created if new)."""
        log = self.load(actorlog_uuid(process, actor), ActorLog) or ActorLog(
            process=process, actor=actor
        )
        log.record_failure(error=error, restarted=restarted)
        self.save(log)

    def session_id_of(self, domain_event: Any) -> str | None:
        """The short session id recorded on the first event of the event's aggregate (a
        session, its rule log, a tool decision): on the event itself when it carries it,
        else read once from that first event and remembered. None when there is none."""
        originator = domain_event.originator_id
        known = self._session_ids.get(originator)
        if known is not None:
            return known
        found = getattr(domain_event, "session_id", None)
        if found is None:
            first = next(iter(self.events.get(originator, lte=1)), None)
            found = getattr(first, "session_id", None)
        if isinstance(found, str):
            self._session_ids[originator] = found
            return found
        return None

    def session_events(self, session_id: str) -> list[Any]:
        """Every stored event of a session, oldest first."""
        return list(self.events.get(session_uuid(session_id)))

    def max_notification_id(self) -> int:
        """The id of the newest stored event (0 when the log is empty)."""
        return self.recorder.max_notification_id() or 0


def aggregate_name(topic: str) -> tuple[str, str]:
    """Split an event topic into (aggregate short name, event name)."""
    module_and_class = topic.split(":", 1)[1]
    *owner, event_name = module_and_class.split(".")
    owner_name = ".".join(owner)
    for cls, short in AGGREGATE_NAMES.items():
        if cls.__qualname__ == owner_name:
            return short, event_name
    return owner_name.lower() or "unknown", event_name
