"""A local stand-in for the Anthropic Messages API that plays scripted responses.

``FakeLLM`` is a real HTTP server (standard library only: ``ThreadingHTTPServer`` on daemon
threads) answering ``POST /v1/messages``. With ``"stream": true`` it replies with the same
server-sent events the real API sends, so the real ``anthropic`` SDK parses them:
``message_start`` (with ``message.usage``), ``ping``, ``content_block_start`` /
``content_block_delta`` / ``content_block_stop`` per block (``text_delta`` for text,
``input_json_delta`` for tool calls, the input JSON split into several ``partial_json``
chunks), ``message_delta`` (``stop_reason`` and ``usage``) and ``message_stop``. Without
``stream`` it answers with the whole message as one JSON object.

It runs in-process (``with FakeLLM(parse_script(text)) as llm: ... llm.base_url``) or as a
command (``tether fake-llm --script FILE``, see :func:`main`).

Script format (YAML, decoded strictly: unknown keys, wrong types and missing values are
errors that name the place, e.g. ``... - at `$.responses[0].blocks[1]```)::

    on_exhausted: reply          # optional: "reply" (default) or "error"
    responses:
      - match: "optional substring"  # served only when the request's last user message
                                     # (its text, or its tool_result content) contains it
        chunk: 8                     # optional: characters per delta (default 12)
        delay_ms: 0                  # optional: pause between deltas (default 0)
        truncate: false              # optional: end the stream cleanly but without
                                     # message_stop (fault injection)
        blocks:                      # each block has exactly one of text / thinking /
          - text: "Hello there"      # tool_use
          - tool_use: {name: read_file, input: {path: README.md}}
        usage: {input_tokens: 10, output_tokens: 20}  # optional, else estimated
      - error: {status: 529, type: overloaded_error, message: "Overloaded"}
                                     # optional instead of blocks: answer with this HTTP
                                     # error (Anthropic error JSON); served once like any
                                     # other response
      - blocks: [{text: "Half an ans"}]        # may be empty
        stream_error: {type: overloaded_error, message: "Overloaded"}
                                     # stream the blocks (HTTP 200), then an `error` event
                                     # instead of message_delta / message_stop; a request
                                     # without `stream` gets the matching HTTP error

Selection: each request is served the first not-yet-served response whose ``match``
matches (a response without ``match`` matches anything); each response is served once, so
unmatched responses keep their order. When none is left the server answers a plain text
reply ``(script exhausted)`` and counts it in :attr:`FakeLLM.exhausted`; with
``on_exhausted: error`` it answers HTTP 500 with an Anthropic-style error body (and
``x-should-retry: false`` so the SDK does not retry).

Requests the real API would refuse (see :func:`request_problem`) get HTTP 400 and use up
nothing. A scripted response the real API could not have given under the request's
``tool_choice`` (a tool_use block under ``{"type": "none"}``; none, or not the named tool,
under ``any`` / ``tool``) is a script problem: HTTP 500 ``api_error`` with
``x-should-retry: false``, listed in :attr:`FakeLLM.script_errors`.

``stop_reason`` is ``tool_use`` when the response has a tool_use block, else ``end_turn``.
Tool-use ids are unique per server (``toolu_fake_0001``...). Every request body received is
recorded (:attr:`FakeLLM.requests`). A client that disconnects mid-stream is noticed (also
while pausing between deltas), counted in :attr:`FakeLLM.disconnects`, and the stream stops
without a traceback.
"""

from __future__ import annotations

import argparse
import json
import select
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Annotated, Any, Literal

import msgspec
import msgspec.yaml

__all__ = [
    "DEFAULT_CHUNK",
    "ERROR_STATUS",
    "EXHAUSTED_TEXT",
    "Block",
    "ErrorSpec",
    "FakeLLM",
    "Response",
    "Script",
    "ScriptError",
    "StreamErrorSpec",
    "ToolUseSpec",
    "UsageSpec",
    "load_script",
    "main",
    "parse_script",
    "request_problem",
    "tool_choice_problem",
]

