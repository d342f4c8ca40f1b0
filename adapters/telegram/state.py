"""What the Telegram connector keeps per chat, in memory only.

A :class:`Chat` holds the session its next message continues, the turns whose replies
stream into it (:class:`Turn`, :class:`Reply`) and its queue of Bot API calls
(:class:`Action`). All of it lives on the connector's own loop.
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass, field
from typing import Literal

from tether.actors.chat.stream import ChatStreamer
from tether.events.messages import ChannelMessage


class Reply:
    """One streamed reply: its streamer and the Telegram message ids of its keys."""

    def __init__(self, streamer: ChatStreamer) -> None:
        self.streamer = streamer
        self.ids: dict[int, int] = {}
        self.has_text = False
        self.need_break = False


class Turn:
    """What one chat knows of one session's current turn."""

    def __init__(self) -> None:
        self.reply: Reply | None = None
        self.seq = 0
        """The last stream seq of the current model call (a lower one starts a new one)."""
        self.streamed = False
        """Stream text arrived since the last ``reply`` notice."""


@dataclass
class Action:
    """One Bot API call to make for a chat, in order."""

    kind: Literal["send", "edit", "plain"]
    text: str
    reply: Reply | None = None
    key: int = 0


@dataclass
class Chat:
    """One Telegram chat: its channel, session, turns and queued Bot API calls."""

    chat_id: int
    channel: str
    session_id: str = ""
    last_notice: dict[str, int] = field(default_factory=dict)
    """Per session, the highest notice number shown (notices of one session come in
    order; two sessions' may interleave)."""
    turns: dict[str, Turn] = field(default_factory=dict)
    actions: collections.deque[Action] = field(default_factory=collections.deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    sender: asyncio.Task[None] | None = None
    errors: dict[str, float] = field(default_factory=dict)
    asking: int = 0
    """Messages of the chat waiting for the engine's answer."""
    held: list[ChannelMessage] = field(default_factory=list)
    """Error notices that came while asking: shown (or dropped as the answer's twin) once
    the answer is in."""
