"""The notification router actor: tells each chat what its sessions are doing.

Three inputs. The live stream (``<ns>.session.*.stream``): text goes to the channels
watching the session in the foreground, gathered for ``debounce`` seconds (and flushed
at once when the message ends). The notices a session tells of as it saves their events
(``NoticesPlanned`` on ``<ns>.notices``), sent at once. The notice outbox
(:mod:`projections.outbox`, kept exactly once from the store), which plans the same
notices with the same ids: what was not sent yet goes from there (told notices lost on
the way, after a restart, from other writers). Each notice is sent once, to its
audience, then a ``Deliveries.Delivered`` event records it, which marks it delivered in
the outbox; so after a restart the router sends exactly what was not delivered. The
records of a batch are saved once its notices are out (one save per session), so no
notice waits on another's bookkeeping; a notice sent again after a crash between the two
carries the same ``seq``.

Audiences: the session's watchers (its origin channel unless it went to the background,
plus channels that asked with WatchSession); everyone (endings: watchers, and the origin
route in the background with the last lines of output); the background (waiting for
input: the origin route when it is not watching, at most one per ``waiting_debounce``).
A route that names no channel goes to the wake webhook as ``{"text", "mode": "now"}``.
A turn running longer than ``long_running`` seconds gets one reminder. Time is the
injected clock; the host ticks the router.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import threading
import urllib.request
from collections.abc import Callable, Mapping
from typing import Annotated, Any, NamedTuple

import msgspec
import pykka

from tether.actors.chat.routes import OutputBuffer, parse_route, resolve_origin
from tether.actors.ports import Clock, SystemClock
from tether.actors.runtime import ActorSystem, Envelope, TetherActor, Tick
from tether.events.application import TetherApplication
from tether.events.deliveries import Deliveries, deliveries_uuid
from tether.events.messages import (
    ChannelMessage,
    NoticesPlanned,
    PlannedNotice,
    StreamDelta,
    Watching,
    WatchSession,
)
from tether.projections.notices import ENDINGS
from tether.projections.outbox import Outbox

log = logging.getLogger(__name__)


class RouterSettings(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """How the router routes and paces notices (the ``[notifications]`` table)."""

    debounce: Annotated[float, msgspec.Meta(ge=0)] = 0.5
    """Seconds stream text is gathered before it goes out (the first text at once)."""
    waiting_debounce: Annotated[float, msgspec.Meta(ge=0)] = 5.0
    """At most one waiting-for-input notice per session in this many seconds."""
    long_running: Annotated[float, msgspec.Meta(gt=0)] = 600.0
    """A turn running this many seconds gets one reminder."""
    workdir_channels: dict[str, str] = {}
    """Working directory -> route, for sessions whose request named no channel."""
    fallback_channel: str = ""
    """The route when nothing else gives one (else the wake webhook)."""
    wake_webhook: str = ""
    """URL POSTed ``{"text", "mode": "now"}`` for notices with no route."""
    webhook_timeout: Annotated[float, msgspec.Meta(gt=0)] = 10.0
    output_blocks: Annotated[int, msgspec.Meta(ge=1)] = 200
    """Replies kept per session for catch-up."""
    hold: Annotated[float, msgspec.Meta(ge=0)] = 2.0
    """Seconds a reply may wait for its live stream's end, so the stream shows first."""


class OutboxAdvanced(msgspec.Struct):
    """The outbox view took in new events: deliver what is pending."""


class WebhookDone(msgspec.Struct):
    notice: str
    session_id: str
    kind: str
    outcome: str


