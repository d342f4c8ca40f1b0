"""The stand-in's HTTP server: ``FakeLLM`` answers ``POST /v1/messages`` with the next
scripted response, streamed as the real API's server-sent events."""

from __future__ import annotations

import json
import select
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal

import msgspec
import msgspec.yaml

from tether.adapters.fake_llm.checks import (
    header_problem,
    last_user_text,
    request_problem,
    tool_choice_problem,
)
from tether.adapters.fake_llm.script import (
    ERROR_STATUS,
    EXHAUSTED_TEXT,
    Block,
    Response,
    Script,
)


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _estimate_tokens(chars: int) -> int:
    return max(1, chars // 4)


class _ClientGone(Exception):
    """The client closed the connection mid-stream."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    fake: FakeLLM

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return  # a client going away is not worth a traceback
        super().handle_error(request, client_address)


class FakeLLM:
    """A scripted Anthropic-compatible HTTP server.

    ``start()`` binds (port 0 picks a free port) and serves on a daemon thread; ``stop()``
    shuts it down and aborts streams in progress. Counters (``served``, ``exhausted``,
    ``completed``, ``disconnects``) and ``requests`` are safe to read from any thread.
    """

    def __init__(
        self,
        script: Script,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self._script = script
        self._host = host
        self._port = port
        self._log = log
        self._lock = threading.Condition()
        self._served_flags = [False] * len(script.responses)
        self._requests: list[bytes] = []
        """Each request body as received: bytes, which the garbage collector does not
        walk (a long run's bodies, each holding the conversation so far, made every full
        collection of the process that runs the stand-in take up to 120 ms)."""
        self._tool_ids = 0
        self._message_ids = 0
        self._served = 0
        self._exhausted = 0
        self._completed = 0
        self._disconnects = 0
        self._script_errors: list[str] = []
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --

    def start(self) -> FakeLLM:
        """Bind and serve on a daemon thread; return self."""
        if self._server is not None:
            return self
        server = _Server((self._host, self._port), _Handler)
        server.fake = self
        self._server = server
        self._stopping.clear()
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.1},
            daemon=True,
            name=f"fake-llm-{self.port}",
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket; streams in progress end at their next pause."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- observation --

    @property
    def port(self) -> int:
        """The bound port (after ``start``)."""
        if self._server is None:
            raise RuntimeError("FakeLLM is not started")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT``: pass it as the SDK's ``base_url``."""
        return f"http://{self._host}:{self.port}"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request body received, in arrival order (decoded anew: changing one
        changes no record)."""
        with self._lock:
            received = list(self._requests)
        return [json.loads(raw) for raw in received]

    def request(self, index: int) -> dict[str, Any]:
        """The body of request ``index`` (from 0, in arrival order; negative counts from
        the last), decoded anew; IndexError when there is none."""
        with self._lock:
            raw = self._requests[index]
        body: dict[str, Any] = json.loads(raw)
        return body

    @property
    def served(self) -> int:
        """How many scripted responses have been served."""
        with self._lock:
            return self._served

    @property
    def exhausted(self) -> int:
        """How many requests found no response left."""
        with self._lock:
            return self._exhausted

    @property
    def completed(self) -> int:
        """How many streams were written to the end."""
        with self._lock:
            return self._completed

    @property
    def disconnects(self) -> int:
        """How many streams stopped because the client went away."""
        with self._lock:
            return self._disconnects

    @property
    def script_errors(self) -> list[str]:
        """Script problems met while serving (each answered HTTP 500), in order; a test
        may assert it is empty."""
        with self._lock:
            return list(self._script_errors)

    @property
    def remaining(self) -> int:
        """How many scripted responses are not served yet."""
        with self._lock:
            return self._served_flags.count(False)

    def wait_for_completed(self, count: int = 1, timeout: float = 5.0) -> bool:
        """Block until ``completed >= count`` (True) or ``timeout`` seconds pass (False).

        A client may read the end of a stream just before the server counts it: wait
        rather than read ``completed`` right after a response."""
        with self._lock:
            return self._lock.wait_for(lambda: self._completed >= count, timeout=timeout)

    def wait_for_disconnects(self, count: int = 1, timeout: float = 5.0) -> bool:
        """Block until ``disconnects >= count`` (True) or ``timeout`` seconds pass (False)."""
        with self._lock:
            return self._lock.wait_for(lambda: self._disconnects >= count, timeout=timeout)

    # -- used by the handler --

    def _record(self, body: dict[str, Any], raw: bytes) -> tuple[int, Response] | None:
        """Record a request (``raw``: its body as received) and pick its response and the
        response's index in the script (None when the script is exhausted)."""
        wanted = last_user_text(body)
        with self._lock:
            self._requests.append(raw)
            for i, response in enumerate(self._script.responses):
                if self._served_flags[i]:
                    continue
                if response.match is None or response.match in wanted:
                    self._served_flags[i] = True
                    self._served += 1
                    self._emit(f"request {len(self._requests)}: response {i + 1}")
                    return i, response
            self._exhausted += 1
            self._emit(f"request {len(self._requests)}: script exhausted")
            return None

    def _script_error(self, problem: str) -> None:
        with self._lock:
            self._script_errors.append(problem)
            self._emit(f"script problem: {problem}")

    def _next_tool_id(self) -> str:
        with self._lock:
            self._tool_ids += 1
            return f"toolu_fake_{self._tool_ids:04d}"

    def _next_message_id(self) -> str:
        with self._lock:
            self._message_ids += 1
            return f"msg_fake_{self._message_ids:04d}"

    def _count(self, what: Literal["completed", "disconnects"]) -> None:
        with self._lock:
            if what == "completed":
                self._completed += 1
            else:
                self._disconnects += 1
                self._emit("client disconnected mid-stream")
            self._lock.notify_all()

    def _emit(self, line: str) -> None:
        if self._log is not None:
            self._log(line)

    @property
    def _on_exhausted(self) -> str:
        return self._script.on_exhausted


def _error_body(kind: str, message: str) -> bytes:
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    disable_nagle_algorithm = True
    """TCP_NODELAY on every connection: with Nagle's algorithm on, a request sent within
    about 40 ms of the previous answer on the same connection (a tool turn's second call)
    waited for a delayed ACK (a tool turn took 97.6 ms instead of 62)."""

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default per-request access log."""

    # -- plumbing --

    def _send_json(
        self, status: int, payload: bytes, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("request-id", "req_fake")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(payload)

    def _write_chunk(self, data: bytes) -> None:
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        except OSError as exc:  # BrokenPipe, ConnectionReset...
            raise _ClientGone from exc

    def _send_event(self, event: dict[str, Any]) -> None:
        data = json.dumps(event, separators=(",", ":"))
        self._write_chunk(f"event: {event['type']}\ndata: {data}\n\n".encode())

    def _pause(self, seconds: float) -> None:
        """Wait ``seconds``, noticing at once if the client closes the connection."""
        fake = self.server.fake
        deadline_left = seconds
        sock = self.connection
        while deadline_left > 0:
            if fake._stopping.is_set():
                raise _ClientGone
            step = min(deadline_left, 0.05)
            try:
                readable, _, _ = select.select([sock], [], [], step)
                if readable and sock.recv(1, socket.MSG_PEEK) == b"":
                    raise _ClientGone
            except OSError as exc:
                raise _ClientGone from exc
            if readable:  # unexpected bytes from the client: just wait out the step
                fake._stopping.wait(step)
            deadline_left -= step

    # -- requests --

    def do_POST(self) -> None:
        """Serve ``POST /v1/messages``; anything else is a 404 in the API's error format."""
        path = self.path.split("?", 1)[0].rstrip("/")
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if path != "/v1/messages":
            self._send_json(404, _error_body("not_found_error", f"no route {self.path}"))
            return
        problem = header_problem(self.headers.get("Content-Type"),
                                 self.headers.get("anthropic-version"))
        if problem is not None:
            self._send_json(400, _error_body("invalid_request_error", problem))
            return
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self._send_json(400, _error_body("invalid_request_error", "body must be a JSON object"))
            return
        problem = request_problem(body)
        if problem is not None:
            # As the real API does: an invalid conversation is refused before anything is
            # served (the request is not recorded and no response is used up).
            self._send_json(400, _error_body("invalid_request_error", problem))
            return
        fake = self.server.fake
        picked = fake._record(body, raw)
        if picked is None:
            if fake._on_exhausted == "error":
                self._send_json(
                    500,
                    _error_body("api_error", "fake LLM script exhausted"),
                    {"x-should-retry": "false"},
                )
                return
            response = Response(blocks=[Block(text=EXHAUSTED_TEXT)])
        else:
            index, response = picked
            problem = tool_choice_problem(body, response)
            if problem is not None:
                message = f"fake LLM script problem: response {index + 1}: {problem}"
                fake._script_error(message)
                self._send_json(500, _error_body("api_error", message), {"x-should-retry": "false"})
                return
        if response.error is not None:
            err = response.error
            self._send_json(err.status, _error_body(err.type, err.message))
            return
        if response.stream_error is not None and not body.get("stream"):
            late = response.stream_error
            status = ERROR_STATUS.get(late.type, 500)
            self._send_json(status, _error_body(late.type, late.message))
            return
        plan = _Plan(fake, body, response)
        if body.get("stream"):
            self._stream(plan)
        else:
            payload = json.dumps(plan.message(final=True)).encode()
            self._send_json(200, payload)
            fake._count("completed")

    def do_GET(self) -> None:
        """Any GET is a 404 in the API's error format."""
        self._send_json(404, _error_body("not_found_error", f"no route {self.path}"))

    def _stream(self, plan: _Plan) -> None:
        fake = self.server.fake
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("request-id", "req_fake")
        try:
            self.end_headers()
        except OSError:
            fake._count("disconnects")
            self.close_connection = True
            return
        delay = plan.response.delay_ms / 1000.0
        try:
            first_delta = True
            for event in plan.events():
                if event["type"] == "content_block_delta":
                    if not first_delta and delay > 0:
                        self._pause(delay)
                    first_delta = False
                self._send_event(event)
            self._write_chunk(b"")  # the last chunk: the body ends cleanly
        except _ClientGone:
            fake._count("disconnects")
            self.close_connection = True
            return
        fake._count("completed")


class _Plan:
    """The message a scripted response turns into: ids, chunks, usage and stop reason."""

    def __init__(self, fake: FakeLLM, body: dict[str, Any], response: Response) -> None:
        self.response = response
        self.id = fake._next_message_id()
        self.model = str(body.get("model", "fake-model"))
        self.blocks: list[dict[str, Any]] = []
        out_chars = 0
        for block in response.blocks:
            if block.tool_use is not None:
                tool_input = msgspec.json.decode(msgspec.json.encode(block.tool_use.input))
                self.blocks.append(
                    {
                        "type": "tool_use",
                        "id": block.tool_use.id or fake._next_tool_id(),
                        "name": block.tool_use.name,
                        "input": tool_input,
                    }
                )
                out_chars += len(json.dumps(tool_input)) + len(block.tool_use.name)
            elif block.thinking is not None:
                self.blocks.append(
                    {"type": "thinking", "thinking": block.thinking, "signature": "fake-sig"}
                )
                out_chars += len(block.thinking)
            else:
                self.blocks.append({"type": "text", "text": block.text or ""})
                out_chars += len(block.text or "")
        has_tool = any(b["type"] == "tool_use" for b in self.blocks)
        self.stop_reason = "tool_use" if has_tool else "end_turn"
        if response.usage is not None:
            self.input_tokens = response.usage.input_tokens
            self.output_tokens = response.usage.output_tokens
        else:
            sent = json.dumps(body.get("messages", [])) + json.dumps(body.get("system", ""))
            self.input_tokens = _estimate_tokens(len(sent))
            self.output_tokens = _estimate_tokens(out_chars)

    def message(self, *, final: bool) -> dict[str, Any]:
        """The Message object: empty and unfinished for ``message_start``, else complete."""
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": self.blocks if final else [],
            "stop_reason": self.stop_reason if final else None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens if final else min(1, self.output_tokens),
            },
        }

    def events(self) -> Iterator[dict[str, Any]]:
        """The server-sent events of the stream, in order (without ``message_stop`` when
        the response is truncated; ending with an ``error`` event after the blocks, and
        without ``message_delta`` / ``message_stop``, when it has a ``stream_error``)."""
        size = self.response.chunk
        yield {"type": "message_start", "message": self.message(final=False)}
        yield {"type": "ping"}
        for index, block in enumerate(self.blocks):
            if block["type"] == "text":
                yield {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                }
                for piece in _chunks(block["text"], size):
                    yield {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "text_delta", "text": piece},
                    }
            elif block["type"] == "thinking":
                yield {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                }
                for piece in _chunks(block["thinking"], size):
                    yield {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "thinking_delta", "thinking": piece},
                    }
                yield {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "signature_delta", "signature": block["signature"]},
                }
            else:
                yield {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {
                        "type": "tool_use",
                        "id": block["id"],
                        "name": block["name"],
                        "input": {},
                    },
                }
                for piece in _chunks(json.dumps(block["input"]), size):
                    yield {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    }
            yield {"type": "content_block_stop", "index": index}
        late = self.response.stream_error
        if late is not None:
            yield {"type": "error", "error": {"type": late.type, "message": late.message}}
            return
        yield {
            "type": "message_delta",
            "delta": {"stop_reason": self.stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": self.output_tokens},
        }
        if not self.response.truncate:
            yield {"type": "message_stop"}
