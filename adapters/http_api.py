"""The HTTP connector: post a message, follow a session as server-sent events, metrics.

A plain bus client, like the terminal (it talks to the engine only over NATS), plus a
read of the metrics view for ``/metrics``. Endpoints:

- ``POST /messages``: a JSON UserMessage (``text`` required; ``session_id`` an id or a
  name, ``channel`` defaults to ``http``) -> ``202 {"session_id"}``, or the engine's
  refusal as ``{"error", "reason"}`` with a fitting status (400, 402, 403, 404, 413, 429;
  502 for any other refusal, 504 when the engine does not answer).
- ``GET /sessions``: the session view as JSON.
- ``GET /sessions/<id or name>/events[?channel=NAME]``: ``text/event-stream``. The
  channel (``http-<random>`` unless given) watches the session in the foreground: first
  the replies it missed (``event: catchup``), then everything live (``event: <kind>``,
  ``id: <seq>``, ``data: <the ChannelMessage as JSON>``). Reusing a channel name after a
  disconnect catches up only what it missed. A comment line every ``heartbeat`` seconds
  keeps proxies from closing the stream.
- ``GET /metrics``: the metrics view in the Prometheus text format.
- ``GET /health``: ``{"ok": true}``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import secrets
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import msgspec

from actors.ports import Bus, BusError
from actors.runtime import AskTimeout, RemoteError, ask
from events.codec import DecodeFailure, Decoder
from events.messages import (
    Accepted,
    ChannelMessage,
    ListSessions,
    SessionList,
    UserMessage,
    Watching,
    WatchSession,
)
from events.subjects import Subjects, check_token

log = logging.getLogger(__name__)

STATUS_OF_ERROR = {
    "invalid": 400, "bad_workspace": 400, "too_large": 413, "budget_exhausted": 402,
    "not_allowed": 403, "unknown_session": 404, "rate_limited": 429, "session_limit": 429,
}
"""HTTP status for each ErrorReply kind the engine may answer (others: 502)."""

PROMETHEUS_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class HttpApi:
    """The HTTP server; ``start`` serves on a thread until ``stop``."""

    def __init__(self, bus: Bus, subjects: Subjects, *, host: str = "127.0.0.1",
                 port: int = 0, metrics: Callable[[], str] | None = None,
                 heartbeat: float = 15.0, timeout: float = 15.0) -> None:
        self.bus = bus
        self.subjects = subjects
        self.metrics = metrics
        self.heartbeat = heartbeat
        self.timeout = timeout
        self._stopping = threading.Event()
        self._latest: dict[str, int] = {}
        """Per channel, the newest stream's number: only it may send the channel to the
        background when it ends (a client that reconnects quickly has a newer one)."""
        self._lock = threading.Lock()
        self._count = 0
        api = self

        class Handler(_Handler):
            owner = api

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, name="http-api",
                                        daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> HttpApi:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)

    # --- the work behind each endpoint ----------------------------------------------

    def post_message(self, body: bytes) -> tuple[int, dict[str, Any]]:
        try:
            fields = json.loads(body or b"{}")
            if not isinstance(fields, dict):
                raise ValueError("the body must be a JSON object")
            fields.setdefault("channel", "http")
            fields.pop("type", None)
            message = msgspec.convert(fields, UserMessage)
        except (ValueError, msgspec.ValidationError) as exc:
            return 400, {"error": "invalid", "reason": str(exc)}
        try:
            accepted = ask(self.bus, self.subjects.inbox, message, Accepted,
                           timeout=self.timeout)
        except RemoteError as exc:
            reply = exc.reply
            return STATUS_OF_ERROR.get(reply.error, 502), {"error": reply.error,
                                                           "reason": reply.reason}
        except (AskTimeout, BusError) as exc:
            return 504, {"error": "timeout", "reason": str(exc)}
        return 202, {"session_id": accepted.session_id}

    def sessions(self) -> list[dict[str, Any]]:
        listed = ask(self.bus, self.subjects.manager, ListSessions(), SessionList,
                     timeout=self.timeout)
        return [msgspec.to_builtins(s) for s in listed.sessions]

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

    def resolve(self, ref: str) -> str | None:
        """The session id ``ref`` names (an id or a name), or None."""
        for row in self.sessions():
            if ref in (row["session_id"], row["name"]):
                return str(row["session_id"])
        return None


class _Handler(BaseHTTPRequestHandler):
    owner: HttpApi
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http: " + format, *args)

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        path = parts.path.rstrip("/")
        if path == "/health":
            self._json(200, {"ok": True})
        elif path == "/metrics":
            if self.owner.metrics is None:
                self._json(404, {"error": "not_found", "reason": "no metrics here"})
            else:
                self._text(200, self.owner.metrics(), PROMETHEUS_TYPE)
        elif path == "/sessions":
            try:
                self._json(200, {"sessions": self.owner.sessions()})
            except RemoteError as exc:
                self._json(502, {"error": exc.reply.error, "reason": exc.reply.reason})
            except (AskTimeout, BusError) as exc:
                self._json(504, {"error": "timeout", "reason": str(exc)})
        elif path.startswith("/sessions/") and path.endswith("/events"):
            ref = path[len("/sessions/"):-len("/events")]
            channel = parse_qs(parts.query).get("channel", [""])[0]
            self._events(ref, channel)
        else:
            self._json(404, {"error": "not_found", "reason": f"no such endpoint {path!r}"})

    def do_POST(self) -> None:
        path = urlsplit(self.path).path.rstrip("/")
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if path != "/messages":
            self._json(404, {"error": "not_found", "reason": f"no such endpoint {path!r}"})
            return
        status, answer = self.owner.post_message(body)
        self._json(status, answer)

    # --- server-sent events -------------------------------------------------------------

    def _events(self, ref: str, channel: str) -> None:
        owner = self.owner
        channel = channel or f"http-{secrets.token_hex(4)}"
        try:
            check_token(channel, "channel")
            session_id = owner.resolve(ref)
        except ValueError as exc:
            self._json(400, {"error": "invalid", "reason": str(exc)})
            return
        except (AskTimeout, BusError) as exc:
            self._json(504, {"error": "timeout", "reason": str(exc)})
            return
        if session_id is None:
            self._json(404, {"error": "unknown_session", "reason": f"no session {ref!r}"})
            return
        inbox: queue.Queue[ChannelMessage] = queue.Queue()
        decoder: Decoder[ChannelMessage] = Decoder(ChannelMessage)

        def on_message(data: bytes) -> None:
            with contextlib.suppress(DecodeFailure):
                message = decoder.decode(data)
                if message.session_id == session_id:
                    inbox.put(message)

        sub = owner.bus.subscribe(owner.subjects.channel_out(channel),
                                  lambda m: on_message(m.data))
        number = owner.open_stream(channel)
        try:
            ask(owner.bus, owner.subjects.router, WatchSession(
                session_id=session_id, channel=channel), Watching, timeout=owner.timeout)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("X-Tether-Channel", channel)
            self.end_headers()
            self.close_connection = True
            self._stream(inbox)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away
        except (AskTimeout, BusError, RemoteError) as exc:
            self._json(504, {"error": "timeout", "reason": str(exc)})
        finally:
            sub.close()
            # Only the channel's newest stream ends its watch: a client that is back on
            # a newer one still watches.
            if owner.close_stream(channel, number):
                with contextlib.suppress(AskTimeout, BusError, RemoteError):
                    ask(owner.bus, owner.subjects.router, WatchSession(
                        session_id=session_id, channel=channel, foreground=False),
                        Watching, timeout=owner.timeout)

    def _stream(self, inbox: queue.Queue[ChannelMessage]) -> None:
        self.wfile.write(b": watching\n\n")
        self.wfile.flush()
        while not self.owner._stopping.is_set():
            try:
                message = inbox.get(timeout=self.owner.heartbeat)
            except queue.Empty:
                self.wfile.write(b": keep-alive\n\n")
                self.wfile.flush()
                continue
            data = msgspec.json.encode(message).decode()
            self.wfile.write(f"id: {message.seq}\nevent: {message.kind}\ndata: {data}\n\n"
                             .encode())
            self.wfile.flush()

    # --- plain answers ------------------------------------------------------------------

    def _json(self, status: int, body: Any) -> None:
        self._text(status, json.dumps(body), "application/json")

    def _text(self, status: int, text: str, content_type: str) -> None:
        data = text.encode()
        self.send_response(status, HTTPStatus(status).phrase)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
