"""The relay: copies every stored event, in order, to the JetStream stream of events.

**Wire format.** Each event becomes a JSON :class:`events.messages.RelayedEvent` on
``<ns>.evt.<aggregate>.<id>.<event>`` with three headers: ``Nats-Msg-Id`` and
``Tether-Notification-Id``, both the store's notification id, and ``Tether-Digest``, the
hex SHA-256 of ``"<id>\\n<subject>\\n"`` followed by the payload (:func:`message_digest`).
Anything sent twice around a crash falls inside the stream's duplicate window and is
dropped by the server.

**Where it resumes.** JetStream itself holds the position, but the stream stores any
publish on ``<ns>.evt.>``, by anyone, so a header is never trusted on its own. A message is
the relay's own only if the store holds the notification its ``Tether-Notification-Id``
names and the message's subject and payload are exactly what the relay renders from that
notification (whole, or truncated as below); its ``Tether-Digest``, when present, must be
their digest (messages relayed before the digest existed carry none and still verify by
content). On start the relay walks back from the end of the stream past the messages that
fail this check, at most ``SCAN_BACK`` of them, and resumes after the newest one that
passes. Every message that fails is logged (WARNING, with its subject, stream sequence
and why) and counted in :attr:`EventRelay.foreign_messages`.

**Alarms.** Besides foreign messages, counted and logged at ERROR:

* a publish JetStream did not store (refused, unanswered, no stream): counted in
  :attr:`EventRelay.publish_failures`; the batch is retried and, before the retry, the
  position is verified against the stream again (the stream is recreated if it is gone);
* a gap, counted in :attr:`EventRelay.gaps`: that verification finds the stream's newest
  own event before what JetStream had acknowledged (stream deleted, purged or rewritten:
  the relay goes back and relays the missing events again); JetStream dropped an event as
  a duplicate of a message that is not it (another publisher used its ``Nats-Msg-Id``
  within the window: the event is published again under ``Nats-Msg-Id``
  ``<id>-<digest>``, after the rest of its batch); or none of the last ``SCAN_BACK``
  messages verifies (the position cannot be told: a start relays from the first event,
  duplicates rather than a loss, and a running relay keeps its own position).

The counters live as long as the process and are exposed on ``/metrics``: the relay is a
Prometheus collector (:meth:`EventRelay.collect`).

**Limits.** An exact copy of an older relayed message, published again after the
duplicate window, verifies: a relay started after it resumes there and relays the later
events again (duplicates, never a loss). The rendering must stay deterministic: if a
release changes ``RelayedEvent`` or an event's data, messages relayed before it no longer
verify: they are reported as foreign, and the relay resumes after the newest message that
still verifies (from the first event if none of the last ``SCAN_BACK`` does).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Any, NamedTuple

import msgspec
from nats.js.api import PubAck, RawStreamMsg, StreamConfig
from nats.js.errors import NotFoundError
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tether.adapters.nats_bus import NatsBus
from tether.events.application import TetherApplication, aggregate_name, event_data
from tether.events.messages import RelayedEvent
from tether.events.subjects import Subjects
from tether.projections.follower import SETTLE, Follower, Settler

log = logging.getLogger(__name__)

NOTIFICATION_HEADER = "Tether-Notification-Id"
DIGEST_HEADER = "Tether-Digest"
MSG_ID_HEADER = "Nats-Msg-Id"
DUPLICATE_WINDOW = 120.0
SCAN_BACK = 1000
"""How many messages at the end of the stream the relay examines to find its own newest."""
DEFAULT_MAX_PAYLOAD = 1024 * 1024
PAYLOAD_HEADROOM = 4096
"""Bytes kept free under the server's max_payload for headers and protocol framing."""
ACK_TIMEOUT = 10.0
"""Seconds to wait for JetStream to acknowledge one event."""

_NOTIFICATION_ID = re.compile(r"[1-9][0-9]{0,18}")


def message_digest(notification_id: int, subject: str, payload: bytes) -> str:
    """The ``Tether-Digest`` of a relayed message: hex SHA-256 of the notification id,
    the subject and the payload (``"<id>\\n<subject>\\n"`` then the payload bytes)."""
    return hashlib.sha256(f"{notification_id}\n{subject}\n".encode() + payload).hexdigest()