DEFAULT_CHUNK = 12
EXHAUSTED_TEXT = "(script exhausted)"

# --- script -------------------------------------------------------------------------------


class ScriptError(ValueError):
    """A fake-LLM script could not be read or is not valid; the message names the problem."""


class ToolUseSpec(msgspec.Struct, forbid_unknown_fields=True):
    """A tool call the fake model makes: tool ``name`` and its ``input`` object."""

    name: str
    input: dict[str, Any] = {}


class Block(msgspec.Struct, forbid_unknown_fields=True):
    """One content block of a scripted response: exactly one of ``text``, ``thinking``
    or ``tool_use``."""

    text: str | None = None
    thinking: str | None = None
    tool_use: ToolUseSpec | None = None

    def __post_init__(self) -> None:
        given = [v for v in (self.text, self.thinking, self.tool_use) if v is not None]
        if len(given) != 1:
            raise ValueError("a block needs exactly one of `text`, `thinking` or `tool_use`")


class UsageSpec(msgspec.Struct, forbid_unknown_fields=True):
    """Token usage reported for a scripted response."""

    input_tokens: Annotated[int, msgspec.Meta(ge=0)] = 0
    output_tokens: Annotated[int, msgspec.Meta(ge=0)] = 0


class ErrorSpec(msgspec.Struct, forbid_unknown_fields=True):
    """An HTTP error answer (fault injection), in the Anthropic error format."""

    status: Annotated[int, msgspec.Meta(ge=400, le=599)] = 500
    type: str = "api_error"
    message: str = "scripted error"


class StreamErrorSpec(msgspec.Struct, forbid_unknown_fields=True):
    """An ``error`` event sent in the middle of a stream, after the response's blocks, as
    the real API does when it fails after answering HTTP 200 (fault injection). There is no
    ``status``: the stream's status is already 200. A request without ``stream`` gets the
    HTTP error the type implies (``overloaded_error`` 529, ``rate_limit_error`` 429...,
    500 for an unknown type)."""

    type: str = "api_error"
    message: str = "scripted error"


ERROR_STATUS: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
"""The HTTP status the Messages API uses for each error type."""


class Response(msgspec.Struct, forbid_unknown_fields=True):
    """One scripted model response (see the module docstring for the meaning of fields).

    Exactly one outcome: ``blocks`` streamed to the end (non-empty), ``error`` (an HTTP
    error, no blocks), or ``stream_error`` (``blocks``, possibly none, then an error event;
    not with ``truncate``, which is another way to end early)."""

    blocks: list[Block] = []
    match: str | None = None
    chunk: Annotated[int, msgspec.Meta(ge=1)] = DEFAULT_CHUNK
    delay_ms: Annotated[int, msgspec.Meta(ge=0)] = 0
    truncate: bool = False
    usage: UsageSpec | None = None
    error: ErrorSpec | None = None
    stream_error: StreamErrorSpec | None = None

    def __post_init__(self) -> None:
        if self.error is not None and self.stream_error is not None:
            raise ValueError("a response has either `error` or `stream_error`, not both")
        if self.error is not None and self.blocks:
            raise ValueError("a response has either `blocks` or `error`, not both")
        if self.stream_error is not None and self.truncate:
            raise ValueError(
                "a response has either `truncate` or `stream_error`, not both "
                "(each ends the stream early)"
            )
        if self.error is None and self.stream_error is None and not self.blocks:
            raise ValueError(
                "a response needs a non-empty `blocks` list (or an `error` or `stream_error`)"
            )

    @property
    def tool_names(self) -> list[str]:
        """Names of the tools its tool_use blocks call, in order."""
        return [b.tool_use.name for b in self.blocks if b.tool_use is not None]


class Script(msgspec.Struct, forbid_unknown_fields=True):
    """A whole script: the responses in order and what to do when they run out."""

    responses: list[Response]
    on_exhausted: Literal["reply", "error"] = "reply"


