"""Engine to Telegram: what each channel notice shows in its chat.

:class:`NoticeView` decides, per chat and session, what a notice becomes: ``stream`` text
and ``tool`` start lines go through one ChatStreamer per reply, a ``reply`` notice shows
only when none of its text streamed, everything else is a message of its own that ends the
reply streaming above it, repeats (``seq`` not higher than the last shown) are dropped and
the same error within ERROR_WINDOW is shown once. The Bot API calls go to a
:class:`~adapters.telegram.sender.ChatSender`.
"""

from __future__ import annotations

import collections
import re
import time
from collections.abc import Iterable

from tether.actors.chat.stream import SEPARATOR, ChatStreamer
from tether.actors.ports import Clock
from tether.adapters.telegram.sender import ChatSender
from tether.adapters.telegram.state import Chat, Reply, Turn
from tether.events.messages import ChannelMessage

ERROR_WINDOW = 60.0
"""Seconds within which the same error, as ErrorReply and as a notice, is shown once."""

INFO = "\u2139\ufe0f"
"""The information sign (written escaped: it looks like a letter i)."""

ICONS = {
    "approval": "🔐", "question": "❓", "plan": "📋", "error": "⚠️", "failed": "❌",
    "budget": "💸", "waiting": "⏳", "reminder": "⏰", "status": INFO, "interrupted": "↩️",
    "completed": "✅", "tool": "🚫",
}
"""What a notice shown as a message of its own starts with, by kind."""

_TOOL_START = re.compile(r"→ (?P<name>[^(\s]+)(?:\((?P<args>.*)\))?\s*\Z", re.S)


class NoticeView:
    """Shows channel notices in their chats (see the module docstring)."""

    def __init__(self, sender: ChatSender, clock: Clock, *, throttle: float, limit: int,
                 can_edit: bool, counts: collections.Counter[str]) -> None:
        self.sender = sender
        self.clock = clock
        self.throttle = throttle
        self.limit = limit
        self.can_edit = can_edit
        self.counts = counts
        """Notices received by kind, plus ``dropped`` (repeats)."""

    def show(self, chat: Chat, message: ChannelMessage) -> None:
        """Show one notice of the chat's channel."""
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

    def release(self, chat: Chat) -> None:
        """Show the error notices held while the chat was asking (the twin of an
        ErrorReply already shown is dropped)."""
        if chat.asking:
            return
        held, chat.held = chat.held, []
        for message in held:
            self._own_message(chat, message)

    def tick(self, chats: Iterable[Chat]) -> None:
        """Flush the changes the throttle held back, in every streaming reply."""
        for chat in list(chats):
            for turn in list(chat.turns.values()):
                if turn.reply is not None:
                    self.sender.queue(chat, turn.reply, turn.reply.streamer.tick())

    def seen_error(self, chat: Chat, reason: str) -> bool:
        """True if ``reason`` was shown within ERROR_WINDOW (and is now accounted for);
        else remember it as shown."""
        now = time.monotonic()
        chat.errors = {r: at for r, at in chat.errors.items() if now - at < ERROR_WINDOW}
        if reason in chat.errors:
            del chat.errors[reason]
            return True
        chat.errors[reason] = now
        return False

    def _turn(self, chat: Chat, session_id: str) -> Turn:
        turn = chat.turns.get(session_id)
        if turn is None:
            turn = chat.turns[session_id] = Turn()
        return turn

    def _reply(self, turn: Turn) -> Reply:
        if turn.reply is None:
            turn.reply = Reply(ChatStreamer(self.clock, throttle=self.throttle,
                                            limit=self.limit, can_edit=self.can_edit))
        return turn.reply

    def _on_stream(self, chat: Chat, message: ChannelMessage) -> None:
        if not message.text:
            return
        turn = self._turn(chat, message.session_id)
        reply = self._reply(turn)
        if turn.seq and message.seq <= turn.seq:
            reply.need_break = True  # a new model call (a retry) numbers from 1 again
        turn.seq = message.seq
        turn.streamed = True
        self._text(chat, reply, message.text)

    def _on_tool(self, chat: Chat, message: ChannelMessage) -> None:
        started = _TOOL_START.match(message.text)
        if started is not None:
            reply = self._reply(self._turn(chat, message.session_id))
            reply.need_break = True  # text after a tool starts a new paragraph
            self.sender.queue(chat, reply, reply.streamer.tool(started["name"],
                                                               started["args"] or ""))
        elif message.text.startswith("✗ denied"):
            self._own_message(chat, message)
        # ✓/✗ outcome lines: the model reads them and its reply tells

    def _on_reply(self, chat: Chat, message: ChannelMessage) -> None:
        turn = self._turn(chat, message.session_id)
        if not turn.streamed and message.text.strip():
            self._text(chat, self._reply(turn), message.text)  # its stream never came
        turn.streamed = False
        turn.seq = 0
        if turn.reply is not None:
            turn.reply.need_break = True

    def _text(self, chat: Chat, reply: Reply, text: str) -> None:
        if reply.need_break and reply.has_text:
            text = SEPARATOR + text.lstrip("\n")
        reply.need_break = False
        reply.has_text = True
        self.sender.queue(chat, reply, reply.streamer.text(text))

    def _on_end(self, chat: Chat, message: ChannelMessage) -> None:
        turn = chat.turns.pop(message.session_id, None)
        if turn is not None and turn.reply is not None:
            self.sender.queue(chat, turn.reply, turn.reply.streamer.finish())
        if message.kind == "failed" or turn is None:
            self.sender.plain(chat, f"{ICONS[message.kind]} {message.text}")

    def _own_message(self, chat: Chat, message: ChannelMessage) -> None:
        if message.kind == "error" and self.seen_error(chat, message.text):
            return  # shown already, as the answer to the message it refused
        turn = chat.turns.get(message.session_id)
        if turn is not None and turn.reply is not None:
            # The reply so far ends here; what follows continues below this message.
            self.sender.queue(chat, turn.reply, turn.reply.streamer.finish())
            turn.reply = None
        if message.kind in ("budget", "status") and message.text.startswith(
                ("budget exhausted", "session killed")):
            chat.turns.pop(message.session_id, None)
        icon = ICONS.get(message.kind, "")
        self.sender.plain(chat, f"{icon} {message.text}" if icon else message.text)
