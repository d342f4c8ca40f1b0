"""A local stand-in for the Telegram Bot API, for tests (no real Telegram is reachable).

``TelegramStandIn`` is a real HTTP server (standard library only: ``ThreadingHTTPServer``
on 127.0.0.1, port 0) answering ``GET``/``POST /bot<token>/<method>`` the way
api.telegram.org does, so the real ``python-telegram-bot`` client parses its answers:

* every answer is ``{"ok": true, "result": ...}`` or ``{"ok": false, "error_code": N,
  "description": "..."}`` (with ``parameters.retry_after`` for a 429);
* parameters come as a query string, a form (what python-telegram-bot sends: strings as
  they are, everything else JSON-encoded) or a JSON body;
* methods: ``getMe``, ``getUpdates`` (``offset`` confirms the updates below it;
  ``timeout`` long-polls until an update is pending or the time is up), ``sendMessage``,
  ``editMessageText``, ``deleteWebhook``, ``setWebhook`` (refused: tests poll),
  ``getMyCommands``/``setMyCommands``/``deleteMyCommands`` and ``sendChatAction``; any
  other method is a 404 like Telegram's;
* a wrong token is a 401; a chat nobody wrote from (see :meth:`add_chat`) is "chat not
  found"; an unknown message, an unchanged text, an empty text or one over 4096
  characters are the 400s Telegram gives.

Tests queue incoming messages with :meth:`push_text`, read what the bot did in
:attr:`sent` and :attr:`edits` (each with its ``time.monotonic()``) or the current
state of the chat with :meth:`messages`, and inject failures with :meth:`fail_next`.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import msgspec

MAX_TEXT = 4096
"""Characters Telegram allows in one message."""

NOT_MODIFIED = ("Bad Request: message is not modified: specified new message content and "
                "reply markup are exactly the same as a current content and reply markup of "
                "the message")


class Sent(msgspec.Struct, frozen=True):
    """One sendMessage the bot made."""

    time: float
    chat_id: int
    message_id: int
    text: str


class Edited(msgspec.Struct, frozen=True):
    """One editMessageText the bot made."""

    time: float
    chat_id: int
    message_id: int
    text: str


class ChatMessage(msgspec.Struct):
    """A message the bot sent, as the chat shows it now."""

    chat_id: int
    message_id: int
    text: str
    edits: int = 0


class Call(msgspec.Struct, frozen=True):
    """One API call: when, which method, with which parameters, and its HTTP status."""

    time: float
    method: str
    params: dict[str, Any]
    status: int


class _Failure(msgspec.Struct):
    method: str
    error_code: int
    description: str
    retry_after: int | None


class ApiError(Exception):
    """An answer with ``ok: false``."""

    def __init__(self, code: int, description: str, retry_after: int | None = None) -> None:
        super().__init__(description)
        self.code = code
        self.description = description
        self.retry_after = retry_after


_INT_PARAMS = frozenset({"chat_id", "message_id", "offset", "limit", "user_id"})
_FLOAT_PARAMS = frozenset({"timeout"})


def _typed(params: dict[str, Any]) -> dict[str, Any]:
    """Form and query values are strings: make the numeric ones numbers again."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, str) and key in _INT_PARAMS:
            try:
                out[key] = int(value)
            except ValueError:
                out[key] = value  # "@channelname": Telegram accepts it for chat_id
        elif isinstance(value, str) and key in _FLOAT_PARAMS:
            out[key] = float(value)
        elif isinstance(value, str) and key == "allowed_updates":
            out[key] = json.loads(value)
        else:
            out[key] = value
    return out


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    standin: TelegramStandIn

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away mid-poll (the connector stopping) is not an error


