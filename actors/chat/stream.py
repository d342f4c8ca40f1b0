"""Streaming a model's reply into chat messages that can be sent, then edited: pure.

``ChatStreamer`` is fed what happens while the model answers (``text``, ``tool``, ``tick``,
``finish``) and answers each call with the operations the chat connector should perform:
``Send`` a new message or ``Edit`` one already sent. It does no I/O and keeps no timers;
time is the ``now`` passed in (seconds as a float, or a datetime) or, when omitted, the
injected Clock's.

The contract:

- The first visible change is sent at once. After that the connector is touched at most
  once every ``throttle`` seconds: a change arriving sooner is held, and the next ``text``,
  ``tool`` or ``tick`` call after the throttle has elapsed flushes it. ``finish`` always
  flushes. One flush may carry several operations (e.g. finalising a full message and
  sending its continuation).
- While streaming, the text ends with the ``CURSOR``, and the latest tool's status line
  (``🔧 Bash: running the tests``) sits under it; the next tool's line replaces it and the
  next non-empty text removes it. A description is shown on one line (whitespace runs
  collapse). A reply that starts with a tool shows just the status line; a continuation
  message is not started for a status line alone.
- No operation ever carries more than ``limit`` characters, nor an empty text. Text is
  split by ``split_text``; while streaming, as soon as the text of the current message
  passes ``limit`` its full part is finalised there and the rest continues in a new
  message. The cursor and the status line are left out when they do not fit (the status
  line is shortened with "…" when it is alone in the message).
- At ``finish`` the messages read exactly ``final_messages(whole text, tool names)``:
  no cursor, no status line, and the tool summary (``🧰 Bash x3, Read``) appended to the
  last message, or sent as a message of its own when it does not fit there. The cuts made
  while streaming depend only on the text before them, so they are the ones
  ``split_text`` makes on the whole text.
- A reply with no text and no tools produces no operation; one with tools but no text
  ends as a single message holding the tool summary.
- A connector that cannot edit (``can_edit=False``) gets nothing while streaming and, at
  ``finish``, one ``Send`` per final message.
- Calls after ``finish`` raise RuntimeError.
"""

from __future__ import annotations

import datetime as dt

import msgspec

from tether.actors.ports import Clock

CURSOR = "▍"
"""Appended to the text while the reply is still streaming."""

DEFAULT_LIMIT = 4000
"""Characters per chat message (Telegram allows 4096; the margin is deliberate)."""

DEFAULT_THROTTLE = 1.5
"""Seconds between two updates of the chat while streaming."""

TOOL_ICON = "🔧"
SUMMARY_ICON = "🧰"
SEPARATOR = "\n\n"
"""Between the text and the status line or the tool summary."""


class Send(msgspec.Struct, frozen=True, tag=True):
    """Send a new message; ``key`` (0, 1, 2... in order) names it for later edits."""

    key: int
    text: str


class Edit(msgspec.Struct, frozen=True, tag=True):
    """Replace the text of the message sent as ``key``."""

    key: int
    text: str


Op = Send | Edit


def _cut(text: str, limit: int) -> tuple[str, str]:
    """Split ``text`` (longer than ``limit``) into a head of at most ``limit`` characters
    and the rest: at the last newline at index <= limit, else the last space, else hard
    at ``limit``. The separator cut at is dropped; a separator at index 0 is not used (it
    would leave an empty head). Depends only on ``text[: limit + 1]``."""
    window = text[: limit + 1]
    for sep in ("\n", " "):
        i = window.rfind(sep)
        if i > 0:
            return text[:i], text[i + 1 :]
    return text[:limit], text[limit:]


def split_text(text: str, limit: int = DEFAULT_LIMIT) -> list[str]:
    """``text`` as chat messages of at most ``limit`` characters each.

    Each cut is at the last newline at or before ``limit`` (index <= limit, so a newline
    right after ``limit`` characters still counts), else the last space, else hard at
    ``limit``; the newline or space cut at is dropped, nothing else is. Empty text gives no
    message; a text ending with the separator it is cut at gives no empty last message.
    """
    if limit < 1:
        raise ValueError("limit must be at least 1")
    pieces: list[str] = []
    while len(text) > limit:
        head, text = _cut(text, limit)
        pieces.append(head)
    if text:
        pieces.append(text)
    return pieces


