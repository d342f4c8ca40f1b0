"""uvicorn's HTTP/1.1 protocol, guarded against clients that never finish asking.

uvicorn has no limit on the time a client may take to send a request's headers, so a
client that opens connections and sends a header a byte at a time (or nothing) holds them
open for ever: with a connection limit, the server then answers nobody. The protocol that
:func:`guarded_protocol` builds closes a connection whose request headers are not complete
``header_seconds`` after it opened (or after its previous response), a connection whose
request was answered before its body was read, and any connection beyond
``max_connections`` at once; and answers a request it cannot parse with the
connector's JSON error rather than uvicorn's plain text.
"""

from __future__ import annotations

import asyncio
import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["guarded_protocol"]


def guarded_protocol(header_seconds: float, max_connections: int) -> type[H11Protocol]:
    """An ``H11Protocol`` class for ``uvicorn.Config(http=...)`` with these limits."""

    class GuardedH11Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                transport.close()
                return
            self._await_headers()

        def connection_lost(self, exc: Exception | None) -> None:
            self._headers_came()
            super().connection_lost(exc)

        def handle_events(self) -> None:
            super().handle_events()
            if self.conn.their_state is not h11.IDLE:
                self._headers_came()

        def on_response_complete(self) -> None:
            if self.conn.their_state is not h11.DONE:
                # Answered before its body was read (a refusal, /health): a client that
                # keeps trickling the body it announced must not keep the connection.
                self.transport.close()
            super().on_response_complete()
            if not self.transport.is_closing():
                self._await_headers()  # the next request's headers have the same time

        def send_400_response(self, msg: str) -> None:
            body = json.dumps({"error": "invalid", "reason": msg}).encode()
            self.transport.write(self.conn.send(h11.Response(status_code=400, headers=[
                (b"content-type", b"application/json"), (b"connection", b"close"),
                (b"content-length", str(len(body)).encode())])) or b"")
            self.transport.write(self.conn.send(h11.Data(data=body)) or b"")
            self.transport.write(self.conn.send(h11.EndOfMessage()) or b"")
            self.transport.close()

        def _await_headers(self) -> None:
            self._headers_came()
            self._header_timer = self.loop.call_later(header_seconds, self._too_slow)

        def _headers_came(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _too_slow(self) -> None:
            self._header_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return GuardedH11Protocol