class _Session:
    """What the router knows of one session (rebuilt from the store on first use)."""

    def __init__(self, name: str, explicit: str, channel: str, workspace: str,
                 settings: RouterSettings, log: Deliveries) -> None:
        self.name = name
        self.explicit = explicit
        self.channel = channel
        self.workspace = workspace
        self.settings = settings
        self.log = log
        self.pending_text = ""
        self.pending_seq = 0
        self.last_flush: dt.datetime | None = None
        self.turn_since: dt.datetime | None = None
        self.streamed = False
        """Stream deltas of this session reached this router."""
        self.ended = 0
        """The last generation whose stream ended here."""
        self.held_since: dt.datetime | None = None
        """Since when a notice waits for the end of a generation's stream (None: none
        waits; :meth:`holds`)."""
        self.reminded = False
        self.last_waiting: dt.datetime | None = None
        self.told_through = 0
        """The position of the last notice the session told of here (its NoticesPlanned
        say which one they follow: another means one was lost, or a restart)."""
        self.told: list[PlannedNotice] = []
        """Notices the session told of as it saved their events, not sent yet (held for
        the live stream's end, or waiting for the outbox's replies), in order."""

    @property
    def origin(self) -> str:
        """The route for background notices (:func:`resolve_origin`); it follows the
        channel of the session's latest message."""
        return resolve_origin(self.explicit, self.channel, self.workspace,
                              self.settings.workdir_channels, self.settings.fallback_channel)

    def origin_watches(self) -> bool:
        """Whether the origin route is a plain channel that watches in the foreground (it
        already got what its watchers got)."""
        route = parse_route(self.origin)
        return route is not None and not route.target and route.channel in self.watchers()

    def watchers(self) -> list[str]:
        """Channels watching in the foreground: the origin channel unless it went to the
        background, then those that asked."""
        found = [] if not self.channel or self.channel in self.log.away else [self.channel]
        return found + [c for c in self.log.watchers if c not in found]

    def holds(self, generation: int, now: dt.datetime) -> bool:
        """Whether a notice of ``generation`` waits for the end of that generation's live
        stream (the stream's text should show first): once this router has seen the
        session's stream, until the ``end`` delta, at most ``settings.hold`` seconds. A
        hold that runs out counts that stream as ended, so the session's later
        generations are held afresh and nothing keeps waiting for it."""
        if not generation or not self.streamed or generation <= self.ended:
            return False
        if self.held_since is None:
            self.held_since = now
        if (now - self.held_since).total_seconds() < self.settings.hold:
            return True
        self.ended, self.held_since = generation, None
        return False


class _Record(NamedTuple):
    """One delivery record, as :meth:`NotificationRouterActor._record` takes it."""

    session_id: str
    notice: str
    kind: str
    route: str
    outcome: str


