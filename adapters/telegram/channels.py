"""Telegram chat ids and Tether channel names, one to one.

Chat ``123`` is channel ``telegram-123`` and chat ``-100123`` is ``telegram-m100123``: the
minus is written ``m``, so a channel name is always one valid subject token.
:func:`allowlist_problem` says whether the middleware's allowlist covers such channels.
"""

from __future__ import annotations

from tether.actors.middleware import Gate, MiddlewareSettings

PREFIX = "telegram"
"""Channel prefix of the chats: ``telegram-<chat>``."""


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
