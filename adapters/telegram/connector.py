"""The Telegram connector's bus client: Telegram updates in, channel notices out.

:class:`TelegramConnector` owns an asyncio loop on its own thread: it long-polls
``getUpdates``, handles ``/start`` and ``/new``, asks the engine on ``<ns>.inbox`` with a
UserMessage per text message (remembering each chat's session from the Accepted answer),
and hands the notices of its channels to the :class:`~adapters.telegram.notices.NoticeView`
(the package docstring, :mod:`adapters.telegram`, tells the whole contract).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import telegram
from telegram.error import TelegramError

from tether.actors.chat.stream import DEFAULT_LIMIT, DEFAULT_THROTTLE
from tether.actors.ports import Bus, Clock, Inbound, Subscription, SystemClock
from tether.adapters.telegram.channels import PREFIX, channel_for, chat_for, parse_chat
from tether.adapters.telegram.notices import INFO, NoticeView
from tether.adapters.telegram.sender import ChatSender
from tether.adapters.telegram.state import Chat
from tether.events.codec import DecodeFailure, Decoder, encode, without_lone_surrogates
from tether.events.messages import Accepted, ChannelMessage, ErrorReply, UserMessage
from tether.events.subjects import Subjects, check_token

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_POLL_TIMEOUT = 25.0
"""Seconds a getUpdates long poll may wait for an update."""

TICK_PERIOD = 0.25
"""Seconds between two ticks of the streaming replies (flushing held changes)."""

START_TEXT = ("Hello! Send a message and a coding agent works on it here; its reply streams "
              "into this chat. /new starts a new session, /help lists the commands.")

_NAMED_COMMAND = re.compile(r"(?P<command>/[^\s@]+)@(?P<bot>\w+)(?=\s|\Z)")


class TelegramConnector:
    """Telegram chats as Tether channels (see the package docstring)."""

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
        self._sender = ChatSender(self.bot, self.loop, limit)
        self._view = NoticeView(self._sender, self.clock, throttle=throttle, limit=limit,
                                can_edit=can_edit, counts=self.counts)
        self._thread = threading.Thread(target=self._run, name="tether-telegram",
                                        daemon=True)
        self._chats: dict[int, Chat] = {}
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

    def _chat(self, chat_id: int) -> Chat:
        chat = self._chats.get(chat_id)
        if chat is None:
            chat = self._chats[chat_id] = Chat(chat_id, channel_for(chat_id, self.prefix))
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
        # Telegram's JSON may carry a lone surrogate, which no message on the bus can hold.
        text = without_lone_surrogates(message.text)
        self._spawn(self._on_text(chat, message.from_user.id, text))

    async def _on_text(self, chat: Chat, user_id: int, text: str) -> None:
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
                self._sender.plain(chat, START_TEXT)
                return
            if command == "/new":
                chat.session_id = ""
                if not rest.strip():
                    self._sender.plain(chat, "🆕 Your next message starts a new session.")
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

    async def _submit(self, chat: Chat, user_id: int, text: str) -> None:
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
                        self._view.seen_error(chat, answer.reason)  # its notice need not show
                        chat.session_id = ""
                        self._sender.plain(chat, f"{INFO} The previous session is gone; "
                                                 "this message starts a new one.")
                        continue
                    if not self._view.seen_error(chat, answer.reason):
                        icon = "⛔" if answer.error == "not_allowed" else "⚠️"
                        self._sender.plain(chat, f"{icon} Not sent: {answer.reason}")
                    return
                self._sender.plain(chat, f"⚠️ Not sent: {error}. Please send it again.")
                return
            finally:
                self._view.release(chat)

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
        self._view.show(self._chat(chat_id), message)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.tick_period)
            self._view.tick(self._chats.values())
