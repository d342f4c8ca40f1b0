"""The notification router actor: tells each chat what its sessions are doing.

It follows every session's live stream (``<ns>.session.*.stream``) and every relayed
session event (``<ns>.evt.session.>``) and sends ChannelMessages to the channel the
session's last user message came from (``<ns>.channel.<channel>.out``): streamed text as
it arrives, then the final reply, tool notices, interruptions and completion.
"""

from __future__ import annotations

import logging
from typing import Any

from actors.notices import notice_for
from actors.runtime import ActorSystem, Envelope, TetherActor
from events.messages import ChannelMessage, RelayedEvent, StreamDelta

log = logging.getLogger(__name__)


class NotificationRouterActor(TetherActor):
    """Routes stream deltas and session events to connector channels."""

    def __init__(self, system: ActorSystem) -> None:
        super().__init__(system)
        self.channels: dict[str, str] = {}
        self.sent = 0
        self.last_version: dict[str, int] = {}

    def handle(self, message: Any, envelope: Envelope | None) -> None:
        if isinstance(message, StreamDelta):
            self._on_delta(message)
        elif isinstance(message, RelayedEvent) and message.aggregate == "session":
            self._on_event(message)

    def _on_delta(self, delta: StreamDelta) -> None:
        if delta.kind == "turn_start" and delta.channel:
            self.channels[delta.session_id] = delta.channel
        if delta.kind == "text" and delta.text:
            self._send(delta.session_id, "stream", delta.text, delta.seq)

    def _on_event(self, event: RelayedEvent) -> None:
        # A session's events arrive in version order; a version seen before is a
        # re-publish (after a relay restart) whose notice was already sent.
        sid = event.aggregate_id
        if event.version <= self.last_version.get(sid, 0):
            return
        self.last_version[sid] = event.version
        if event.event in ("Created", "UserMessageReceived"):
            channel = event.data.get("channel")
            if isinstance(channel, str) and channel:
                self.channels[sid] = channel
            return
        try:
            notice = notice_for(event.event, event.data)
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            # Not a Tether event: somebody else published on the event subjects.
            log.warning("router: ignoring malformed %s event %s: %r", event.event, event.id, exc)
            return
        if notice is not None:
            self._send(sid, notice[0], notice[1], event.id)

    def _send(self, session_id: str, kind: Any, text: str, seq: int) -> None:
        channel = self.channels.get(session_id)
        if channel is None:
            log.debug("no channel known for session %s; dropping %s notice", session_id, kind)
            return
        self.sent += 1
        self.send(
            self.subjects.channel_out(channel),
            ChannelMessage(session_id=session_id, kind=kind, text=text, seq=seq),
        )