def tool_summary(names: list[str]) -> str:
    """``🧰 Bash x3, Read, Edit x2``: tools in first-use order, a count only when > 1;
    empty when no tool ran."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    if not counts:
        return ""
    parts = [name if n == 1 else f"{name} x{n}" for name, n in counts.items()]
    return f"{SUMMARY_ICON} " + ", ".join(parts)


def final_messages(text: str, tools: list[str], limit: int = DEFAULT_LIMIT) -> list[str]:
    """What a finished reply reads as: ``split_text(text)``, with the tool summary
    appended to the last message after a blank line, or as a message of its own (split
    too, should it be absurdly long) when it does not fit there or there is no text."""
    return _with_summary(split_text(text, limit), tools, limit)


def _with_summary(pieces: list[str], tools: list[str], limit: int) -> list[str]:
    summary = tool_summary(tools)
    if not summary:
        return pieces
    if pieces and len(pieces[-1]) + len(SEPARATOR) + len(summary) <= limit:
        return [*pieces[:-1], pieces[-1] + SEPARATOR + summary]
    return pieces + split_text(summary, limit)


def _status_line(name: str, description: str) -> str:
    description = " ".join(description.split())
    return f"{TOOL_ICON} {name}: {description}" if description else f"{TOOL_ICON} {name}"


class ChatStreamer:
    """Turns one streamed reply into Send/Edit operations for a chat (see the module doc).

    ``clock`` supplies the time for calls made without ``now``; ``throttle`` is the least
    number of seconds between two updates; ``limit`` the most characters in a message.
    """

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        throttle: float = DEFAULT_THROTTLE,
        limit: int = DEFAULT_LIMIT,
        can_edit: bool = True,
    ) -> None:
        if limit < 2:
            raise ValueError("limit must be at least 2")
        if throttle < 0:
            raise ValueError("throttle must not be negative")
        self._clock = clock
        self.throttle = throttle
        self.limit = limit
        self.can_edit = can_edit
        self._finals: list[str] = []  # full parts, cut off while streaming
        self._body = ""  # text of the current (last) message
        self._status = ""  # the latest tool's status line, until the next text
        self._tools: list[str] = []  # names of the tools run, in order
        self._shown: list[str] = []  # what the chat shows, by key
        self._last_flush: float | None = None
        self._finished = False

    # --- inputs -------------------------------------------------------------------------

    def text(self, chunk: str, now: float | dt.datetime | None = None) -> list[Op]:
        """Assistant text arrived. Removes the status line; an empty chunk changes
        nothing."""
        t = self._time(now)
        if chunk:
            self._status = ""
            self._body += chunk
            while len(self._body) > self.limit:
                head, self._body = _cut(self._body, self.limit)
                self._finals.append(head)
        return self._maybe_flush(t)

    def tool(
        self, name: str, description: str = "", now: float | dt.datetime | None = None
    ) -> list[Op]:
        """A tool started: its status line replaces any previous one."""
        t = self._time(now)
        self._tools.append(name)
        self._status = _status_line(name, description)
        return self._maybe_flush(t)

    def tick(self, now: float | dt.datetime | None = None) -> list[Op]:
        """Time passed: flush a held change if the throttle has elapsed."""
        return self._maybe_flush(self._time(now))

    def finish(self, now: float | dt.datetime | None = None) -> list[Op]:
        """The reply is complete: bring every message to its final text, at once."""
        self._time(now)
        self._finished = True
        # The cuts made while streaming are split_text's cuts on the whole text.
        pieces = self._finals + split_text(self._body, self.limit)
        return self._emit(_with_summary(pieces, self._tools, self.limit))

    # --- state --------------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def shown(self) -> list[str]:
        """What the chat shows now, by message key."""
        return list(self._shown)

    def _time(self, now: float | dt.datetime | None) -> float:
        if self._finished:
            raise RuntimeError("the reply is already finished")
        if now is None:
            if self._clock is None:
                raise ValueError("no time given and no clock to read it from")
            now = self._clock.now()
        return now.timestamp() if isinstance(now, dt.datetime) else float(now)

    def _live(self) -> list[str]:
        """What the chat should show while streaming."""
        view = list(self._finals)
        current = self._render(first=not self._finals)
        if current:
            view.append(current)
        return view

    def _render(self, *, first: bool) -> str:
        """The current message: text, cursor and status line, each only if it fits."""
        text = self._body
        if text and len(text) + len(CURSOR) <= self.limit:
            text += CURSOR
        if not self._status:
            return text
        if text:
            with_status = text + SEPARATOR + self._status
            return with_status if len(with_status) <= self.limit else text
        if not first:
            # A continuation holding only a status line could be left with nothing to
            # show at finish (the summary may go to the message before): keep it unsent.
            return ""
        status = self._status
        return status if len(status) <= self.limit else status[: self.limit - 1] + "…"

    def _maybe_flush(self, now: float) -> list[Op]:
        if not self.can_edit:
            return []
        if self._last_flush is not None and now - self._last_flush < self.throttle:
            return []
        ops = self._emit(self._live())
        if ops:
            self._last_flush = now
        return ops

    def _emit(self, view: list[str]) -> list[Op]:
        """Operations taking the chat from what it shows to ``view``."""
        ops: list[Op] = []
        for key, text in enumerate(view):
            if key >= len(self._shown):
                ops.append(Send(key, text))
                self._shown.append(text)
            elif self._shown[key] != text:
                ops.append(Edit(key, text))
                self._shown[key] = text
        return ops
