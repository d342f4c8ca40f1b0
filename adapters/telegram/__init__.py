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

The package, by concern: :mod:`.channels` (chat ids and channel names),
:mod:`.connector` (the loop, polling, asking the engine), :mod:`.notices` (what a notice
shows in its chat), :mod:`.sender` (each chat's Bot API calls, in order, with retries)
and :mod:`.state` (what is kept per chat).
"""

from tether.adapters.telegram.channels import (
           PREFIX,
           allowlist_problem,
           channel_for,
           chat_for,
           parse_chat,
)
from tether.adapters.telegram.connector import TelegramConnector

__all__ = ["PREFIX", "TelegramConnector", "allowlist_problem", "channel_for", "chat_for",
           "parse_chat"]