class TelegramStandIn:
    """A Bot API server for one bot, in-process, on a thread of its own."""

    def __init__(self, token: str = "123456:TEST-token", *, bot_id: int = 123456,
                 username: str = "tether_test_bot") -> None:
        self.token = token
        self.bot = {"id": bot_id, "is_bot": True, "first_name": "Tether",
                    "username": username, "can_join_groups": True,
                    "can_read_all_group_messages": False, "supports_inline_queries": False}
        self.sent: list[Sent] = []
        self.edits: list[Edited] = []
        self.calls: list[Call] = []
        self._chats: dict[int, dict[str, Any]] = {}
        self._messages: dict[tuple[int, int], ChatMessage] = {}
        self._next_message: dict[int, itertools.count[int]] = {}
        self._updates: list[dict[str, Any]] = []
        self._update_ids = itertools.count(1)
        self._failures: list[_Failure] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> TelegramStandIn:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.standin = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="telegram-standin",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()  # release the long polls
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> TelegramStandIn:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "not started"
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """What to give ``telegram.Bot(base_url=...)``: the library appends the token."""
        return f"http://127.0.0.1:{self.port}/bot"

    # --- test controls ------------------------------------------------------------------

    def add_chat(self, chat_id: int, *, title: str = "") -> dict[str, Any]:
        """Make a chat known (one a user wrote in is known already)."""
        with self._cond:
            return self._chat(chat_id, title)

    def push_text(self, chat_id: int, user_id: int, text: str, *,
                  first_name: str = "Ana") -> int:
        """Queue an incoming text message from ``user_id`` in ``chat_id``; returns its
        update_id."""
        with self._cond:
            chat = self._chat(chat_id)
            message: dict[str, Any] = {
                "message_id": self._new_message_id(chat_id),
                "from": {"id": user_id, "is_bot": False, "first_name": first_name},
                "chat": chat,
                "date": int(time.time()),
                "text": text,
            }
            if text.startswith("/"):
                length = len(text.split(maxsplit=1)[0])
                message["entities"] = [{"type": "bot_command", "offset": 0, "length": length}]
            update_id = next(self._update_ids)
            self._updates.append({"update_id": update_id, "message": message})
            self._cond.notify_all()
            return update_id

    def fail_next(self, method: str, error_code: int = 429, description: str = "",
                  retry_after: int | None = None) -> None:
        """Answer the next call of ``method`` with this error (e.g. a 429 with
        ``retry_after``), once."""
        if not description:
            description = ("Too Many Requests: retry after " + str(retry_after or 1)
                           if error_code == 429 else "Bad Request: injected failure")
        if error_code == 429 and retry_after is None:
            retry_after = 1
        with self._cond:
            self._failures.append(_Failure(method, error_code, description, retry_after))

    def messages(self, chat_id: int | None = None) -> list[ChatMessage]:
        """The bot's messages as the chat shows them now, oldest first."""
        with self._cond:
            found = [msgspec.structs.replace(m) for m in self._messages.values()
                     if chat_id is None or m.chat_id == chat_id]
        return sorted(found, key=lambda m: (m.chat_id, m.message_id))

    def texts(self, chat_id: int) -> list[str]:
        """The current texts of the bot's messages in ``chat_id``, oldest first."""
        return [m.text for m in self.messages(chat_id)]

    def pending_updates(self) -> int:
        """Updates not yet confirmed by a getUpdates offset."""
        with self._cond:
            return len(self._updates)

    def count(self, method: str) -> int:
        """How many calls of ``method`` were answered."""
        with self._cond:
            return sum(1 for c in self.calls if c.method == method)

    # --- the API ------------------------------------------------------------------------

    def call(self, method: str, params: dict[str, Any]) -> Any:
        """Serve one API call; raises ApiError for an ``ok: false`` answer."""
        handler: Callable[[dict[str, Any]], Any] | None = {
            "getMe": lambda p: self.bot,
            "getUpdates": self._get_updates,
            "sendMessage": self._send_message,
            "editMessageText": self._edit_message_text,
            "deleteWebhook": lambda p: True,
            "setWebhook": self._set_webhook,
            "getMyCommands": lambda p: [],
            "setMyCommands": lambda p: True,
            "deleteMyCommands": lambda p: True,
            "sendChatAction": self._send_chat_action,
        }.get(method)
        if handler is None:
            raise ApiError(404, "Not Found")
        with self._cond:
            failure = next((f for f in self._failures if f.method == method), None)
            if failure is not None:
                self._failures.remove(failure)
                raise ApiError(failure.error_code, failure.description, failure.retry_after)
        return handler(params)

    def _get_updates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        offset = params.get("offset")
        limit = int(params.get("limit") or 100)
        deadline = time.monotonic() + float(params.get("timeout") or 0)
        with self._cond:
            if offset is not None:
                if offset < 0:  # -N: the last N updates
                    self._updates = self._updates[offset:]
                else:  # everything below the offset is confirmed: forgotten for good
                    self._updates = [u for u in self._updates if u["update_id"] >= offset]
            while not self._updates and not self._stopping:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return list(self._updates[:limit])

    def _send_message(self, params: dict[str, Any]) -> dict[str, Any]:
        chat_id = params.get("chat_id")
        text = str(params.get("text", ""))
        with self._cond:
            chat = self._chats.get(chat_id) if isinstance(chat_id, int) else None
            if chat is None or not isinstance(chat_id, int):
                raise ApiError(400, "Bad Request: chat not found")
            _check_text(text)
            message_id = self._new_message_id(chat_id)
            self._messages[(chat_id, message_id)] = ChatMessage(chat_id, message_id, text)
            self.sent.append(Sent(time.monotonic(), chat_id, message_id, text))
            return self._message_json(chat, message_id, text)

    def _edit_message_text(self, params: dict[str, Any]) -> dict[str, Any]:
        chat_id, message_id = params.get("chat_id"), params.get("message_id")
        text = str(params.get("text", ""))
        if "inline_message_id" in params:
            raise ApiError(400, "Bad Request: MESSAGE_ID_INVALID")
        with self._cond:
            chat = self._chats.get(chat_id) if isinstance(chat_id, int) else None
            if chat is None or not isinstance(chat_id, int):
                raise ApiError(400, "Bad Request: chat not found")
            message = self._messages.get((chat_id, message_id)) if isinstance(
                message_id, int) else None
            if message is None:
                raise ApiError(400, "Bad Request: message to edit not found")
            _check_text(text)
            if message.text == text:
                raise ApiError(400, NOT_MODIFIED)
            message.text = text
            message.edits += 1
            self.edits.append(Edited(time.monotonic(), message.chat_id, message.message_id,
                                     text))
            answer = self._message_json(chat, message.message_id, text)
            answer["edit_date"] = int(time.time())
            return answer

    def _set_webhook(self, params: dict[str, Any]) -> bool:
        raise ApiError(400, "Bad Request: the stand-in only serves getUpdates")

    def _send_chat_action(self, params: dict[str, Any]) -> bool:
        chat_id = params.get("chat_id")
        with self._cond:
            if not isinstance(chat_id, int) or chat_id not in self._chats:
                raise ApiError(400, "Bad Request: chat not found")
        return True

    # --- plumbing -----------------------------------------------------------------------

    def _chat(self, chat_id: int, title: str = "") -> dict[str, Any]:
        chat = self._chats.get(chat_id)
        if chat is None:
            if chat_id > 0:
                chat = {"id": chat_id, "type": "private", "first_name": title or "Ana"}
            else:
                kind = "supergroup" if str(chat_id).startswith("-100") else "group"
                chat = {"id": chat_id, "type": kind, "title": title or f"chat {chat_id}"}
            self._chats[chat_id] = chat
        return chat

    def _new_message_id(self, chat_id: int) -> int:
        counter = self._next_message.setdefault(chat_id, itertools.count(1))
        return next(counter)

    def _message_json(self, chat: dict[str, Any], message_id: int, text: str) -> dict[str, Any]:
        return {"message_id": message_id, "from": self.bot, "chat": chat,
                "date": int(time.time()), "text": text}

    def _record(self, method: str, params: dict[str, Any], status: int) -> None:
        with self._cond:
            self.calls.append(Call(time.monotonic(), method, params, status))