def parse_script(text: str) -> Script:
    """Decode a YAML script strictly; raise :class:`ScriptError` naming the problem."""
    try:
        return msgspec.yaml.decode(text, type=Script)
    except msgspec.ValidationError as exc:
        raise ScriptError(f"invalid fake-LLM script: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise ScriptError(f"fake-LLM script is not valid YAML: {exc}") from exc


def load_script(path: str | Path) -> Script:
    """Read and decode the script file at ``path``; errors are :class:`ScriptError` with the
    path in the message (also for a missing or unreadable file)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScriptError(f"{path}: cannot read fake-LLM script: {exc}") from exc
    try:
        return parse_script(text)
    except ScriptError as exc:
        raise ScriptError(f"{path}: {exc}") from exc


# --- request helpers ----------------------------------------------------------------------


def _content_text(content: Any) -> list[str]:
    """Text of a message's content: a string, or text / tool_result blocks."""
    if isinstance(content, str):
        return [content]
    out: list[str] = []
    if isinstance(content, list):
        for block in content:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                out.append(block["text"])
            elif kind == "tool_result":
                out.extend(_content_text(block.get("content", "")))
    return out


def last_user_text(body: dict[str, Any]) -> str:
    """The text of the request's last user message (text blocks and tool_result content,
    joined by newlines); empty when there is none."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return ""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return "\n".join(_content_text(message.get("content")))
    return ""


TOOL_CHOICE_TYPES = ("auto", "any", "tool", "none")


def _tool_names(body: dict[str, Any]) -> list[str] | None:
    """Names of the tools the request defines; None when it defines none (``tools``
    missing or an empty list)."""
    tools = body.get("tools")
    if not isinstance(tools, list) or not tools:
        return None
    return [str(t.get("name")) for t in tools if isinstance(t, dict)]


def _tool_choice_problem(body: dict[str, Any]) -> str | None:
    """What is wrong with the request's ``tool_choice`` (absent: nothing)."""
    if "tool_choice" not in body:
        return None
    choice = body["tool_choice"]
    if not isinstance(choice, dict) or choice.get("type") not in TOOL_CHOICE_TYPES:
        return f"tool_choice.type: must be one of {', '.join(TOOL_CHOICE_TYPES)}"
    kind = choice["type"]
    names = _tool_names(body)
    if kind in ("any", "tool") and names is None:
        return f"tool_choice: `{kind}` may only be specified while providing tools"
    if kind == "tool":
        name = choice.get("name")
        if not isinstance(name, str) or not name:
            return "tool_choice.name: Field required"
        if names is not None and name not in names:
            return f"tool_choice.name: tool `{name}` is not among the request's tools"
    return None


def request_problem(body: dict[str, Any]) -> str | None:
    """What the real Messages API would refuse in this request, or None.

    Checked: ``messages`` is a non-empty list starting with a user message; roles are
    ``user`` or ``assistant``; text blocks are not empty; every tool_use of an assistant
    message is answered by a tool_result in the next message, which must be a user one;
    every tool_result answers a tool_use of the message just before it; a request whose
    messages hold a tool_use or tool_result block defines ``tools`` (a non-empty list);
    ``tool_choice``, when given, is an object whose ``type`` is auto, any, tool or none,
    ``any`` and ``tool`` come with tools, and ``tool`` names one of them.
    """
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    problem = _tool_choice_problem(body)
    if problem is not None:
        return problem
    has_tools = _tool_names(body) is not None
    if not isinstance(messages[0], dict) or messages[0].get("role") != "user":
        return "messages: the first message must use the user role"
    previous_uses: set[str] = set()
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            return f"messages.{index}: role must be user or assistant"
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list) or not blocks:
            return f"messages.{index}: content must be a non-empty string or list"
        uses = {
            str(b.get("id")) for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"
        }
        results = {
            str(b.get("tool_use_id"))
            for b in blocks
            if isinstance(b, dict) and b.get("type") == "tool_result"
        }
        for block in blocks:
            if isinstance(block, dict) and block.get("type") == "text" and not block.get("text"):
                return f"messages.{index}: text content blocks must be non-empty"
        if (uses or results) and not has_tools:
            return (
                f"messages.{index}: Requests which include `tool_use` or `tool_result` "
                "blocks must define tools."
            )
        if previous_uses:
            missing = previous_uses - results
            if message["role"] != "user" or missing:
                return (
                    f"messages.{index}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(sorted(missing or previous_uses))}"
                )
        extra = results - previous_uses
        if extra:
            return (
                f"messages.{index}: unexpected `tool_use_id` found in `tool_result` blocks: "
                f"{', '.join(sorted(extra))}"
            )
        previous_uses = uses if message["role"] == "assistant" else set()
    return None


