"""The Telegram connector: each Telegram chat is a Tether channel.

It is an ordinary bus client, like the terminal connector. It long-polls the Bot API
(``getUpdates``, through python-telegram-bot's ``telegram.Bot``; ``base_url`` points it
at another server, e.g. a test stand-in) and publishes every text message from chat ``C``
by user ``U`` as a UserMessage on ``<ns>.inbox``, asked as a request::

    UserMessage(text, channel=channel_for(C), user=str(U), session_id=<the chat's session>)

The chat's session is the one the engine answered with (Accepted) the last time; ``/new``
forgets it, so the next message (or the rest of ``/new ...``) starts a new session. A
command addressed to another bot (``/cmd@otherbot``) is ignored; ``@thisbot`` is dropped.

**Channel names.** Group chat ids are negative (``-100123``). The minus is written ``m``,
so a channel name never holds a double dash and reads as one word: chat ``123`` is
channel ``telegram-123`` and chat ``-100123`` is ``telegram-m100123`` (:func:`channel_for`
and :func:`chat_for`, one to one; always one valid subject token).
The middleware's allowlist applies per channel (``allow = {"telegram-*" = ["111"]}``) to
``user``, the Telegram user id as a string. A route ``telegram|<chat>`` (a session's
origin) is understood as well: such a notice comes on channel ``telegram`` with
``target`` naming the chat (``-100123`` or ``m100123``).

**What the chat shows.** The connector listens on ``<ns>.channel.*.out`` and keeps its own
channels. Per chat and session, a reply's ``stream`` text and its ``tool`` start lines
(``→ list_dir(path=.)``) go through one :class:`actors.chat.stream.ChatStreamer`: the
first change is sent at once (``bot.send_message``), later ones are edits
(``bot.edit_message_text``) at most every ``throttle`` seconds (a tick flushes a held
change), with the cursor, the tool's status line, the 4000-character split and, at
``completed`` or ``failed``, the final text with the tool summary. Text of a new model
call (after a tool, or a retry) starts a new paragraph. A ``reply`` notice is shown only
when none of its text streamed (a stream lost or missed). Tool outcome lines (``✓ ...``,
``✗ tool: error``) are not shown (the reply tells); a denial (``✗ denied ...``) is.
Everything else (approval, question, plan, error, waiting, budget, reminder, status,
catchup, interrupted, a failure's reason) is a message of its own; one arriving while
that session's reply streams ends the reply there, so what follows (the answer to an
approval, say) continues in a new message below it instead of being edited in above the
question. A ``completed`` notice is not shown when the turn's reply was (it ends it), only
when nothing of the turn was seen here (a background ending). A notice with ``seq`` > 0
(any kind but ``stream`` and ``catchup``) not higher than the last one the chat got is a
repeat (the router sends one again after a crash) and is dropped.

**Errors.** An ErrorReply to the ask (not on the allowlist, rate limited, session limit,
message too large) is sent to the chat as ``⛔ Not sent: <reason>`` (not allowed) or
``⚠️ Not sent: <reason>``. The engine also sends the reason as an ``error`` notice on the
channel, sometimes before the answer: one that comes while the chat waits for an answer
is held until the answer is in, and the same reason within a minute is shown once. A
session the engine no longer knows is forgotten and the message is sent again to start a
new one; no answer in time says so. Bot API failures are retried: ``RetryAfter`` (429)
after the time it asks, network errors after a short backoff; an edit of a message that
is gone becomes a new message; "message is not modified" counts as done.

**Why a loop of its own.** python-telegram-bot is asyncio, and so is the bus; the
connector could run on the bus loop (``bus.spawn``), but that loop carries every actor's
NATS traffic and the engine's model streams when they share a process, so a slow Bot
API, a long poll, or a burst of edits must not sit on it. The connector owns an asyncio
loop on its own thread (``tether-telegram``); the bus's callbacks only hand decoded
notices over with ``call_soon_threadsafe``, and asks are ``bus.request`` with a callback
that resolves a future on the connector's loop, so neither loop ever blocks on the other.
Everything a chat shows is computed on that one loop in arrival order; each chat has one
sender task that performs its Bot API calls in order (an edit still queued is replaced by
a newer one of the same message).

``can_edit=False`` is the ChatStreamer's mode for a chat that cannot edit: nothing while
streaming, the final messages at the end. The update offset and the chats' sessions live
in memory: after a restart an update handled just before it may come again (Telegram keeps
updates until a later ``getUpdates`` confirms them) and each chat starts a new session.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime as dt
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import telegram
from telegram.error import (
    BadRequest,
    Forbidden,
    NetworkError,
    RetryAfter,
    TelegramError,
)

from actors.chat.stream import (
    DEFAULT_LIMIT,
    DEFAULT_THROTTLE,
    SEPARATOR,
    ChatStreamer,
    Edit,
    Op,
    Send,
    split_text,
)
from actors.middleware import Gate, MiddlewareSettings
from actors.ports import Bus, Clock, Inbound, Subscription, SystemClock
from events.codec import DecodeFailure, Decoder, encode
from events.messages import Accepted, ChannelMessage, ErrorReply, UserMessage
from events.subjects import Subjects, check_token

log = logging.getLogger(__name__)

T = TypeVar("T")

PREFIX = "telegram"
"""Channel prefix of the chats: ``telegram-<chat>``."""

DEFAULT_POLL_TIMEOUT = 25.0
"""Seconds a getUpdates long poll may wait for an update."""

TICK_PERIOD = 0.25
"""Seconds between two ticks of the streaming replies (flushing held changes)."""

ERROR_WINDOW = 60.0
"""Seconds within which the same error, as ErrorReply and as a notice, is shown once."""

RETRIES = 3
"""Attempts after the first for one Bot API call that failed for a passing reason."""

INFO = "\u2139\ufe0f"
"""The information sign (written escaped: it looks like a letter i)."""

ICONS = {
    "approval": "🔐", "question": "❓", "plan": "📋", "error": "⚠️", "failed": "❌",
    "budget": "💸", "waiting": "⏳", "reminder": "⏰", "status": INFO, "interrupted": "↩️",
    "completed": "✅", "tool": "🚫",
}
"""What a notice shown as a message of its own starts with, by kind."""

START_TEXT = ("Hello! Send a message and a coding agent works on it here; its reply streams "
              "into this chat. /new starts a new session, /help lists the commands.")

_NAMED_COMMAND = re.compile(r"(?P<command>/[^\s@]+)@(?P<bot>\w+)(?=\s|\Z)")
_TOOL_START = re.compile(r"→ (?P<name>[^(\s]+)(?:\((?P<args>.*)\))?\s*\Z", re.S)


# --- chat ids and channel names -------------------------------------------------------------


def channel_for(chat_id: int, prefix: str = PREFIX) -> str:
    """The channel of a chat: ``telegram-123`` for 123, ``telegram-m100123`` for -100123
    (a minus becomes ``m``, so the name is one plain subject token)."""
    return f"{prefix}-{chat_id}" if chat_id >= 0 else f"{prefix}-m{-chat_id}"


def chat_for(channel: str, prefix: str = PREFIX) -> int | None:
    """The chat a channel of :func:`channel_for` names, or None when it is not one."""
    head = prefix + "-"
    if not channel.startswith(head):
        return None
    return parse_chat(channel[len(head):])


def parse_chat(text: str) -> int | None:
    """A chat id written as ``123``, ``-100123`` or ``m100123``, else None."""
    sign = 1
    if text[:1] in ("m", "-"):
        sign, text = -1, text[1:]
    if not text.isdigit() or (text.startswith("0") and text != "0"):
        return None
    return sign * int(text)


def allowlist_problem(middleware: MiddlewareSettings, prefix: str = PREFIX) -> str | None:
    """Why the middleware leaves Telegram chats open to anyone, or None when an allowlist
    covers them. A channel no allowlist key matches is open to everyone, and anyone can
    find a bot on Telegram: a command starting the connector should refuse (or warn)."""
    gate = Gate(middleware)
    open_ = [c for c in (channel_for(1, prefix), channel_for(-1001, prefix))
             if gate.allowed_users(c) is None]
    if not open_:
        return None
    return (f"no [middleware.allow] key matches {' or '.join(open_)}: every Telegram user "
            f'could use the bot. Add e.g. allow = {{"{prefix}-*" = ["<your user id>"]}}')


# --- state ----------------------------------------------------------------------------------


class _Reply:
    """One streamed reply: its streamer and the Telegram message ids of its keys."""

    def __init__(self, streamer: ChatStreamer) -> None:
        self.streamer = streamer
        self.ids: dict[int, int] = {}
        self.has_text = False
        self.need_break = False


class _Turn:
    """What one chat knows of one session's current turn."""

    def __init__(self) -> None:
        self.reply: _Reply | None = None
        self.seq = 0
        """The last stream seq of the current model call (a lower one starts a new one)."""
        self.streamed = False
        """Stream text arrived since the last ``reply`` notice."""