def _check_text(text: str) -> None:
    if not text.strip():
        raise ApiError(400, "Bad Request: message text is empty")
    if len(text) > MAX_TEXT:
        raise ApiError(400, "Bad Request: message is too long")


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._serve(b"")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self._serve(self.rfile.read(length) if length else b"")

    def _serve(self, body: bytes) -> None:
        standin = self.server.standin
        url = urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        params: dict[str, Any] = dict(parse_qsl(url.query))
        kind = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if body and kind == "application/json":
            params.update(json.loads(body))
        elif body and kind == "application/x-www-form-urlencoded":
            params.update(parse_qsl(body.decode()))
        elif body:
            return self._answer(400, {"ok": False, "error_code": 400,
                                      "description": f"Bad Request: unsupported {kind!r}"})
        if len(parts) != 2 or not parts[0].startswith("bot"):
            return self._answer(404, {"ok": False, "error_code": 404,
                                      "description": "Not Found"})
        token, method = parts[0][3:], parts[1]
        if token != standin.token:
            standin._record(method, params, 401)
            return self._answer(401, {"ok": False, "error_code": 401,
                                      "description": "Unauthorized"})
        typed = _typed(params)
        try:
            result = standin.call(method, typed)
        except ApiError as exc:
            standin._record(method, typed, exc.code)
            answer: dict[str, Any] = {"ok": False, "error_code": exc.code,
                                      "description": exc.description}
            if exc.retry_after is not None:
                answer["parameters"] = {"retry_after": exc.retry_after}
            return self._answer(exc.code, answer)
        standin._record(method, typed, 200)
        return self._answer(200, {"ok": True, "result": result})

    def _answer(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass  # the client gave up (a cancelled long poll)
