"""The process's one NATS connection, owned by one asyncio loop on its own thread.

Actors are threads and nats-py is asyncio: :class:`NatsBus` bridges the two. Its methods
are safe to call from any thread; callbacks given to :meth:`subscribe` run on the loop
and must hand work off (``tell`` an actor) instead of blocking. Reconnects are left to
nats-py, with unlimited attempts, so a restarted server is picked up again.

``auth`` (:class:`adapters.nats_auth.ClientAuth`) says how it signs in: user and password,
a credentials file or an NKey seed, TLS, and its requests' reply prefix. A publish the
server refuses (a permissions violation) is reported by the server asynchronously: it is
logged as a warning and counted in :attr:`NatsBus.refused`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext

from tether.actors.ports import BusError, Inbound, RequestTimeout

if TYPE_CHECKING:
    from tether.adapters.nats_auth import ClientAuth

log = logging.getLogger(__name__)

NO_RESPONDERS_BACKOFF = 0.1
"""Seconds between retries of a request that found nobody listening."""


class _Sub:
    def __init__(self, bus: NatsBus, sub: Any) -> None:
        self._bus = bus
        self._sub = sub

    def close(self) -> None:
        if self._bus.closed:
            return
        with contextlib.suppress(Exception):
            self._bus.call(self._sub.unsubscribe, timeout=5)


class _TolerantClient(Client):
    """nats-py's client, except that a message whose headers it cannot read arrives
    without headers instead of ending the connection's read loop.

    nats-py 2.16 decodes a header status line (``NATS/1.0 <status>``) outside any ``try``:
    one published message with bytes that are not UTF-8 there raised from the read loop,
    and the process heard nothing more until the ping check called the connection stale,
    minutes later. Any client allowed to publish anywhere the engine listens could do it.
    """

    async def _process_headers(self, headers: Any) -> dict[str, str] | None:
        try:
            parsed: dict[str, str] | None = await super()._process_headers(headers)
        except (UnicodeDecodeError, ValueError, IndexError) as exc:
            log.warning("a message's headers could not be read (%s); delivered without them",
                        exc)
            return None
        return parsed


class NatsBus:
    """A NATS connection with a private asyncio loop thread."""

    def __init__(self, url: str, name: str = "tether", connect_timeout: float = 10.0,
                 auth: ClientAuth | None = None) -> None:
        self.url = url
        self.auth = auth
        self.refused = 0
        """Operations the server refused for want of permission (permissions violations)."""
        self.loop = asyncio.new_event_loop()
        self._queued: deque[tuple[str, bytes, dict[str, str] | None, str]] = deque()
        """Published, not yet handed to the client (see :meth:`publish`)."""
        self._sending = False
        """A task on the loop sends the queue, or has been asked to (with the queue under
        :attr:`_queue_lock`: whoever finds it false sets it and wakes the loop)."""
        self._queue_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="tether-bus", daemon=True)
        self._thread.start()
        self.closed = False
        try:
            self.nc: Client = self.call(
                lambda: self._connect(name, connect_timeout), timeout=connect_timeout + 5
            )
        except BaseException:
            self.loop.call_soon_threadsafe(self.loop.stop)
            raise
        self.js: JetStreamContext = self.nc.jetstream()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    async def _connect(self, name: str, timeout: float) -> Client:
        refused = asyncio.Event()  # the server turned the login away: stop trying
        last_error = turned_away_by = ""

        async def on_error(exc: Exception) -> None:
            nonlocal last_error, turned_away_by
            text = str(exc) or type(exc).__name__
            if "permissions violation" in text.lower():
                self.refused += 1
                log.warning("nats refused: %s", exc)
                return
            last_error = text
            if "authorization violation" in text.lower():
                turned_away_by = text  # what later attempts say must not hide it
                refused.set()
            log.debug("nats: %s", exc)

        async def on_disconnect() -> None:
            log.info("nats: disconnected from %s", self.url)

        async def on_reconnect() -> None:
            log.info("nats: reconnected to %s", self.url)

        # Reconnects are unlimited once connected; the first connect must not wait
        # forever, so it gets a deadline of its own, and ends at once when the server
        # refuses the credentials.
        opening = asyncio.ensure_future(self._open(name, on_error, on_disconnect, on_reconnect))
        turned_away = asyncio.ensure_future(refused.wait())
        done, _ = await asyncio.wait({opening, turned_away}, timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        turned_away.cancel()
        reason = turned_away_by or last_error or "TimeoutError"
        if opening in done:
            try:
                return opening.result()
            except Exception as exc:
                reason = turned_away_by or str(exc) or type(exc).__name__
                cause: BaseException | None = exc
        else:
            opening.cancel()
            with contextlib.suppress(BaseException):
                await opening
            cause = None
        who = f" as {self.auth.describe()}" if self.auth is not None else ""
        raise BusError(f"cannot connect to NATS at {self.url}{who}: {reason}") from cause

    async def _open(
        self,
        name: str,
        on_error: Callable[[Exception], Awaitable[None]],
        on_disconnect: Callable[[], Awaitable[None]],
        on_reconnect: Callable[[], Awaitable[None]],
    ) -> Client:
        options: dict[str, Any] = {
            "name": name,
            "max_reconnect_attempts": -1,
            "reconnect_time_wait": 0.5,
            "connect_timeout": 5,
            "allow_reconnect": True,
            "error_cb": on_error,
            "disconnected_cb": on_disconnect,
            "reconnected_cb": on_reconnect,
            **(self.auth.connect_options() if self.auth is not None else {}),
        }
        client = _TolerantClient()
        await client.connect(self.url, **options)
        return client

    # --- thread-safe API ----------------------------------------------------------------

    def publish(
        self,
        subject: str,
        data: bytes,
        headers: dict[str, str] | None = None,
        reply: str = "",
    ) -> None:
        """Publish without waiting; messages keep the order they were published in.
        ``reply`` forwards a request: whoever answers, answers the original requester.

        Publishes wait in one queue, sent by one task on the loop; only the first of a
        burst wakes the loop (a write to its self-pipe, which also lets another thread take
        the interpreter), the rest go with it."""
        if self.closed:
            return
        with self._queue_lock:
            self._queued.append((subject, data, headers, reply))
            if self._sending:  # the sender at work (or woken) sends this too
                return
            self._sending = True
        self.loop.call_soon_threadsafe(lambda: self.loop.create_task(self._send_queued()))

    async def _send_queued(self) -> None:
        """Send what waits, in order, until nothing does (on the loop; one at a time). It
        stops only once it found the queue empty under the lock, so a publish that comes
        after that wakes a new one."""
        while True:
            with self._queue_lock:
                if not self._queued:
                    self._sending = False
                    return
                subject, data, headers, reply = self._queued.popleft()
            try:
                await self.nc.publish(subject, data, reply=reply, headers=headers)
            except Exception as exc:
                log.warning("publish failed: %s", exc)
            except BaseException:  # cancelled (the loop stops): the next publish wakes anew
                with self._queue_lock:
                    self._sending = False
                raise

    def subscribe(
        self, subject: str, callback: Callable[[Inbound], None], queue: str = ""
    ) -> _Sub:
        """Subscribe and wait until the server knows of the interest."""

        async def handler(msg: Msg) -> None:
            try:
                callback(_inbound(msg))
            except Exception:  # a callback must never take the subscription down
                log.exception("subscription callback for %s failed", subject)

        async def go() -> Any:
            sub = await self.nc.subscribe(subject, queue=queue, cb=handler)
            await self.nc.flush()
            return sub

        return _Sub(self, self.call(go))

    def request(
        self,
        subject: str,
        data: bytes,
        timeout: float,
        on_reply: Callable[[bytes | None, str], None],
    ) -> None:
        """Start a request; ``on_reply`` runs on the loop with the reply or an error text."""

        async def go() -> None:
            try:
                reply = await self._request(subject, data, timeout)
            except BusError as exc:
                on_reply(None, str(exc))
            except Exception as exc:  # every failure must reach the asker, or it waits forever
                on_reply(None, f"{type(exc).__name__}: {exc}")
            else:
                on_reply(reply, "")

        self.loop.call_soon_threadsafe(lambda: self.loop.create_task(go()))

    def request_sync(self, subject: str, data: bytes, timeout: float) -> bytes:
        """Blocking request for clients; raises RequestTimeout or BusError."""
        result: bytes = self.call(lambda: self._request(subject, data, timeout), timeout + 5)
        return result

    async def _request(self, subject: str, data: bytes, timeout: float) -> bytes:
        # "No responders" is retried within the timeout: right after a reconnect the
        # responder's subscription may not be back yet.
        deadline = self.loop.time() + timeout
        while True:
            left = deadline - self.loop.time()
            try:
                msg = await self.nc.request(subject, data, timeout=max(left, 0.001))
            except NatsTimeout:
                raise RequestTimeout(f"no reply from {subject} within {timeout:g} s") from None
            except NoRespondersError:
                if deadline - self.loop.time() < NO_RESPONDERS_BACKOFF:
                    raise BusError(f"nobody is listening on {subject}") from None
                await asyncio.sleep(NO_RESPONDERS_BACKOFF)
                continue
            return bytes(msg.data)

    def spawn(self, factory: Callable[[], Coroutine[Any, Any, None]]) -> Future[None]:
        """Run a coroutine on the loop; cancelling the returned future cancels the task."""
        return asyncio.run_coroutine_threadsafe(factory(), self.loop)

    def call(self, factory: Callable[[], Awaitable[Any]], timeout: float = 10.0) -> Any:
        """Run a coroutine on the loop and wait for its result (never from the loop)."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("NatsBus.call would deadlock on the bus loop")

        async def wrap() -> Any:
            return await factory()

        return asyncio.run_coroutine_threadsafe(wrap(), self.loop).result(timeout)

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until everything published so far reached the server."""
        self.call(lambda: self.nc.flush(timeout=int(max(1, timeout))), timeout + 1)

    def close(self) -> None:
        """Drain and close the connection, then stop the loop thread."""
        if self.closed:
            return
        with contextlib.suppress(Exception):
            self.call(self._drain, timeout=10)
        self.closed = True
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)

    async def _drain(self) -> None:
        # Let queued publishes go first.
        while self._sending:  # the sender empties the queue, then stops
            await asyncio.sleep(0.001)
        with contextlib.suppress(Exception):
            await self.nc.flush(timeout=2)
        await self.nc.close()


def _inbound(msg: Msg) -> Inbound:
    return Inbound(
        subject=msg.subject,
        data=bytes(msg.data),
        reply=msg.reply or "",
        headers=dict(msg.headers) if msg.headers else None,
    )