@dataclass
class _Action:
    """One Bot API call to make for a chat, in order."""

    kind: Literal["send", "edit", "plain"]
    text: str
    reply: _Reply | None = None
    key: int = 0


@dataclass
class _Chat:
    chat_id: int
    channel: str
    session_id: str = ""
    last_notice: dict[str, int] = field(default_factory=dict)
    """Per session, the highest notice number shown (notices of one session come in
    order; two sessions' may interleave)."""
    turns: dict[str, _Turn] = field(default_factory=dict)
    actions: collections.deque[_Action] = field(default_factory=collections.deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    sender: asyncio.Task[None] | None = None
    errors: dict[str, float] = field(default_factory=dict)
    asking: int = 0
    """Messages of the chat waiting for the engine's answer."""
    held: list[ChannelMessage] = field(default_factory=list)
    """Error notices that came while asking: shown (or dropped as the answer's twin) once
    the answer is in."""


# --- the connector --------------------------------------------------------------------------


class TelegramConnector:
    """Telegram chats as Tether channels (see the module docstring)."""

    def __init__(
        self,
        bus: Bus,
        subjects: Subjects,
        *,
        token: str,
        base_url: str | None = None,
        poll_timeout: float = DEFAULT_POLL_TIMEOUT,
        clock: Clock | None = None,
        throttle: float = DEFAULT_THROTTLE,
        can_edit: bool = True,
        prefix: str = PREFIX,
        workspace: str = "",
        ask_timeout: float = 10.0,
        tick_period: float = TICK_PERIOD,
        limit: int = DEFAULT_LIMIT,
    ) -> None:
        self.bus = bus
        self.subjects = subjects
        self.prefix = check_token(prefix, "channel prefix")
        self.poll_timeout = poll_timeout
        self.clock: Clock = clock or SystemClock()
        self.throttle = throttle
        self.can_edit = can_edit
        self.workspace = workspace
        self.ask_timeout = ask_timeout
        self.tick_period = tick_period
        self.limit = limit
        kwargs: dict[str, Any] = {} if base_url is None else {"base_url": base_url}
        self.bot = telegram.Bot(token, **kwargs)
        self.username = ""
        self.counts: collections.Counter[str] = collections.Counter()
        """Notices received by kind, plus ``dropped`` (repeats) and ``updates`` (Telegram
        updates handled): for tests and diagnostics."""
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="tether-telegram",
                                        daemon=True)
        self._chats: dict[int, _Chat] = {}
        self._offset: int | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._sub: Subscription | None = None
        self._started = False
        self._stopped = False
        self._decoder: Decoder[ChannelMessage] = Decoder(ChannelMessage)
        self._replies: Decoder[Accepted | ErrorReply] = Decoder(Accepted | ErrorReply)
        self._channel_head = f"{subjects.namespace}.channel."

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> TelegramConnector:
        """Check the token (getMe), drop any webhook, listen on the channels, and start
        polling. Raises what the Bot API said when it cannot start (a bad token, say)."""
        if self._started:
            return self
        self._started = True
        self._thread.start()
        try:
            self._call(self._open, timeout=30)
            # Every channel's output: the subject has no token for "telegram-*", so the
            # connector keeps those with its prefix (see _on_bus).
            self._sub = self.bus.subscribe(f"{self._channel_head}*.out", self._on_bus)
            self._call(self._begin, timeout=10)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, drain: float = 5.0) -> None:
        """Stop polling and listening; what the chats still have to show is sent (for up
        to ``drain`` seconds) before the bot's connections close."""
        if self._stopped:
            return
        self._stopped = True
        if self._sub is not None:
            with contextlib.suppress(Exception):
                self._sub.close()
        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                self._call(lambda: self._close(drain), timeout=drain + 15)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()

    def __enter__(self) -> TelegramConnector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def session_of(self, chat_id: int) -> str:
        """The session the chat's next message continues ("" for a new one)."""
        chat = self._chats.get(chat_id)
        return chat.session_id if chat is not None else ""

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def _call(self, factory: Callable[[], Coroutine[Any, Any, T]], timeout: float) -> T:
        return asyncio.run_coroutine_threadsafe(factory(), self.loop).result(timeout)

    async def _open(self) -> None:
        await self.bot.initialize()  # getMe: a wrong token fails here
        self.username = self.bot.username
        # getUpdates is refused while a webhook is set; pending updates are kept.
        await self.bot.delete_webhook(drop_pending_updates=False)

    async def _begin(self) -> None:
        self._spawn(self._poll())
        self._spawn(self._tick())

    async def _close(self, drain: float) -> None:
        for task in list(self._tasks):
            task.cancel()  # the poll, the ticks and messages still being submitted
        deadline = time.monotonic() + drain
        # A sender is busy while it has actions queued or one in flight (it clears its
        # wake event only once its queue is empty).
        while time.monotonic() < deadline and any(
                c.actions or (c.sender is not None and c.wake.is_set() and not c.sender.done())
                for c in self._chats.values()):
            await asyncio.sleep(0.02)
        senders = [c.sender for c in self._chats.values() if c.sender is not None]
        for sender in senders:
            sender.cancel()
        await asyncio.gather(*self._tasks, *senders, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self.bot.shutdown()

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _chat(self, chat_id: int) -> _Chat:
        chat = self._chats.get(chat_id)
        if chat is None:
            chat = self._chats[chat_id] = _Chat(chat_id, channel_for(chat_id, self.prefix))
        return chat

    # --- Telegram -> engine -------------------------------------------------------------

    async def _poll(self) -> None:
        backoff = 1.0
        while True:
            try:
                updates = await self.bot.get_updates(
                    offset=self._offset, timeout=max(1, math.ceil(self.poll_timeout)),
                    allowed_updates=["message"])
            except TelegramError as exc:  # network trouble, a conflict, a bad gateway...
                log.warning("telegram: getUpdates failed (%s); again in %g s", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
                continue
            backoff = 1.0
            for update in updates:
                # Confirmed with the next getUpdates: never handled twice by this process.
                self._offset = update.update_id + 1
                self.counts["updates"] += 1
                self._on_update(update)

    def _on_update(self, update: telegram.Update) -> None:
        message = update.message
        if message is None or message.from_user is None or message.from_user.is_bot:
            return
        if not message.text:
            return  # photos, stickers, joins...: nothing for a coding agent to read
        chat = self._chat(message.chat.id)
        self._spawn(self._on_text(chat, message.from_user.id, message.text))

    async def _on_text(self, chat: _Chat, user_id: int, text: str) -> None:
        # One message of a chat at a time, in order: the first may start the session the
        # next one continues.
        async with chat.lock:
            addressed = self._for_me(text)
            if addressed is None:
                return
            words = addressed.strip().split(maxsplit=1)
            command = words[0].lower() if words else ""
            rest = words[1] if len(words) > 1 else ""
            if command == "/start":
                self._plain(chat, START_TEXT)
                return
            if command == "/new":
                chat.session_id = ""
                if not rest.strip():
                    self._plain(chat, "🆕 Your next message starts a new session.")
                    return
                addressed = rest
            await self._submit(chat, user_id, addressed)

    def _for_me(self, text: str) -> str | None:
        """The text with ``@thisbot`` dropped from a leading command; None for a command
        addressed to another bot."""
        named = _NAMED_COMMAND.match(text)
        if named is None:
            return text
        if self.username and named["bot"].lower() != self.username.lower():
            return None
        return named["command"] + text[named.end():]

    async def _submit(self, chat: _Chat, user_id: int, text: str) -> None:
        for attempt in range(2):
            message = UserMessage(text=text, channel=chat.channel, session_id=chat.session_id,
                                  user=str(user_id), workspace=self.workspace)
            chat.asking += 1
            try:
                answer, error = await self._ask(message)
            finally:
                chat.asking -= 1
            try:
                if isinstance(answer, Accepted):
                    chat.session_id = answer.session_id
                    return
                if isinstance(answer, ErrorReply):
                    if answer.error == "unknown_session" and chat.session_id and attempt == 0:
                        self._seen_error(chat, answer.reason)  # its notice need not show
                        chat.session_id = ""
                        self._plain(chat, f"{INFO} The previous session is gone; this "
                                          "message starts a new one.")
                        continue
                    if not self._seen_error(chat, answer.reason):
                        icon = "⛔" if answer.error == "not_allowed" else "⚠️"
                        self._plain(chat, f"{icon} Not sent: {answer.reason}")
                    return
                self._plain(chat, f"⚠️ Not sent: {error}. Please send it again.")
                return
            finally:
                self._release(chat)

    def _release(self, chat: _Chat) -> None:
        """Show the error notices held while the chat was asking (the twin of an
        ErrorReply already shown is dropped)."""
        if chat.asking:
            return
        held, chat.held = chat.held, []
        for message in held:
            self._own_message(chat, message)

    async def _ask(self, message: UserMessage) -> tuple[Accepted | ErrorReply | None, str]:
        """Request on the inbox without blocking this loop: the bus answers on its own
        loop, which resolves a future on this one."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[bytes | None, str]] = loop.create_future()

        def settle(data: bytes | None, error: str) -> None:
            if not future.done():
                future.set_result((data, error))

        def on_reply(data: bytes | None, error: str) -> None:  # on the bus loop
            with contextlib.suppress(RuntimeError):  # this loop has closed: stopping
                loop.call_soon_threadsafe(settle, data, error)

        self.bus.request(self.subjects.inbox, encode(message), self.ask_timeout, on_reply)
        data, error = await future
        if data is None:
            if "no reply" in error:
                error = f"the engine did not answer within {self.ask_timeout:g} s"
            elif "nobody is listening" in error:
                error = "the engine is not running"
            return None, error
        try:
            return self._replies.decode(data), ""
        except DecodeFailure as exc:
            return None, f"the engine's answer was not understood ({exc.reason})"

    # --- engine -> Telegram -------------------------------------------------------------

    def _on_bus(self, inbound: Inbound) -> None:
        """On the bus loop: keep our channels' notices and hand them to our loop."""
        subject = inbound.subject
        if not subject.startswith(self._channel_head) or not subject.endswith(".out"):
            return
        channel = subject[len(self._channel_head):-len(".out")]
        if channel != self.prefix and not channel.startswith(self.prefix + "-"):
            return
        try:
            message = self._decoder.decode(inbound.data)
        except DecodeFailure as exc:
            log.warning("telegram: a notice on %s was not understood: %s", subject, exc.reason)
            return
        chat_id = (parse_chat(message.target) if channel == self.prefix
                   else chat_for(channel, self.prefix))
        if chat_id is None:
            log.warning("telegram: %s names no chat (target %r); dropped", subject,
                        message.target)
            return
        with contextlib.suppress(RuntimeError):  # our loop has closed: stopping
            self.loop.call_soon_threadsafe(self._on_notice, chat_id, message)

    def _on_notice(self, chat_id: int, message: ChannelMessage) -> None:
        chat = self._chat(chat_id)
        kind = message.kind
        self.counts[kind] += 1
        if kind not in ("stream", "catchup") and message.seq > 0:
            if message.seq <= chat.last_notice.get(message.session_id, 0):
                self.counts["dropped"] += 1
                return
            chat.last_notice[message.session_id] = message.seq
        if kind == "error" and chat.asking:
            # The engine refuses a message twice, as the answer and as this notice, and
            # this one may come first: the answer, which says more, is shown.
            chat.held.append(message)
        elif kind == "stream":
            self._on_stream(chat, message)
        elif kind == "tool":
            self._on_tool(chat, message)
        elif kind == "reply":
            self._on_reply(chat, message)
        elif kind in ("completed", "failed"):
            self._on_end(chat, message)
        else:
            self._own_message(chat, message)

    def _turn(self, chat: _Chat, session_id: str) -> _Turn:
        turn = chat.turns.get(session_id)
        if turn is None:
            turn = chat.turns[session_id] = _Turn()
        return turn

    def _reply(self, turn: _Turn) -> _Reply:
        if turn.reply is None:
            turn.reply = _Reply(ChatStreamer(self.clock, throttle=self.throttle,
                                             limit=self.limit, can_edit=self.can_edit))
        return turn.reply

    def _on_stream(self, chat: _Chat, message: ChannelMessage) -> None:
        if not message.text:
            return
        turn = self._turn(chat, message.session_id)
        reply = self._reply(turn)
        if turn.seq and message.seq <= turn.seq:
            reply.need_break = True  # a new model call (a retry) numbers from 1 again
        turn.seq = message.seq
        turn.streamed = True
        self._text(chat, reply, message.text)

    def _on_tool(self, chat: _Chat, message: ChannelMessage) -> None:
        started = _TOOL_START.match(message.text)
        if started is not None:
            reply = self._reply(self._turn(chat, message.session_id))
            reply.need_break = True  # text after a tool starts a new paragraph
            self._queue(chat, reply, reply.streamer.tool(started["name"],
                                                         started["args"] or ""))
        elif message.text.startswith("✗ denied"):
            self._own_message(chat, message)
        # ✓/✗ outcome lines: the model reads them and its reply tells

    def _on_reply(self, chat: _Chat, message: ChannelMessage) -> None:
        turn = self._turn(chat, message.session_id)
        if not turn.streamed and message.text.strip():
            self._text(chat, self._reply(turn), message.text)  # its stream never came
        turn.streamed = False
        turn.seq = 0
        if turn.reply is not None:
            turn.reply.need_break = True

    def _text(self, chat: _Chat, reply: _Reply, text: str) -> None:
        if reply.need_break and reply.has_text:
            text = SEPARATOR + text.lstrip("\n")
        reply.need_break = False
        reply.has_text = True
        self._queue(chat, reply, reply.streamer.text(text))

    def _on_end(self, chat: _Chat, message: ChannelMessage) -> None:
        turn = chat.turns.pop(message.session_id, None)
        if turn is not None and turn.reply is not None:
            self._queue(chat, turn.reply, turn.reply.streamer.finish())
        if message.kind == "failed" or turn is None:
            self._plain(chat, f"{ICONS[message.kind]} {message.text}")

    def _own_message(self, chat: _Chat, message: ChannelMessage) -> None:
        if message.kind == "error" and self._seen_error(chat, message.text):
            return  # shown already, as the answer to the message it refused
        turn = chat.turns.get(message.session_id)
        if turn is not None and turn.reply is not None:
            # The reply so far ends here; what follows continues below this message.
            self._queue(chat, turn.reply, turn.reply.streamer.finish())
            turn.reply = None
        if message.kind in ("budget", "status") and message.text.startswith(
                ("budget exhausted", "session killed")):
            chat.turns.pop(message.session_id, None)
        icon = ICONS.get(message.kind, "")
        self._plain(chat, f"{icon} {message.text}" if icon else message.text)

    def _seen_error(self, chat: _Chat, reason: str) -> bool:
        """True if ``reason`` was shown within ERROR_WINDOW (and is now accounted for);
        else remember it as shown."""
        now = time.monotonic()
        chat.errors = {r: at for r, at in chat.errors.items() if now - at < ERROR_WINDOW}
        if reason in chat.errors:
            del chat.errors[reason]
            return True
        chat.errors[reason] = now
        return False

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.tick_period)
            for chat in list(self._chats.values()):
                for turn in list(chat.turns.values()):
                    if turn.reply is not None:
                        self._queue(chat, turn.reply, turn.reply.streamer.tick())

    # --- the chat's Bot API calls, in order ---------------------------------------------

    def _queue(self, chat: _Chat, reply: _Reply, ops: list[Op]) -> None:
        for op in ops:
            if isinstance(op, Send):
                self._enqueue(chat, _Action("send", op.text, reply, op.key))
            elif isinstance(op, Edit):
                # A call of the same message still queued gets the newest text instead.
                queued = next((a for a in reversed(chat.actions)
                               if a.reply is reply and a.key == op.key), None)
                if queued is not None:
                    queued.text = op.text
                else:
                    self._enqueue(chat, _Action("edit", op.text, reply, op.key))

    def _plain(self, chat: _Chat, text: str) -> None:
        for piece in split_text(text, self.limit):
            self._enqueue(chat, _Action("plain", piece))

    def _enqueue(self, chat: _Chat, action: _Action) -> None:
        chat.actions.append(action)
        chat.wake.set()
        if chat.sender is None or chat.sender.done():
            chat.sender = self.loop.create_task(self._sender(chat))

    async def _sender(self, chat: _Chat) -> None:
        while True:
            while chat.actions:
                await self._perform(chat, chat.actions.popleft())
            chat.wake.clear()
            await chat.wake.wait()

    async def _perform(self, chat: _Chat, action: _Action) -> None:
        for attempt in range(RETRIES + 1):
            try:
                await self._call_api(chat, action)
                return
            except RetryAfter as exc:
                await asyncio.sleep(_seconds(exc))
            except BadRequest as exc:
                text = str(exc).lower()
                if "not modified" in text:
                    return  # it shows that text already
                if action.kind == "edit" and "not found" in text:
                    action.kind = "send"  # deleted in the chat: send it anew
                    continue
                log.warning("telegram: %s to chat %s refused: %s", action.kind,
                            chat.chat_id, exc)
                return
            except Forbidden as exc:  # blocked by the user, removed from the group
                log.warning("telegram: chat %s: %s", chat.chat_id, exc)
                return
            except NetworkError as exc:  # includes TimedOut
                log.info("telegram: %s to chat %s failed (%s); retrying", action.kind,
                         chat.chat_id, exc)
                await asyncio.sleep(min(0.5 * 2**attempt, 5.0))
            except TelegramError as exc:
                log.warning("telegram: %s to chat %s failed: %s", action.kind,
                            chat.chat_id, exc)
                return
        log.warning("telegram: gave up a %s to chat %s", action.kind, chat.chat_id)

    async def _call_api(self, chat: _Chat, action: _Action) -> None:
        reply = action.reply
        message_id = reply.ids.get(action.key) if reply is not None else None
        if action.kind == "edit" and message_id is not None:
            await self.bot.edit_message_text(action.text, chat_id=chat.chat_id,
                                             message_id=message_id)
            return
        sent = await self.bot.send_message(chat.chat_id, action.text)
        if reply is not None:
            reply.ids[action.key] = sent.message_id


def _seconds(exc: RetryAfter) -> float:
    value = exc.retry_after  # an int now (with a deprecation warning), a timedelta later
    return value.total_seconds() if isinstance(value, dt.timedelta) else float(value)