def tool_choice_problem(body: dict[str, Any], response: Response) -> str | None:
    """Why the real API could not answer ``body`` with ``response``, given the request's
    ``tool_choice`` (a script problem), or None.

    ``none``: the model never calls a tool, so no tool_use block may be scripted. ``any``:
    at least one tool_use block. ``tool``: a tool_use block calling the named tool. A
    response that is an HTTP ``error`` has no blocks and is always possible.
    """
    choice = body.get("tool_choice")
    if response.error is not None or not isinstance(choice, dict):
        return None
    kind = choice.get("type")
    called = response.tool_names
    if kind == "none" and called:
        return (
            "the request's tool_choice is `none` (the real API never returns tool_use then) "
            f"but the scripted response calls {', '.join(called)}"
        )
    if kind == "any" and not called and response.stream_error is None:
        return "the request's tool_choice is `any` but the scripted response calls no tool"
    if kind == "tool" and choice.get("name") not in called and response.stream_error is None:
        return (
            f"the request's tool_choice is tool `{choice.get('name')}` but the scripted "
            "response does not call it"
        )
    return None


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _estimate_tokens(chars: int) -> int:
    return max(1, chars // 4)


# --- server -------------------------------------------------------------------------------


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
        self._requests: list[dict[str, Any]] = []
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
        """A copy of every request body received, in arrival order."""
        with self._lock:
            return list(self._requests)

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

    def _record(self, body: dict[str, Any]) -> tuple[int, Response] | None:
        """Record a request and pick its response and the response's index in the script
        (None when the script is exhausted)."""
        wanted = last_user_text(body)
        with self._lock:
            self._requests.append(body)
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
        picked = fake._record(body)
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
                        "id": fake._next_tool_id(),
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


# --- command line -------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """``tether fake-llm --script FILE [--host H] [--port P]``: serve a script until Ctrl-C.

    Prints the base URL on the first line of standard output; returns 0 on Ctrl-C or
    SIGTERM, 2 when the script is invalid or the address cannot be bound.
    """
    parser = argparse.ArgumentParser(
        prog="tether fake-llm",
        description=(
            "Serve scripted responses over the Anthropic Messages API (streaming server-sent "
            "events), for tests and demos without network. Point the SDK at it with "
            "ANTHROPIC_BASE_URL=<printed URL>. Script format: see docs/fake-llm.md."
        ),
    )
    parser.add_argument("--script", required=True, metavar="FILE", help="YAML script to play")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    parser.add_argument(
        "--port", type=int, default=0, help="port to bind; 0 picks a free one (default 0)"
    )
    parser.add_argument("--quiet", action="store_true", help="do not log requests to stderr")
    args = parser.parse_args(argv)

    try:
        script = load_script(args.script)
    except ScriptError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def log(line: str) -> None:
        print(f"fake-llm: {line}", file=sys.stderr, flush=True)

    fake = FakeLLM(script, host=args.host, port=args.port, log=None if args.quiet else log)
    try:
        fake.start()
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    print(fake.base_url, flush=True)
    if not args.quiet:
        log(f"serving {len(script.responses)} scripted responses; Ctrl-C to stop")
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        fake.stop()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
