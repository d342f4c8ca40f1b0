"""Each chat's Bot API calls, made in order by one sender task per chat.

:class:`ChatSender` turns a ChatStreamer's ops into queued sends and edits (an edit still
queued is replaced by a newer one of the same message) and performs them one at a time:
``RetryAfter`` waits the time it asks, network errors back off and retry, an edit of a
message that is gone becomes a new message, and "message is not modified" counts as done.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging

import telegram
from telegram.error import (
    BadRequest,
    Forbidden,
    NetworkError,
    RetryAfter,
    TelegramError,
)

from tether.actors.chat.stream import Edit, Op, Send, split_text
from tether.adapters.telegram.state import Action, Chat, Reply

log = logging.getLogger(__name__)

RETRIES = 3
"""Attempts after the first for one Bot API call that failed for a passing reason."""


class ChatSender:
    """Queues a chat's Bot API calls and performs them in order on ``loop``."""

    def __init__(self, bot: telegram.Bot, loop: asyncio.AbstractEventLoop, limit: int) -> None:
        self.bot = bot
        self.loop = loop
        self.limit = limit

    def queue(self, chat: Chat, reply: Reply, ops: list[Op]) -> None:
        """Queue a streamed reply's sends and edits."""
        for op in ops:
            if isinstance(op, Send):
                self._enqueue(chat, Action("send", op.text, reply, op.key))
            elif isinstance(op, Edit):
                # A call of the same message still queued gets the newest text instead.
                queued = next((a for a in reversed(chat.actions)
                               if a.reply is reply and a.key == op.key), None)
                if queued is not None:
                    queued.text = op.text
                else:
                    self._enqueue(chat, Action("edit", op.text, reply, op.key))

    def plain(self, chat: Chat, text: str) -> None:
        """Queue a message of its own (split where it is too long)."""
        for piece in split_text(text, self.limit):
            self._enqueue(chat, Action("plain", piece))

    def _enqueue(self, chat: Chat, action: Action) -> None:
        chat.actions.append(action)
        chat.wake.set()
        if chat.sender is None or chat.sender.done():
            chat.sender = self.loop.create_task(self._sender(chat))

    async def _sender(self, chat: Chat) -> None:
        while True:
            while chat.actions:
                await self._perform(chat, chat.actions.popleft())
            chat.wake.clear()
            await chat.wake.wait()

    async def _perform(self, chat: Chat, action: Action) -> None:
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

    async def _call_api(self, chat: Chat, action: Action) -> None:
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
