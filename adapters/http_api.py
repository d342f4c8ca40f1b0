"""The HTTP connector: post a message, follow a session as server-sent events, metrics.

A bus client like the terminal (it talks to the engine only over NATS), served by
starlette on uvicorn, plus a read of the metrics view for ``/metrics``. Endpoints:

- ``POST /messages``: a JSON UserMessage (``text`` required; ``session_id`` an id or a
  name, ``channel`` defaults to ``http``) -> ``202 {"session_id", "name"}``, or the
  engine's refusal as ``{"error", "reason"}`` with a fitting status.
- ``GET /sessions``: the session view as JSON.
- ``GET /sessions/<id or name>/events[?channel=NAME]``: ``text/event-stream``. The
  channel (``http-<random>`` unless given) watches the session in the foreground: first
  the replies it missed (``event: catchup``), then everything live (``event: <kind>``,
  ``id: <seq>``, ``data: <the ChannelMessage as JSON>``); a comment every ``heartbeat``
  seconds keeps proxies from closing it.
- ``GET /metrics``: the metrics view, the relay's counters and the process's metrics, in
  the Prometheus text format, or OpenMetrics when ``Accept`` asks for it.
- ``GET /health``: ``{"ok": true}``.

Who may come in (:class:`Gate`): every request's ``Host`` must name this server (the
loopback names and the bound port, or ``allowed_hosts``) and its ``Origin``, when sent, must
be this server or one of ``cors_origins``: a web page elsewhere, or a name rebound to
127.0.0.1, is refused (403). Every endpoint but ``/health`` (and ``/metrics`` when
``metrics_open``) needs ``Authorization: Bearer <token>`` (401). The sender of every
message is the token's ``user``, never a field of the body (nor is ``origin``). Bodies
are JSON only (``application/json``, 415), at most ``body_limit`` bytes (413), read
within ``body_seconds`` (408); headers within ``header_seconds`` (the connection is
closed); ``Host``, ``Origin`` and ``Authorization`` come once (400). At most
``max_requests`` requests are in progress (503) and ``max_connections`` connections open.
Every error, whatever the status, is ``{"error", "reason"}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import secrets
import socket
import threading
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import msgspec
import uvicorn
from prometheus_client import CollectorRegistry
from sse_starlette.sse import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from tether.actors.ports import Bus, BusError
from tether.actors.runtime import AskTimeout, RemoteError, ask
from tether.adapters.http_protocol import guarded_protocol
from tether.events.codec import DecodeFailure, Decoder
from tether.events.messages import (
    Accepted,
    ChannelMessage,
    ListSessions,
    SessionList,
    UserMessage,
    Watching,
    WatchSession,
)
from tether.events.subjects import Subjects, check_token
from tether.projections.prometheus import exposition

log = logging.getLogger(__name__)

STATUS_OF_ERROR = {
    "invalid": 400, "bad_request": 400, "bad_workspace": 400, "too_large": 413,
    "budget_exhausted": 402,
    "not_allowed": 403, "unknown_session": 404, "rate_limited": 429, "session_limit": 429,
}
"""HTTP status for each ErrorReply kind the engine may answer (others: 502)."""

ERROR_OF_STATUS = {
    400: "invalid", 401: "unauthorized", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 408: "body_timeout", 413: "too_large",
    415: "unsupported_media_type", 429: "rate_limited", 500: "internal", 503: "busy",
}
"""The ``error`` code of a status the connector itself answers."""

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
"""The names a loopback server answers to by default."""

#: Body fields the sender may not choose: the connector sets them (``origin``, the route
#: of background notices, is this channel: an HTTP client may not send them elsewhere).
_SET_BY_THE_CONNECTOR = ("type", "user", "origin")

#: Request headers that must come at most once: with two, which one a check reads and
#: which one a later reader uses could differ.
_SINGLE_HEADERS = frozenset({"host", "origin", "authorization", "content-type",
                             "content-length"})


def error(status: int, reason: str, code: str = "",
          headers: Mapping[str, str] | None = None) -> JSONResponse:
    """The JSON error every refusal is."""
    return JSONResponse({"error": code or ERROR_OF_STATUS.get(status, "error"),
                         "reason": reason}, status_code=status, headers=headers)


class HttpApi:
    """The HTTP server; ``start`` serves on a thread until ``stop``. ``token``: the bearer
    token every request but ``/health`` must carry; ``user``: the principal its messages
    come from. See the module's contract for the rest."""

    def __init__(self, bus: Bus, subjects: Subjects, *, token: str, user: str,
                 host: str = "127.0.0.1", port: int = 0,
                 metrics: CollectorRegistry | None = None, metrics_open: bool = False,
                 allowed_hosts: Iterable[str] = (), cors_origins: Iterable[str] = (),
                 heartbeat: float = 15.0, timeout: float = 15.0,
                 body_limit: int = 1 << 20, body_seconds: float = 10.0,
                 header_seconds: float = 10.0, max_requests: int = 64,
                 max_connections: int = 256) -> None:
        if not token:
            raise ValueError("the HTTP connector needs a token")
        self.bus = bus
        self.subjects = subjects
        self.user = user
        self.metrics = metrics
        self.heartbeat = heartbeat
        self.timeout = timeout
        self.body_limit = body_limit
        self.body_seconds = body_seconds
        self._latest: dict[str, int] = {}
        """Per channel, the newest stream's number: only it may send the channel to the
        background when it ends (a client that reconnects quickly has a newer one)."""
        self._lock = threading.Lock()
        self._count = 0
        self._socket = socket.create_server((host, port))
        self.port = self._socket.getsockname()[1]
        self.host = host
        names = {*LOOPBACK_NAMES, host, *allowed_hosts}
        gate = Gate(
            hosts={f"{n}:{self.port}" for n in names} | (names if self.port == 80 else set()),
            origins={f"http://{n}:{self.port}" for n in names} | set(cors_origins),
            cors=set(cors_origins), token=token,
            open_paths={"/health"} | ({"/metrics"} if metrics_open else set()),
            max_requests=max_requests)
        app = Starlette(
            routes=[
                Route("/messages", self._post_message, methods=["POST"]),
                Route("/sessions", self._sessions, methods=["GET"]),
                Route("/sessions/{ref}/events", self._events, methods=["GET"]),
                Route("/metrics", self._metrics, methods=["GET"]),
                Route("/health", self._health, methods=["GET"]),
            ],
            exception_handlers={HTTPException: _http_error, Exception: _internal_error},
        )
        app.router.redirect_slashes = False  # "/health/" is a 404 like any unknown path
        config = uvicorn.Config(
            gate.wrap(app), log_level="warning", lifespan="off", access_log=False,
            http=guarded_protocol(header_seconds, max_connections), timeout_keep_alive=5,
            h11_max_incomplete_event_size=32 * 1024, timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run,
                                        kwargs={"sockets": [self._socket]},
                                        name="http-api", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> HttpApi:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()

    # --- endpoints ----------------------------------------------------------------------

    async def _health(self, request: Request) -> Response:
        return JSONResponse({"ok": True})

    async def _metrics(self, request: Request) -> Response:
        if self.metrics is None:
            return error(404, "no metrics here")
        body, content_type = await run_in_threadpool(
            exposition, self.metrics, request.headers.get("accept"))
        return Response(body, media_type=content_type)

    async def _sessions(self, request: Request) -> Response:
        try:
            return JSONResponse({"sessions": await run_in_threadpool(self.sessions)})
        except RemoteError as exc:
            return error(502, exc.reply.reason, exc.reply.error)
        except (AskTimeout, BusError) as exc:
            return error(504, str(exc), "timeout")

    async def _post_message(self, request: Request) -> Response:
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            return error(415, "the body must be JSON, sent as Content-Type: application/json")
        body = await self._body(request)
        status, answer = await run_in_threadpool(self.post_message, body)
        return JSONResponse(answer, status_code=status)

    async def _body(self, request: Request) -> bytes:
        """The request's body, at most ``body_limit`` bytes, read within
        ``body_seconds``; raises HTTPException 413 or 408 otherwise."""
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > self.body_limit:
            raise HTTPException(413, f"the body is larger than {self.body_limit} bytes")
        chunks: list[bytes] = []
        size = 0

        async def read() -> None:
            nonlocal size
            async for chunk in request.stream():
                size += len(chunk)
                if size > self.body_limit:
                    raise HTTPException(413, f"the body is larger than {self.body_limit} "
                                             "bytes")
                chunks.append(chunk)

        try:
            await asyncio.wait_for(read(), self.body_seconds)
        except TimeoutError:
            raise HTTPException(408, f"the body did not arrive within "
                                     f"{self.body_seconds:g} s") from None
        return b"".join(chunks)

    async def _events(self, request: Request) -> Response:
        ref = request.path_params["ref"]
        channel = request.query_params.get("channel") or f"http-{secrets.token_hex(4)}"
        try:
            check_token(channel, "channel")
            session_id = await run_in_threadpool(self.resolve, ref)
        except ValueError as exc:
            return error(400, str(exc))
        except (AskTimeout, BusError) as exc:
            return error(504, str(exc), "timeout")
        if session_id is None:
            return error(404, f"no session {ref!r}", "unknown_session")
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[ChannelMessage] = asyncio.Queue()
        decoder: Decoder[ChannelMessage] = Decoder(ChannelMessage)

        def on_message(data: bytes) -> None:
            with contextlib.suppress(DecodeFailure):
                message = decoder.decode(data)
                if message.session_id == session_id:
                    loop.call_soon_threadsafe(inbox.put_nowait, message)

        sub = self.bus.subscribe(self.subjects.channel_out(channel),
                                 lambda m: on_message(m.data))
        number = self.open_stream(channel)
        try:
            await run_in_threadpool(self._watch, session_id, channel, True)
        except (AskTimeout, BusError, RemoteError) as exc:
            sub.close()
            self.close_stream(channel, number)
            return error(504, str(exc), "timeout")

        async def events() -> AsyncIterator[ServerSentEvent]:
            try:
                yield ServerSentEvent(comment="watching", sep="\n")
                while True:
                    try:
                        message = await asyncio.wait_for(inbox.get(), self.heartbeat)
                    except TimeoutError:
                        yield ServerSentEvent(comment="keep-alive", sep="\n")
                        continue
                    yield ServerSentEvent(data=msgspec.json.encode(message).decode(),
                                          event=message.kind, id=str(message.seq),
                                          sep="\n")
            finally:
                sub.close()
                # Only the channel's newest stream ends its watch: a client that is back
                # on a newer one still watches.
                if self.close_stream(channel, number):
                    with contextlib.suppress(AskTimeout, BusError, RemoteError):
                        await run_in_threadpool(self._watch, session_id, channel, False)

        return EventSourceResponse(events(), headers={"X-Tether-Channel": channel},
                                   ping=3600, sep="\n", send_timeout=self.heartbeat)

    # --- the work behind the endpoints (blocking: run off the event loop) ---------------

    def post_message(self, body: bytes) -> tuple[int, dict[str, Any]]:
        """Send the message ``body`` holds as the token's user; (status, answer)."""
        try:
            # msgspec, not json: it refuses NaN and Infinity, which no field takes.
            fields = msgspec.json.decode(body or b"{}")
            if not isinstance(fields, dict):
                raise ValueError("the body must be a JSON object")
            for name in _SET_BY_THE_CONNECTOR:
                fields.pop(name, None)
            fields.setdefault("channel", "http")
            message = msgspec.convert({**fields, "user": self.user}, UserMessage)
        except (ValueError, RecursionError, msgspec.DecodeError,
                msgspec.ValidationError) as exc:
            reason = "the JSON is nested too deeply" if isinstance(exc, RecursionError) \
                else str(exc)
            return 400, {"error": "invalid", "reason": reason}
        try:
            accepted = ask(self.bus, self.subjects.inbox, message, Accepted,
                           timeout=self.timeout)
        except RemoteError as exc:
            reply = exc.reply
            return STATUS_OF_ERROR.get(reply.error, 502), {"error": reply.error,
                                                           "reason": reply.reason}
        except (AskTimeout, BusError) as exc:
            return 504, {"error": "timeout", "reason": str(exc)}
        return 202, {"session_id": accepted.session_id, "name": accepted.name}

    def sessions(self) -> list[dict[str, Any]]:
        listed = ask(self.bus, self.subjects.manager, ListSessions(), SessionList,
                     timeout=self.timeout)
        return [msgspec.to_builtins(s) for s in listed.sessions]

    def resolve(self, ref: str) -> str | None:
        """The session id ``ref`` names (an id or a name), or None."""
        for row in self.sessions():
            if ref in (row["session_id"], row["name"]):
                return str(row["session_id"])
        return None

    def _watch(self, session_id: str, channel: str, foreground: bool) -> None:
        ask(self.bus, self.subjects.router, WatchSession(
            session_id=session_id, channel=channel, foreground=foreground), Watching,
            timeout=self.timeout)

    def open_stream(self, channel: str) -> int:
        """Number a new stream of ``channel``; it is now the channel's newest."""
        with self._lock:
            self._count += 1
            self._latest[channel] = self._count
            return self._count

    def close_stream(self, channel: str, number: int) -> bool:
        """Forget stream ``number``; whether it was the channel's newest."""
        with self._lock:
            if self._latest.get(channel) != number:
                return False
            del self._latest[channel]
            return True


class Gate:
    """Who may come in, before any endpoint runs (an ASGI middleware): see the module's
    contract. ``hosts``: the accepted ``Host`` values; ``origins``: the accepted
    ``Origin`` values; ``cors``: the origins a browser may call from (answered with CORS
    headers, preflights included); ``open_paths``: the paths served without the token;
    ``max_requests``: how many requests (open event streams included) may be in progress
    at once (503 beyond)."""

    def __init__(self, *, hosts: set[str], origins: set[str], cors: set[str], token: str,
                 open_paths: set[str], max_requests: int = 64) -> None:
        self.hosts = {h.lower() for h in hosts}
        self.origins = origins
        self.cors = cors
        self._expected = f"Bearer {token}".encode()
        self.open_paths = open_paths
        self.max_requests = max_requests
        self.in_progress = 0

    def wrap(self, app: ASGIApp) -> ASGIApp:
        async def gated(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            refusal, extra = self.check(scope)
            if refusal is None and self.in_progress >= self.max_requests:
                refusal = error(503, f"{self.in_progress} requests are in progress; "
                                     "try again when one has ended", "busy")
            if refusal is not None:
                refusal.headers["connection"] = "close"
                await refusal(scope, receive, send)
                return

            async def with_headers(message: Any) -> None:
                if message["type"] == "http.response.start":
                    message["headers"] = [*message.get("headers", []), *extra,
                                          *_closing(message["status"])]
                await send(message)

            self.in_progress += 1  # one event loop: no lock needed
            try:
                await app(scope, receive, with_headers)
            finally:
                self.in_progress -= 1

        return gated

    def check(self, scope: Scope) -> tuple[Response | None, list[tuple[bytes, bytes]]]:
        """A refusal for the request, or None and the CORS headers to add."""
        headers: dict[str, str] = {}
        for key, value in scope.get("headers", []):
            name = key.decode("latin-1").lower()
            if name in headers and name in _SINGLE_HEADERS:
                return error(400, f"the header {name!r} was sent more than once"), []
            headers[name] = value.decode("latin-1")
        host = headers.get("host", "").lower()
        if host not in self.hosts:
            return error(403, f"this server does not answer to the host {host!r}",
                         "forbidden_host"), []
        origin = headers.get("origin")
        if origin is not None and origin not in self.origins:
            return error(403, f"requests from {origin!r} are not accepted",
                         "forbidden_origin"), []
        cors = []
        if origin is not None and origin in self.cors:
            cors = [(b"access-control-allow-origin", origin.encode()),
                    (b"vary", b"Origin")]
            if scope["method"] == "OPTIONS":  # a preflight: no token is sent with it
                return Response(status_code=204, headers={
                    "Access-Control-Allow-Origin": origin,
                    "Access-Control-Allow-Methods": "GET, POST",
                    "Access-Control-Allow-Headers": "Authorization, Content-Type",
                    "Access-Control-Max-Age": "600", "Vary": "Origin"}), []
        if scope["path"].rstrip("/") in self.open_paths:
            return None, cors
        given = headers.get("authorization", "").encode("latin-1")
        if not hmac.compare_digest(given, self._expected):
            return error(401, "send the token `tether token` shows, as "
                              "Authorization: Bearer <token>",
                         headers={"WWW-Authenticate": 'Bearer realm="tether"'}), []
        return None, cors


def _closing(status: int) -> list[tuple[bytes, bytes]]:
    """``Connection: close`` for an error: the request's body may be unread, and a client
    that keeps sending it must not keep the connection (and a server slot) for ever."""
    return [(b"connection", b"close")] if status >= 400 else []


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    reason = exc.detail if exc.status_code in (408, 413) else {
        404: f"no such endpoint {request.url.path!r}",
        405: f"{request.method} is not served at {request.url.path!r}",
    }.get(exc.status_code, str(exc.detail))
    return error(exc.status_code, reason, headers=exc.headers)


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.exception("http: %s %s failed", request.method, request.url.path, exc_info=exc)
    return error(500, "the server failed on this request; its log says why")