class NotificationRouterActor(TetherActor):
    """Routes stream text and planned notices to connector channels."""

    def __init__(
        self,
        system: ActorSystem,
        *,
        app: TetherApplication,
        outbox: Outbox,
        settings: RouterSettings | None = None,
        clock: Clock | None = None,
        post: Callable[[str, dict[str, Any], float], Any] | None = None,
        catch_up: Callable[[], object] | None = None,
        history_through: int = 0,
    ) -> None:
        super().__init__(system)
        self.app = app
        self.outbox = outbox
        self.settings = settings or RouterSettings()
        self.clock = clock or SystemClock()
        self.post = post or post_json
        self.catch_up = catch_up or (lambda: None)
        """Brings the outbox up to the log now (the follower's catch_up): before reading
        the replies it keeps, which a told notice may be ahead of."""
        self.history_through = history_through
        """Notices planned from events up to this notification id are history (the outbox
        was created over an existing log): recorded as skipped, never sent."""
        self.sessions: dict[str, _Session] = {}
        self.in_flight: set[str] = set()
        self.sent = 0
        self.unsaved: dict[str, Deliveries] = {}
        """Delivery logs with records not saved yet: a batch's notices go out first, then
        its records are saved, one save per session (a notice never waits on another's
        record; one sent again after a crash between the two carries the same seq)."""
        self.recording: list[_Record] = []
        """The records in ``unsaved``, as made."""
        self.unrecorded: list[_Record] = []
        """The records of notices sent but not saved when a handler failed (their save,
        say): the restart records them first, so what went out is not sent again, after
        notices that went out since."""

    def recover(self) -> None:
        self.sessions.clear()  # rebuilt from the store on first use
        self.in_flight.clear()
        self.unrecorded += self.recording
        self.recording, self.unsaved = [], {}
        self._record_unrecorded()
        # The outbox lags the log (it settles): bring it up to the log first, so the
        # Delivered records already saved count (nothing recorded is sent again) and every
        # notice told of before this restart goes out before any told after it.
        try:
            self.catch_up()
        except Exception:  # the outbox's own follower retries; send what it has
            log.exception("router: the outbox could not catch up on restart")
        self._deliver_pending()

    def _record_unrecorded(self) -> None:
        """Record the notices sent before a handler failed with their records unsaved;
        if the store still fails, they are sent again."""
        records, self.unrecorded = self.unrecorded, []
        for record in records:
            self._record(*record)
        try:
            self._save_records()
        except Exception:
            self.unrecorded = []
            self.sessions.clear()  # the logs as stored: what they lack is sent again
            log.exception("router: the records of %d sent notices could not be saved; "
                          "they will be sent again", len(records))

    def handle(self, message: Any, envelope: Envelope | None) -> None:
        if isinstance(message, StreamDelta):
            self._on_delta(message)
        elif isinstance(message, NoticesPlanned):
            # Told by this process's sessions: one from the bus could carry any text for
            # an event the outbox has not read yet. The outbox sends what the store plans.
            if not self.refused_from_the_bus(message, envelope):
                self._on_planned(message)
        elif isinstance(message, OutboxAdvanced):
            self._deliver_pending()
        elif isinstance(message, WatchSession):
            self.reply(envelope, self._watch(message))
        elif isinstance(message, WebhookDone):
            self._record(message.session_id, message.notice, message.kind, "webhook",
                         message.outcome)
            self._save_records()
        elif isinstance(message, Tick):
            self._on_tick()

    # --- the live stream ----------------------------------------------------------------

    def _on_delta(self, delta: StreamDelta) -> None:
        state = self._session(delta.session_id)
        if state is None:
            return
        now = self.clock.now()
        state.streamed = True
        if delta.kind == "turn_start":
            self._flush(session_id=delta.session_id, state=state)  # an aborted generation's
            # What was stored before this model call (a tool's result) is told first.
            self._deliver_told(state)
            state.channel = delta.channel or state.channel
            if state.turn_since is None:  # a new turn (not another model call of this one)
                state.turn_since = now
                state.reminded = False
        elif delta.kind == "text" and delta.text:
            state.pending_text += delta.text
            state.pending_seq = delta.seq
            if state.last_flush is None or (
                    now - state.last_flush).total_seconds() >= self.settings.debounce:
                self._flush(delta.session_id, state)
        elif delta.kind == "end":
            self._flush(delta.session_id, state)
            state.ended = max(state.ended, delta.generation)
            if state.held_since is not None:
                state.held_since = None
                self._deliver_pending()

    def _flush(self, session_id: str, state: _Session) -> None:
        """Send the gathered text, numbered with its last delta's seq (a generation's
        deltas count from 1, so a lower number starts a new reply)."""
        if not state.pending_text:
            return
        state.last_flush = self.clock.now()
        text, state.pending_text = state.pending_text, ""
        for channel in state.watchers():
            self._send(channel, ChannelMessage(session_id=session_id, kind="stream",
                                               text=text, seq=state.pending_seq))

    def _on_tick(self) -> None:
        now = self.clock.now()
        if any(state.held_since is not None for state in self.sessions.values()):
            self._deliver_pending()  # notices held past their time go now
        for session_id, state in self.sessions.items():
            if state.pending_text and state.last_flush is not None and (
                    now - state.last_flush).total_seconds() >= self.settings.debounce:
                self._flush(session_id, state)
            since = state.turn_since
            if since is not None and not state.reminded and (
                    now - since).total_seconds() >= self.settings.long_running:
                state.reminded = True
                minutes = self.settings.long_running / 60
                notice = f"reminder-{session_id}-{int(now.timestamp())}"
                self._to_everyone(session_id, state, notice, "reminder",
                                  f"{state.name} has been running for over {minutes:g} "
                                  "minutes", seq=0, ending=False)

    # --- planned notices ----------------------------------------------------------------

    def _on_planned(self, message: NoticesPlanned) -> None:
        """Send the notices a session of this process tells of as it saves their events,
        without waiting for the outbox, which plans the same ones from the store (each is
        sent once, by id)."""
        state = self._session(message.session_id)
        if state is None:
            return
        # Only what the outbox has not read yet: one it has read goes from its row.
        gap = message.after != state.told_through
        if gap:  # told notices were lost on the way (or a side restarted): what the store
            self.catch_up()  # holds before these goes first, from the outbox's rows
        read = self.outbox.position()
        told = [n for n in message.notices if n.session_id == message.session_id
                and n.id == f"{n.position}.{n.n}" and read < n.position]
        if gap or len(told) < len(message.notices):
            self._deliver_pending()  # the outbox's rows first (in order, by id once)
        state.told_through = max((n.position for n in message.notices),
                                 default=state.told_through)
        state.told.extend(told)
        self._deliver_told(state)
        self._save_records()

    def _deliver_told(self, state: _Session) -> None:
        """Send the session's told notices, in order, up to one held for the live
        stream's end. An ending for a route that is not watching carries the last lines of
        output, the replies the outbox keeps: it is caught up first."""
        while state.told:
            notice = state.told[0]
            if notice.id not in self.in_flight:
                if self._hold(notice.session_id, notice.generation):
                    return
                if notice.audience == "everyone" and not state.origin_watches() and (
                        notice.position > self.outbox.position()):
                    self.catch_up()
                self.in_flight.add(notice.id)
                self._deliver(msgspec.structs.asdict(notice))
            state.told.pop(0)

    def _deliver_pending(self) -> None:
        held: set[str] = set()
        pending = self.outbox.pending()
        if self.history_through and pending:
            pending = self._skip_history(pending)
        for row in pending:
            notice, session_id = str(row["id"]), str(row["session_id"])
            if notice in self.in_flight or session_id in held:
                continue  # sent (its Delivered event is on its way), or waits its turn
            if self._hold(session_id, int(row["generation"])):
                held.add(session_id)
                continue
            self.in_flight.add(notice)
            self._deliver(row)
        for session_id, state in self.sessions.items():
            if state.told and session_id not in held:
                self._deliver_told(state)
        self._save_records()
        seen = self.outbox.position()
        if len(self.in_flight) > 10_000:  # marked long ago: keep the set small (a notice
            # told of before the outbox has its row stays)
            self.in_flight = {str(r["id"]) for r in self.outbox.pending()} | {
                notice for notice in self.in_flight if int(notice.split(".")[0]) > seen}

    def _skip_history(self, pending: list[Any]) -> list[Any]:
        """Record the notices of events from before the outbox existed as skipped (one
        save per session); the rest are news."""
        old = [r for r in pending if int(r["position"]) <= self.history_through]
        touched: dict[str, Deliveries] = {}
        for row in old:
            notice = str(row["id"])
            if notice in self.in_flight:
                continue
            state = self._session(str(row["session_id"]))
            if state is None:
                continue
            self.in_flight.add(notice)
            state.log.deliver(notice=notice, kind=str(row["kind"]), route="-",
                              outcome="skipped: from before the outbox existed")
            touched[str(row["session_id"])] = state.log
        for log_ in touched.values():
            self.app.save(log_)
        return [r for r in pending if int(r["position"]) > self.history_through]

    def _hold(self, session_id: str, generation: int) -> bool:
        """Whether a session's notices wait for the end of its live stream
        (:meth:`_Session.holds`)."""
        state = self._session(session_id)
        return state is not None and state.holds(generation, self.clock.now())

    def _deliver(self, row: Mapping[str, Any]) -> None:
        session_id, notice, kind, text = (row["session_id"], str(row["id"]), row["kind"],
                                          row["text"])
        state = self._session(session_id)
        if state is None:
            return
        seq = int(row["position"]) * 1000 + int(row["n"])
        if state.pending_text:
            self._flush(session_id, state)  # what streamed before a notice shows first
        if kind in ENDINGS or kind == "status":
            state.turn_since = None
        audience = row["audience"]
        if audience == "watchers":
            self._to_watchers(session_id, state, notice, kind, text, seq)
        elif audience == "everyone":
            self._to_everyone(session_id, state, notice, kind, text, seq, ending=True,
                              position=int(row["position"]))
        else:
            self._to_background(session_id, state, notice, kind, text, seq)

    def _to_watchers(self, session_id: str, state: _Session, notice: str, kind: str,
                     text: str, seq: int) -> None:
        watchers = state.watchers()
        for channel in watchers:
            self._send(channel, _message(session_id, kind, text, seq))
        self._record(session_id, notice, kind, ",".join(watchers) or "-",
                     "sent" if watchers else "skipped: nobody watches")

    def _to_everyone(self, session_id: str, state: _Session, notice: str, kind: str,
                     text: str, seq: int, *, ending: bool, position: int = 0) -> None:
        watchers = state.watchers()
        for channel in watchers:
            self._send(channel, _message(session_id, kind, text, seq))
        if state.origin_watches():
            self._record(session_id, notice, kind, ",".join(watchers), "sent")
            return
        if ending:
            lines = self._output(session_id, position).last_lines()
            text = f"{state.name}: {text}" + (f"\n{lines}" if lines else "")
        self._to_route(session_id, state, notice, kind, text, seq, done=watchers)

    def _to_background(self, session_id: str, state: _Session, notice: str, kind: str,
                       text: str, seq: int) -> None:
        if state.origin_watches():
            self._record(session_id, notice, kind, state.origin, "skipped: watched")
            return
        now = self.clock.now()
        last = state.last_waiting
        if last is not None and (now - last).total_seconds() < self.settings.waiting_debounce:
            self._record(session_id, notice, kind, state.origin, "skipped: debounced")
            return
        state.last_waiting = now
        self._to_route(session_id, state, notice, kind, f"{state.name}: {text}", seq)

    def _to_route(self, session_id: str, state: _Session, notice: str, kind: str,
                  text: str, seq: int, done: list[str] | None = None) -> None:
        route = parse_route(state.origin)
        if route is None:
            url = self.settings.wake_webhook
            if not url:
                self._record(session_id, notice, kind, state.origin or "-",
                             "skipped: no route and no wake webhook")
                return
            self._webhook(url, session_id, notice, kind, text)
            return
        self._send(route.channel, msgspec.structs.replace(
            _message(session_id, kind, text, seq), target=route.target, account=route.account))
        where = ",".join([*(done or []), state.origin])
        self._record(session_id, notice, kind, where, "sent")

    def _webhook(self, url: str, session_id: str, notice: str, kind: str, text: str) -> None:
        """POST on a helper thread (never blocking the router); the outcome comes back as
        WebhookDone and is recorded."""
        ref, post, timeout = self.actor_ref, self.post, self.settings.webhook_timeout

        def call() -> None:
            try:
                post(url, {"text": text, "mode": "now"}, timeout)
                outcome = "sent"
            except Exception as exc:  # the record says what happened
                outcome = f"failed: {type(exc).__name__}: {exc}"
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell(WebhookDone(notice, session_id, kind, outcome))

        threading.Thread(target=call, name=f"webhook-{notice}", daemon=True).start()

    # --- watching -----------------------------------------------------------------------

    def _watch(self, message: WatchSession) -> Any:
        state = self._session(message.session_id)
        if state is None:
            return Watching(session_id=message.session_id, channel=message.channel,
                            foreground=False)
        self.catch_up()  # the replies told of but not read from the store yet count too
        buffer = self._output(message.session_id)
        if message.channel in state.log.away:
            seen = state.log.away[message.channel]
        elif message.channel in state.watchers():
            seen = buffer.total  # already watching: nothing missed
        else:
            seen = 0  # a new watcher missed everything kept
        caught_up = trimmed = 0
        if message.foreground and seen < buffer.total:
            blocks, trimmed = buffer.since(seen)
            if trimmed:
                self._send(message.channel, ChannelMessage(
                    session_id=message.session_id, kind="catchup",
                    text=f"({trimmed} earlier replies are no longer kept)"))
            for number, text in blocks:
                self._send(message.channel, ChannelMessage(
                    session_id=message.session_id, kind="catchup", text=text, seq=number))
            caught_up = len(blocks)
        state.log.watch(channel=message.channel, foreground=message.foreground,
                        seen=buffer.total)
        self.unsaved[message.session_id] = state.log
        self._save_records()  # with any records the log holds: saved once, not again
        return Watching(session_id=message.session_id, channel=message.channel,
                        foreground=message.foreground, caught_up=caught_up, trimmed=trimmed)

    # --- plumbing -----------------------------------------------------------------------

    def _session(self, session_id: str) -> _Session | None:
        state = self.sessions.get(session_id)
        if state is not None:
            return state
        session = self.app.session(session_id)
        if session is None:
            return None
        log_ = self.app.load(deliveries_uuid(session_id), Deliveries) or Deliveries(
            session_id=session_id)
        state = self.sessions[session_id] = _Session(
            session.name, session.origin, session.channel, session.workspace, self.settings,
            log_)
        return state

    def _output(self, session_id: str, through: int = 0) -> OutputBuffer:
        """The session's replies as numbered output blocks (up to outbox position
        ``through`` when given)."""
        buffer = OutputBuffer(self.settings.output_blocks)
        for row in self.outbox.replies(session_id):
            if through and int(row["position"]) > through:
                break
            buffer.add(str(row["text"]))
        return buffer

    def _record(self, session_id: str, notice: str, kind: str, route: str,
                outcome: str) -> None:
        state = self._session(session_id)
        if state is None:
            return
        state.log.deliver(notice=notice, kind=kind, route=route, outcome=outcome)
        self.unsaved[session_id] = state.log
        self.recording.append(_Record(session_id, notice, kind, route, outcome))

    def _save_records(self) -> None:
        """Save the delivery records made since the last save (one save per session)."""
        logs, self.unsaved = list(self.unsaved.values()), {}
        records, self.recording = self.recording, []
        if logs:
            try:
                self.app.save(*logs)
            except Exception:
                self.unrecorded += records
                raise

    def _send(self, channel: str, message: ChannelMessage) -> None:
        try:
            subject = self.subjects.channel_out(channel)
        except ValueError:
            log.warning("router: %r cannot be a channel; dropping a %s notice", channel,
                        message.kind)
            return
        self.sent += 1
        self.send(subject, message)


def _message(session_id: str, kind: Any, text: str, seq: int) -> ChannelMessage:
    return ChannelMessage(session_id=session_id, kind=kind, text=text, seq=seq)


def post_json(url: str, body: dict[str, Any], timeout: float) -> None:
    """POST ``body`` as JSON (blocking); raises on a network error or a non-2xx answer."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        response.read()
