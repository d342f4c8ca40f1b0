"""The relay: copies every stored event, in order, to the JetStream stream of events.

Each event becomes a JSON :class:`events.messages.RelayedEvent` on
``<ns>.evt.<aggregate>.<id>.<event>`` with the store's notification id as ``Nats-Msg-Id``
(and in the ``Tether-Notification-Id`` header). The position is JetStream itself: on start
the relay reads the newest message of the stream and carries on after its notification
id, so a stopped relay resumes with no gap; anything sent twice around a crash falls
inside the stream's duplicate window and is dropped by the server.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from typing import Any

import msgspec
from nats.js.api import StreamConfig
from nats.js.errors import NotFoundError

from adapters.nats_bus import NatsBus
from events.application import TetherApplication, aggregate_name, event_data
from events.messages import RelayedEvent
from events.subjects import Subjects
from projections.follower import Follower

log = logging.getLogger(__name__)

NOTIFICATION_HEADER = "Tether-Notification-Id"
DUPLICATE_WINDOW = 120.0
SCAN_BACK = 1000
"""How many foreign messages at the end of the stream the relay walks past on start."""
DEFAULT_MAX_PAYLOAD = 1024 * 1024
PAYLOAD_HEADROOM = 4096
"""Bytes kept free under the server's max_payload for headers and protocol framing."""


class EventRelay:
    """Follows the event log and publishes each event to JetStream."""

    def __init__(
        self,
        app: TetherApplication,
        bus: NatsBus,
        subjects: Subjects,
        *,
        poll_interval: float = 0.5,
    ) -> None:
        self.app = app
        self.bus = bus
        self.subjects = subjects
        self.relayed = 0
        self._position = 0
        self.resumed_from = 0
        """The notification id the last start found in JetStream (relaying resumed after it)."""
        self.follower = Follower(
            app,
            name="relay",
            position=lambda: self._position,
            consume=self._publish_batch,
            poll_interval=poll_interval,
        )

    def start(self) -> EventRelay:
        """Create the stream if needed, find where the last run stopped, and follow."""
        self.bus.call(self._ensure_stream)
        self._position = self.bus.call(self._last_relayed)
        self.resumed_from = self._position
        self.follower.start()
        return self

    def stop(self) -> None:
        """Relay what is left (best effort), then stop following; the next start resumes
        after the last acknowledged event."""
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

    async def _last_relayed(self) -> int:
        """The notification id of the newest relayed event in the stream (0 if none).

        Walks back past messages that other programs published on the event subjects
        (they carry no notification header), at most ``SCAN_BACK`` of them.
        """
        stream = self.subjects.events_stream
        info = await self.bus.js.stream_info(stream)
        seq = info.state.last_seq or 0
        first = info.state.first_seq or 1
        for _ in range(SCAN_BACK):
            if seq < first or seq <= 0:
                break
            try:
                msg = await self.bus.js.get_msg(stream, seq)
            except NotFoundError:
                seq -= 1
                continue
            value = (msg.headers or {}).get(NOTIFICATION_HEADER)
            if value is not None and value.isdigit():
                return int(value)
            seq -= 1
        if seq >= first and seq > 0:
            log.warning("relay: no relayed event among the last %d messages of %s; "
                        "relaying from the start", SCAN_BACK, stream)
        return 0

    def _publish_batch(self, notifications: Sequence[Any]) -> None:
        prepared = [self._prepare(n) for n in notifications]
        self.bus.call(lambda: self._send(prepared), timeout=60)

    def _prepare(self, notification: Any) -> tuple[int, str, bytes]:
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
        payload = msgspec.json.encode(relayed)
        limit = self._max_payload() - PAYLOAD_HEADROOM
        if len(payload) > limit:
            # Too big for the bus (a huge tool input, say): relay the envelope without the
            # data, so the stream keeps its order and nothing stalls. The store has it all.
            relayed.data = {"truncated": True, "size": len(payload)}
            payload = msgspec.json.encode(relayed)
        return notification.id, subject, payload

    def _max_payload(self) -> int:
        value = getattr(self.bus.nc, "max_payload", 0)
        return int(value) if value else DEFAULT_MAX_PAYLOAD

    def _short_id(self, aggregate: str, originator: uuid.UUID, domain_event: Any) -> str:
        # A session's events, and its rule log's, go out under the short session id so
        # a watcher can subscribe to <ns>.evt.*.<session id>.>.
        if aggregate not in ("session", "rulelog"):
            return str(originator)
        return self.app.session_id_of(domain_event) or str(originator)

    async def _send(self, prepared: list[tuple[int, str, bytes]]) -> None:
        # Pipelined: publish all, then await the acks in order. Order on the wire is the
        # order of publishing; the position only moves past an acknowledged event.
        futures = []
        for nid, subject, payload in prepared:
            headers = {"Nats-Msg-Id": str(nid), NOTIFICATION_HEADER: str(nid)}
            future = await self.bus.js.publish_async(subject, payload, headers=headers)
            futures.append((nid, future))
        for nid, future in futures:
            try:
                await asyncio.wait_for(future, timeout=10)
            except Exception:
                log.warning("relay: JetStream did not acknowledge event %s; will retry", nid)
                raise
            self._position = max(self._position, nid)
            self.relayed += 1
