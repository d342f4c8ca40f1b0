"""The actor runtime: pykka actors bound to NATS subjects, speaking typed messages.

* :class:`TetherActor` is the base of every actor. Bus messages reach it as
  :class:`Envelope` (the decoded message plus its reply subject); replies to its own
  requests and results of its helper work reach it as plain in-process messages.
* :class:`ActorSystem` starts actors, binds them to subjects, decodes every payload
  strictly (a payload that fails is dead-lettered with the reason and, when it has a reply
  subject, answered with :class:`events.messages.ErrorReply`), and stops them all.
* Supervision: a handler that raises does not kill the actor. The runtime records the
  failure (``on_failure_recorded``), rebuilds the actor's state from its stored events
  (``recover``) and carries on with the next message. pykka itself would stop the actor
  and drop every message queued behind the failing one; restarting in place loses
  nothing. An actor failing more than ``MAX_RESTARTS`` times in a minute is stopped.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import msgspec
import pykka

from tether.actors.deadlines import Deadlines
from tether.actors.in_process import LocalAsks, LocalRoute, LocalRoutes, is_a
from tether.actors.log_context import bind_session, bound_session
from tether.actors.ports import Bus, Inbound, RequestTimeout, Subscription
from tether.events.codec import DecodeFailure, Decoder, encode
from tether.events.messages import DeadLetter, ErrorReply
from tether.events.subjects import Subjects

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_RESTARTS = 5
"""Restarts allowed per actor within ``RESTART_WINDOW`` seconds before it is stopped."""
RESTART_WINDOW = 60.0


class AskTimeout(Exception):
    """An ask over NATS got no reply in time."""


REQUEST_INBOX = "_INBOX."
"""How a NATS request's own reply subject starts: the only reply subject the engine answers
on behalf of a message that came over the bus (never one the sender names)."""


class RemoteError(Exception):
    """An ask was answered with an ErrorReply."""

    def __init__(self, reply: ErrorReply) -> None:
        super().__init__(f"{reply.error}: {reply.reason}")
        self.reply = reply


class Envelope(msgspec.Struct):
    """A message as delivered to an actor by address: decoded from the bus (``size``:
    bytes on the wire), or told in process (``from_here``: by one of this process's
    actors). ``asked_here``: ``reply`` is the address of a request made in process,
    answered in process. Only the runtime sets the two, so nothing that came over the bus
    is taken for either, whatever it says."""

    message: Any
    reply: str
    subject: str
    size: int = 0
    asked_here: bool = False
    from_here: bool = False


class Then(msgspec.Struct):
    """Told to an actor in process: it runs ``call`` in its own thread once everything
    told before is handled, its recovery first (what it stores as it starts is stored by
    then); if it stopped for good, ``call`` does not run."""

    call: Callable[[], None]


class AskResult(msgspec.Struct):
    """The outcome of :meth:`TetherActor.ask_async`: ``message`` or ``error``."""

    tag: str
    message: Any = None
    error: str = ""


def _session_of(message: Any) -> str:
    """The session a message names, if it names one (clipped: it came from outside)."""
    session_id = getattr(message, "session_id", "")
    return session_id[:64] if isinstance(session_id, str) else ""


class TetherActor(pykka.ThreadingActor):
    """Base of every Tether actor: handlers, replies, async asks, in-place restarts.

    Log lines name their session (:mod:`actors.log_context`): an actor with a
    ``session_id`` binds it for its life; the others bind the ``session_id`` of the
    message they handle, while they handle it.
    """

    session_id: str = ""
    """The one session this actor works for ("" for an actor shared by sessions)."""
    binds_message_sessions = True
    """Whether a shared actor's log lines carry the ``session_id`` of the message it
    handles (off where a message may name a session by name rather than id)."""

    def __init__(self, system: ActorSystem) -> None:
        super().__init__()
        self.system = system
        self.bus: Bus = system.bus
        self.subjects: Subjects = system.subjects
        self._failures: list[float] = []
        self._stopped_for_good = False

    # --- to be overridden ---------------------------------------------------------------

    def recover(self) -> None:
        """Rebuild in-memory state from stored events (on start and after a failure)."""

    def handle(self, message: Any, envelope: Envelope | None) -> None:
        """Handle one message; ``envelope`` is None for in-process messages."""
        raise NotImplementedError

    def on_failure_recorded(self, error: str) -> None:
        """Record a handler failure; by default in the system's failure log (sessions
        store it on their own aggregate instead)."""
        self.system.record_failure(self.name, error, restarted=True)

    # --- plumbing -----------------------------------------------------------------------

    def on_start(self) -> None:
        if self.session_id:
            bind_session(self.session_id)
        self.recover()

    def on_receive(self, message: Any) -> Any:
        if self._stopped_for_good:
            # Messages queued behind the failure that stopped this actor: refuse, don't run.
            if isinstance(message, Envelope):
                self.reply(message, ErrorReply(
                    error="actor_stopped", reason=f"{self.name} has stopped after failures"))
            return None
        if isinstance(message, Then):
            message.call()
            return None
        inner = message.message if isinstance(message, Envelope) else message
        by_message = _session_of(inner) if self.binds_message_sessions else ""
        with bound_session(self.session_id or by_message):
            try:
                self.handle(inner, message if isinstance(message, Envelope) else None)
            except Exception as exc:
                self._restart(exc)
        return None

    def _restart(self, exc: Exception) -> None:
        error = f"{type(exc).__name__}: {exc}"
        log.exception("%s failed; restarting from stored events", self.name)
        now = time.monotonic()
        self._failures = [t for t in self._failures if now - t < RESTART_WINDOW] + [now]
        self.system.failures += 1
        try:
            self.on_failure_recorded(error)
            self.recover()
        except Exception as again:
            log.exception("%s could not restart; stopping it", self.name)
            self._give_up(f"could not restart: {type(again).__name__}: {again}")
            return
        if len(self._failures) > MAX_RESTARTS:
            self._give_up(f"failed {len(self._failures)} times within {RESTART_WINDOW:g} s")

    def _give_up(self, why: str) -> None:
        self._stopped_for_good = True
        log.error("%s stopped for good: %s", self.name, why)
        self.system.gave_up(self.actor_ref, self.name, why)
        self.stop()

    @property
    def name(self) -> str:
        return type(self).__name__

    def reply(self, envelope: Envelope | None, message: Any) -> None:
        """Answer a request (no-op when the message had no reply subject): in process when
        it was asked in process, else over the bus."""
        if envelope is None or not envelope.reply:
            return
        if envelope.asked_here:
            self.system.answer_here(envelope.reply, message)
        else:
            self.bus.publish(envelope.reply, encode(message))

    def refused_from_the_bus(self, message: Any, envelope: Envelope | None) -> bool:
        """True, having refused it, when ``message`` came over the bus: for what only this
        process's own actors send (on a bus without credentials anyone may publish
        anywhere). Logged; a request inbox (``_INBOX.…``) is answered ``not_allowed``."""
        if envelope is None or envelope.from_here:
            return False
        kind = type(message).__name__
        log.warning("%s: a %s that came over the bus was refused: only the engine's own "
                    "actors send it here", self.name, kind)
        if envelope.reply.startswith(REQUEST_INBOX):
            self.reply(envelope, ErrorReply(
                error="not_allowed",
                reason=f"a {kind} is taken here only from the engine's own actors"))
        return True

    def send(self, subject: str, message: Any, reply: str = "") -> None:
        """Tell by address (:meth:`ActorSystem.send`); ``reply`` forwards a request's reply
        subject."""
        self.system.send(subject, message, reply)

    def ask_async(
        self, subject: str, message: Any, reply_type: Any, tag: str, timeout: float,
        here_only: bool = False,
    ) -> None:
        """Request by address; the answer (or the timeout) comes back to this actor as an
        AskResult. An actor of this process that takes ``subject`` is asked in process.
        ``here_only``: only such an actor may answer; when none takes it (stopped for
        good), the ask fails at once rather than going out on the bus, where anyone may
        answer it."""
        if self.system.ask_here(self.actor_ref, subject, message, reply_type, tag, timeout):
            return
        if here_only:
            self.actor_ref.tell(AskResult(
                tag, error=f"no actor of this process takes {subject}"))
            return
        decoder: Decoder[Any] = Decoder(reply_type | ErrorReply)
        ref = self.actor_ref

        def deliver(result: AskResult) -> None:
            try:
                ref.tell(result)
            except pykka.ActorDeadError:
                log.debug("reply %s arrived after the actor stopped", tag)

        def on_reply(data: bytes | None, error: str) -> None:
            if data is None:
                deliver(AskResult(tag, error=error))
                return
            try:
                answer = decoder.decode(data)
            except DecodeFailure as exc:
                deliver(AskResult(tag, error=exc.reason))
                return
            deliver(answered(tag, answer))

        self.bus.request(subject, encode(message), timeout, on_reply)


def answered(tag: str, answer: Any) -> AskResult:
    """The AskResult of an answer to the ask ``tag`` (an ErrorReply is its error)."""
    if isinstance(answer, ErrorReply):
        return AskResult(tag, error=f"{answer.error}: {answer.reason}")
    return AskResult(tag, message=answer)


class Tick(msgspec.Struct):
    """Time passed: actors with timers check them against their injected clock."""


class Binding(msgspec.Struct):
    """A subject an actor listens on and the message types accepted there.

    ``reach`` says who may send there: ``"bus"`` anyone, over NATS (this process's actors
    too); ``"both"`` anyone, this process's actors in process; ``"process"`` this
    process's actors only, in process; what they send there is published on the bus
    too, for observers (a session's stream).
    """

    subject: str
    accepts: Any
    queue: str = ""
    reach: Literal["bus", "both", "process"] = "bus"


class _Bound:
    """A binding's bus subscription and in-process route, closed together."""

    def __init__(self, subscription: Subscription | None,
                 remove: Callable[[], None] | None) -> None:
        self._subscription = subscription
        self._remove = remove

    def close(self) -> None:
        if self._remove is not None:
            self._remove()
        if self._subscription is not None:
            self._subscription.close()


class ActorHandle:
    """A running actor with its subscriptions."""

    def __init__(self, ref: pykka.ActorRef[Any], subscriptions: list[Subscription]) -> None:
        self.ref = ref
        self.subscriptions = subscriptions

    def tell(self, message: Any) -> None:
        """In-process tell (for the actor's own helpers and the runtime)."""
        self.ref.tell(message)

    def stop(self, timeout: float = 5.0, wait: bool = True) -> None:
        """Unbind, then stop the actor after the messages already queued; ``wait`` blocks
        until it has (shutdown), else returns at once (an actor stopping another)."""
        for sub in self.subscriptions:
            sub.close()
        if self.ref.is_alive():
            try:
                self.ref.stop(block=wait, timeout=timeout if wait else None)
            except pykka.ActorDeadError:
                pass
            except pykka.Timeout:
                log.warning("actor %s did not stop within %s s", self.ref, timeout)


class ActorSystem:
    """Starts actors, binds them to subjects, dead-letters bad input, stops them all."""

    def __init__(
        self,
        bus: Bus,
        subjects: Subjects,
        failure_log: Callable[[str, str, str, bool], None] | None = None,
    ) -> None:
        self.bus = bus
        self.subjects = subjects
        self.deadletters = 0
        self.failures = 0
        self.stopped_for_good: list[str] = []
        self.process = uuid.uuid4().hex[:12]
        self._failure_log = failure_log
        self._handles: list[ActorHandle] = []
        self._lock = threading.Lock()
        self.routes = LocalRoutes()
        """The subjects this process's actors take in process."""
        self.asks = LocalAsks(self.process)
        self.deadlines = Deadlines(f"asks-{self.process}")
        """The in-process asks' timeouts."""
        """Requests made in process, waiting for their answers."""

    def record_failure(self, actor: str, error: str, restarted: bool) -> None:
        """Store an actor's failure through the failure log (logged only without one)."""
        if self._failure_log is not None:
            self._failure_log(self.process, actor, error, restarted)

    def gave_up(self, ref: pykka.ActorRef[Any], name: str, why: str) -> None:
        """An actor stops for good: close its subscriptions (senders then get "no
        responders" instead of silence) and record it."""
        self.stopped_for_good.append(name)
        with self._lock:
            handles = [h for h in self._handles if h.ref == ref]
        for handle in handles:
            for sub in handle.subscriptions:
                sub.close()
        try:
            self.record_failure(name, why, restarted=False)
        except Exception:
            log.exception("could not record that %s stopped", name)

    def start(
        self, actor_class: type[TetherActor], bindings: list[Binding], **kwargs: Any
    ) -> ActorHandle:
        """Start an ``actor_class(self, **kwargs)`` (its ``recover`` runs first in its own
        thread) and bind it to ``bindings``."""
        ref = actor_class.start(self, **kwargs)
        handle = ActorHandle(ref, [])
        for binding in bindings:
            handle.subscriptions.append(self.bind(ref, binding))
        with self._lock:
            self._handles.append(handle)
        return handle

    def bind(self, ref: pykka.ActorRef[Any], binding: Binding) -> Subscription:
        """Route messages on ``binding.subject`` to ``ref`` as Envelopes: decoded from the
        bus, and in process as sent by this process's actors, as ``binding.reach`` says."""
        on_bus = binding.reach != "process"
        remove = (self.routes.add(LocalRoute(binding.subject, ref, on_bus))
                  if binding.reach != "bus" else None)
        subscription = self._subscribe(ref, binding) if on_bus else None
        return _Bound(subscription, remove)

    def send(self, subject: str, message: Any, reply: str = "") -> None:
        """Tell by address, as an actor of this process does: the actors of this process
        that take ``subject`` get it in process; it goes on the bus as well unless one of
        them listens there too (:meth:`deliver`)."""
        if not self.deliver(subject, message, reply):
            self.bus.publish(subject, encode(message), reply=reply)

    def deliver(self, subject: str, message: Any, reply: str = "") -> bool:
        """Tell ``message`` to the actors of this process that take ``subject``; True when
        that is all it needs: some took it and one of them listens on the bus as well
        (publishing it would give that one a second copy). False: publish it."""
        routes = self.routes.to(subject)
        taken = False
        for route in routes:
            try:
                route.ref.tell(Envelope(message, reply, subject, from_here=True))
            except pykka.ActorDeadError:
                continue  # stopping: its route goes with its subscriptions
            taken = True
        return taken and any(route.on_bus for route in routes)

    def ask_here(self, ref: pykka.ActorRef[Any], subject: str, message: Any,
                 reply_type: Any, tag: str, timeout: float) -> bool:
        """Ask the first actor of this process that takes ``subject``, in process: its
        answer, or the timeout, comes back to ``ref`` as ``AskResult(tag, ...)``. False
        when none does (ask over the bus)."""
        routes = self.routes.to(subject)
        if not routes:
            return False
        token = self.asks.open(ref, tag, reply_type)
        try:
            routes[0].ref.tell(Envelope(message, token, subject, asked_here=True,
                                            from_here=True))
        except pykka.ActorDeadError:
            self.answer_here(token, None, error="the actor for this subject has stopped")
            return True
        self.deadlines.at(time.monotonic() + timeout, lambda: self.answer_here(
            token, None, error=f"no reply from {subject} within {timeout:g} s"))
        return True

    def answer_here(self, token: str, answer: Any, error: str = "") -> None:
        """Give the actor that asked in process (reply address ``token``) its answer, or
        ``error``, as the bus path would: an ErrorReply or an answer of another type than
        asked for is an error. Nothing when nobody waits any more (expired)."""
        waiting = self.asks.take(token)
        if waiting is None:
            return
        if not error and not isinstance(answer, ErrorReply) and not is_a(
                answer, waiting.reply_type):
            error = f"the answer is a {type(answer).__name__}, not what was asked for"
        result = AskResult(waiting.tag, error=error) if error else answered(waiting.tag,
                                                                            answer)
        with contextlib.suppress(pykka.ActorDeadError):
            waiting.ref.tell(result)

    def _subscribe(self, ref: pykka.ActorRef[Any], binding: Binding) -> Subscription:
        decoder: Decoder[Any] = Decoder(binding.accepts)

        def on_message(msg: Inbound) -> None:
            try:
                message = decoder.decode(msg.data)
            except DecodeFailure as exc:
                self.dead_letter(msg, exc.reason)
                return
            try:
                ref.tell(Envelope(message, msg.reply, msg.subject, len(msg.data)))
            except pykka.ActorDeadError:
                self.dead_letter(msg, "the actor for this subject has stopped")

        return self.bus.subscribe(binding.subject, on_message, queue=binding.queue)

    def dead_letter(self, msg: Inbound, reason: str) -> None:
        """Count, publish on ``<ns>.deadletter`` and answer with an ErrorReply if asked."""
        self.deadletters += 1
        log.warning("dead letter on %s: %s", msg.subject, reason)
        excerpt = msg.data[:512].decode("utf-8", errors="replace")
        self.bus.publish(
            self.subjects.deadletter,
            encode(DeadLetter(subject=msg.subject, reason=reason, payload=excerpt,
                              size=len(msg.data))),
        )
        if msg.reply:
            self.bus.publish(msg.reply, encode(ErrorReply(error="bad_request", reason=reason)))

    def forget(self, handle: ActorHandle) -> None:
        """Stop one actor and drop it from the system, without waiting for it (this is
        called from other actors' handlers, which must not block)."""
        handle.stop(wait=False)
        with self._lock:
            if handle in self._handles:
                self._handles.remove(handle)

    def stop_all(self) -> None:
        """Stop every actor this system started (newest first)."""
        with self._lock:
            handles = list(reversed(self._handles))
            self._handles.clear()
        for handle in handles:
            handle.stop()
        self.deadlines.stop()

    # --- client side --------------------------------------------------------------------

    def ask(self, subject: str, message: Any, reply_type: type[T], timeout: float = 5.0) -> T:
        """Blocking request by address; raises AskTimeout or RemoteError."""
        return ask(self.bus, subject, message, reply_type, timeout)

    def tell(self, subject: str, message: Any) -> None:
        """Publish a message to an address on the bus, as a client does (an actor of this
        process sends with :meth:`send`)."""
        self.bus.publish(subject, encode(message))


def ask(bus: Bus, subject: str, message: Any, reply_type: type[T], timeout: float = 5.0) -> T:
    """Blocking request/reply with a typed answer (clients, tests, the command line).

    Raises AskTimeout when nobody answers in time, RemoteError for an ErrorReply and
    DecodeFailure when the answer is not a ``reply_type``.
    """
    try:
        data = bus.request_sync(subject, encode(message), timeout)
    except RequestTimeout as exc:
        raise AskTimeout(str(exc)) from None
    answer: Any = Decoder(reply_type | ErrorReply).decode(data)
    if isinstance(answer, ErrorReply):
        raise RemoteError(answer)
    result: T = answer
    return result