class Outgoing(NamedTuple):
    """One event as the relay publishes it."""

    id: int
    subject: str
    payload: bytes
    digest: str

    def headers(self, *, qualified: bool = False) -> dict[str, str]:
        """The message's headers; ``qualified`` makes ``Nats-Msg-Id`` ``<id>-<digest>``
        (used when another message took the plain id)."""
        msg_id = f"{self.id}-{self.digest}" if qualified else str(self.id)
        return {MSG_ID_HEADER: msg_id, NOTIFICATION_HEADER: str(self.id),
                DIGEST_HEADER: self.digest}


class RelayCounters(msgspec.Struct, frozen=True):
    """The relay's alarms since the process started."""

    foreign_messages: int = 0
    publish_failures: int = 0
    gaps: int = 0
    position: int = 0


class EventRelay(Collector):
    """Follows the event log and publishes each event to JetStream (woken by ``settler``
    when given, else a moment after each save)."""

    def __init__(
        self,
        app: TetherApplication,
        bus: NatsBus,
        subjects: Subjects,
        *,
        poll_interval: float = 0.5,
        ack_timeout: float = ACK_TIMEOUT,
        settler: Settler | None = None,
    ) -> None:
        self.app = app
        self.bus = bus
        self.subjects = subjects
        self.ack_timeout = ack_timeout
        self.relayed = 0
        self._position = 0
        self._recheck = False
        self.resumed_from = 0
        """The notification id of the newest verified own message the start found in
        JetStream (relaying resumed after it)."""
        self.foreign_messages = 0
        """Messages found on the stream that failed the check (never trusted)."""
        self.publish_failures = 0
        """Batches whose publish JetStream did not store (each retried)."""
        self.gaps = 0
        """Times the stream's verified position disagreed with what the relay expected."""
        self.follower = Follower(
            app,
            name="relay",
            position=self._current_position,
            consume=self._publish_batch,
            poll_interval=poll_interval,
            settle=SETTLE,
            settler=settler,
        )

    def start(self) -> EventRelay:
        """Create the stream if needed, find the newest message in it that verifies as
        the relay's own, and follow the log from the next notification."""
        self.bus.call(self._ensure_stream)
        verified = self._verified_tail()
        if verified is None:
            log.error("relay: the position in %s cannot be verified; relaying from the "
                      "first event (JetStream drops what it still holds within %.0f s)",
                      self.subjects.events_stream, DUPLICATE_WINDOW)
        self._position = verified or 0
        self.resumed_from = self._position
        self.follower.start()
        return self

    def stop(self) -> None:
        """Relay what is left (best effort), then stop following; the next start resumes
        after the last verified event in the stream."""
        try:
            self.follower.catch_up()
        except Exception:
            log.warning("relay: final catch-up failed; the next start will resume", exc_info=True)
        self.follower.stop()

    def catch_up(self) -> int:
        """Relay everything stored so far (blocking); returns how many were sent."""
        return self.follower.catch_up()

    @property
    def position(self) -> int:
        """The notification id of the last event acknowledged by JetStream."""
        return self._position

    def counters(self) -> RelayCounters:
        """The alarm counters and the position, as of now."""
        return RelayCounters(foreign_messages=self.foreign_messages,
                             publish_failures=self.publish_failures, gaps=self.gaps,
                             position=self._position)

    def collect(self) -> Iterable[Metric]:
        """The counters as Prometheus metric families (the relay is a collector: register
        it in the registry ``/metrics`` serves)."""
        c = self.counters()
        return [
            CounterMetricFamily(
                "tether_relay_foreign_messages",
                "Messages on the event stream that failed the relay's check (not its own); "
                "never trusted as a position.", value=c.foreign_messages),
            CounterMetricFamily(
                "tether_relay_publish_failures",
                "Relay publishes JetStream did not store (refused or unanswered); each is "
                "retried.", value=c.publish_failures),
            CounterMetricFamily(
                "tether_relay_gaps",
                "Times the stream's verified position disagreed with the relay's: events "
                "missing from the stream, an event's Nats-Msg-Id taken by another message, "
                "or no verifiable position.", value=c.gaps),
            GaugeMetricFamily(
                "tether_relay_position",
                "The last notification id JetStream acknowledged from the relay.",
                value=c.position),
        ]

    async def _ensure_stream(self) -> None:
        config = StreamConfig(
            name=self.subjects.events_stream,
            subjects=[self.subjects.all_events],
            duplicate_window=DUPLICATE_WINDOW,
        )
        try:
            await self.bus.js.stream_info(config.name or "")
        except NotFoundError:
            await self.bus.js.add_stream(config)

    # --- verifying what the stream holds -----------------------------------------------

    def check(self, subject: str, payload: bytes, headers: Mapping[str, str] | None,
              head: int | None = None) -> str | None:
        """None if a message on the stream is the relay's own, else why not.

        Own means: its ``Tether-Notification-Id`` names a notification the store holds
        (``head``: the store's newest id, read if not given), its subject and payload are
        what :meth:`_render` makes of that notification (whole or truncated), and its
        ``Tether-Digest``, if any, is their digest. Reads the store; call it off the loop.
        """
        value = (headers or {}).get(NOTIFICATION_HEADER)
        if value is None:
            return f"no {NOTIFICATION_HEADER} header"
        if not _NOTIFICATION_ID.fullmatch(value):
            return f"{NOTIFICATION_HEADER} {value[:40]!r} is not a notification id"
        nid = int(value)
        head = self.app.max_notification_id() if head is None else head
        if nid > head:
            return f"notification {nid} is beyond the store's newest ({head})"
        found = self.app.recorder.select_notifications(start=nid, limit=1)
        if not found or found[0].id != nid:
            return f"notification {nid} is not in the store"
        digest = message_digest(nid, subject, payload)
        claimed = (headers or {}).get(DIGEST_HEADER)
        if claimed is not None and claimed != digest:
            return f"its {DIGEST_HEADER} does not match its subject and payload"
        own_subject, relayed, whole = self._render(found[0])
        if subject != own_subject or (payload != whole
                                      and payload != self._truncated(relayed, whole)):
            return f"its subject or payload differs from notification {nid} in the store"
        return None

    def _verified_tail(self) -> int | None:
        """The notification id of the newest message in the stream that passes
        :meth:`check` (0 if none does and the walk reached the stream's first message;
        None, counted as a gap, if ``SCAN_BACK`` messages were examined without finding
        one). Each message that fails is reported and counted as foreign."""
        stream = self.subjects.events_stream
        info = self.bus.call(lambda: self.bus.js.stream_info(stream))
        first = info.state.first_seq or 1
        seq = info.state.last_seq or 0
        head = self.app.max_notification_id()
        for _ in range(SCAN_BACK):
            if seq < first or seq <= 0:
                return 0
            msg: RawStreamMsg | None = self.bus.call(partial(self._get, seq))
            seq -= 1
            if msg is None:
                continue
            reason = self.check(msg.subject or "", msg.data or b"", msg.headers, head)
            if reason is None:
                return int((msg.headers or {})[NOTIFICATION_HEADER])
            self.foreign_messages += 1
            log.warning("relay: foreign message on %s (stream %s, sequence %s): %s; "
                        "not trusted as a position", msg.subject, stream, msg.seq, reason)
        if seq < first or seq <= 0:
            return 0
        self.gaps += 1
        log.error("relay: none of the last %d messages of %s is a verifiable relayed event",
                  SCAN_BACK, stream)
        return None

    async def _get(self, seq: int) -> RawStreamMsg | None:
        try:
            return await self.bus.js.get_msg(self.subjects.events_stream, seq)
        except NotFoundError:
            return None  # deleted

    def _current_position(self) -> int:
        """The follower's position: after a failed publish, first verified again."""
        if self._recheck:
            self._reverify()
        return self._position

    def _reverify(self) -> None:
        self.bus.call(self._ensure_stream)  # recreated if it was deleted
        verified = self._verified_tail()
        self._recheck = False
        if verified is not None and verified < self._position:
            self.gaps += 1
            log.error("relay: gap in %s: its newest own event is %d but JetStream had "
                      "acknowledged up to %d (stream deleted, purged or rewritten?); "
                      "relaying again from %d", self.subjects.events_stream, verified,
                      self._position, verified + 1)
            self._position = verified

    # --- publishing --------------------------------------------------------------------

    def _publish_batch(self, notifications: Sequence[Any]) -> None:
        prepared = [self._prepare(n) for n in notifications]
        self.bus.call(lambda: self._send(prepared), timeout=60)

    def _render(self, notification: Any) -> tuple[str, RelayedEvent, bytes]:
        """(subject, envelope, whole payload) of a stored notification."""
        domain_event: Any = self.app.mapper.to_domain_event(notification)
        aggregate, event_name = aggregate_name(notification.topic)
        originator = domain_event.originator_id
        short = self._short_id(aggregate, originator, domain_event)
        relayed = RelayedEvent(
            id=notification.id,
            aggregate=aggregate,
            aggregate_id=short,
            originator_id=str(originator),
            version=domain_event.originator_version,
            event=event_name,
            timestamp=domain_event.timestamp.isoformat(),
            data=event_data(domain_event),
        )
        subject = self.subjects.event(aggregate, short, event_name)
        return subject, relayed, msgspec.json.encode(relayed)

    @staticmethod
    def _truncated(relayed: RelayedEvent, whole: bytes) -> bytes:
        """The payload of an event too big for the bus: the envelope without the data."""
        data = {"truncated": True, "size": len(whole)}
        return msgspec.json.encode(msgspec.structs.replace(relayed, data=data))

    def _prepare(self, notification: Any) -> Outgoing:
        subject, relayed, payload = self._render(notification)
        if len(payload) > self._max_payload() - PAYLOAD_HEADROOM:
            # Too big for the bus (a huge tool input, say): relay the envelope without the
            # data, so the stream keeps its order and nothing stalls. The store has it all.
            payload = self._truncated(relayed, payload)
        return Outgoing(notification.id, subject, payload,
                        message_digest(notification.id, subject, payload))

    def _max_payload(self) -> int:
        value = getattr(self.bus.nc, "max_payload", 0)
        return int(value) if value else DEFAULT_MAX_PAYLOAD

    def _short_id(self, aggregate: str, originator: uuid.UUID, domain_event: Any) -> str:
        # A session's events, and its rule log's, go out under the short session id so
        # a watcher can subscribe to <ns>.evt.*.<session id>.>.
        if aggregate not in ("session", "rulelog"):
            return str(originator)
        return self.app.session_id_of(domain_event) or str(originator)

    async def _send(self, prepared: list[Outgoing]) -> None:
        # Pipelined: publish all, then await the acks in order. Order on the wire is the
        # order of publishing; the position only moves past an acknowledged event.
        futures: list[tuple[Outgoing, asyncio.Future[PubAck]]] = []
        current: Outgoing | None = None
        try:
            for out in prepared:
                current = out
                future = await self.bus.js.publish_async(out.subject, out.payload,
                                                         headers=out.headers())
                futures.append((out, future))
            for out, future in futures:
                current = out
                await self._acknowledged(out, future)
                self._position = max(self._position, out.id)
                self.relayed += 1
        except Exception as exc:
            self.publish_failures += 1
            self._recheck = True
            where = f"event {current.id} ({current.subject})" if current else "a batch"
            log.error("relay: JetStream did not store %s: %s; will retry after verifying "
                      "the stream", where, str(exc) or type(exc).__name__)
            raise
        finally:
            for _, future in futures:
                future.cancel()  # a refused publish_async is never answered: free its slot

    async def _acknowledged(self, out: Outgoing, future: asyncio.Future[PubAck]) -> PubAck:
        """JetStream's ack for ``out``, raising if it did not store it.

        Without an ack in time (nats-py leaves the future of a refused ``publish_async``
        unanswered) the event is published once more with a plain request, which is
        idempotent and raises the server's reason. A duplicate ack is checked: if the
        message JetStream holds under the id is not this event, that is a gap, and the
        event is published again under a qualified ``Nats-Msg-Id``.
        """
        try:
            ack = await asyncio.wait_for(future, timeout=self.ack_timeout)
        except Exception:
            ack = await self.bus.js.publish(out.subject, out.payload, timeout=self.ack_timeout,
                                            headers=out.headers())
        if not ack.duplicate or await self._holds(ack.seq, out):
            return ack
        self.gaps += 1
        log.error("relay: JetStream dropped event %d (%s) as a duplicate of sequence %d, "
                  "another message with its Nats-Msg-Id; publishing it again as %s",
                  out.id, out.subject, ack.seq, f"{out.id}-{out.digest}")
        ack = await self.bus.js.publish(out.subject, out.payload, timeout=self.ack_timeout,
                                        headers=out.headers(qualified=True))
        if ack.duplicate and not await self._holds(ack.seq, out):
            raise RuntimeError(f"sequence {ack.seq} holds another message under "
                               f"Nats-Msg-Id {out.id}-{out.digest}")
        return ack

    async def _holds(self, seq: int, out: Outgoing) -> bool:
        """True if the stream's message ``seq`` is ``out`` (subject, payload and id)."""
        msg = await self._get(seq)
        return (msg is not None and msg.subject == out.subject and msg.data == out.payload
                and (msg.headers or {}).get(NOTIFICATION_HEADER) == str(out.id))
