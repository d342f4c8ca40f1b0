"""The ports actors are handed: model provider, tool executor, bus, clock and ids.

Actors depend on these protocols only; ``adapters`` supplies the concrete parts (NATS,
the anthropic SDK, the file system). Model events are plain Structs so a provider can be
swapped without touching the session logic.
"""

from __future__ import annotations

import datetime as dt
import itertools
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from tether.events.messages import ContentBlock, TextBlock, Usage
from tether.events.sandbox import SandboxProfile

# --- model --------------------------------------------------------------------------------


class ModelRequest(msgspec.Struct, kw_only=True):
    """One call to the model: Anthropic Messages API shaped."""

    model: str
    system: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = []
    tool_choice: dict[str, Any] | None = None
    """The Messages API ``tool_choice`` (None: not sent, the API's ``auto``). A call that
    must not use tools but whose history holds tool blocks sends the tools with
    ``{"type": "none"}``: the API refuses tool blocks in a request that defines no tools."""
    max_tokens: int = 4096
    history_tokens: int = 0
    """Estimated tokens of ``messages`` (0: not estimated), for compaction; never sent."""
    input_tokens: int = 0
    """Estimated input tokens of the whole request (0: not estimated); never sent."""


class TextDelta(msgspec.Struct, tag=True):
    """A piece of streamed text in content block ``index``."""

    index: int
    text: str


class ThinkingDelta(msgspec.Struct, tag=True):
    """A piece of the model's streamed thinking in content block ``index`` (watched by
    TTSR rules scoped to ``thinking``; not kept in the conversation)."""

    index: int
    text: str


class ToolUseStart(msgspec.Struct, tag=True):
    """A tool_use block opened at ``index``."""

    index: int
    id: str
    name: str


class ToolInputDelta(msgspec.Struct, tag=True):
    """A piece of a tool call's streamed JSON arguments."""

    index: int
    partial_json: str


class MessageDone(msgspec.Struct, tag=True):
    """The model's message is complete (``message_stop`` was seen)."""

    content: list[ContentBlock]
    stop_reason: str
    usage: Usage


ModelEvent = TextDelta | ThinkingDelta | ToolUseStart | ToolInputDelta | MessageDone


class ProviderError(Exception):
    """The model call failed; the message is shown to the user. ``transient``: worth
    trying again (rate limited, overloaded, a server error, the network)."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class Provider(Protocol):
    """Streams one model response. Must end with MessageDone or raise ProviderError."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]: ...


# --- tools --------------------------------------------------------------------------------


class ToolOutput(msgspec.Struct):
    """What a tool returned; ``is_error`` marks a failure the model should see."""

    content: str
    is_error: bool = False


async def answer_of(provider: Provider, request: ModelRequest) -> tuple[str, Usage]:
    """A whole answer to ``request`` (a side call: a review, a title): its text and usage.
    Raises ProviderError like the provider; an answer without MessageDone is empty."""
    done: MessageDone | None = None
    async for event in provider.stream(request):
        if isinstance(event, MessageDone):
            done = event
    if done is None:
        return "", Usage()
    return "".join(b.text for b in done.content if isinstance(b, TextBlock)), done.usage


@dataclass(frozen=True)
class Grant:
    """What the gatekeeper's verdict lets one call do beyond the default containment, and
    the switch that stops it.

    ``network``: the call may reach the network; ``writes``: absolute paths the verdict
    judged it to write (a protected file among them stays writable, never deletable);
    ``cancel``: set it and the call's processes are killed (a killed session, a stop).
    """

    network: bool = False
    writes: tuple[str, ...] = ()
    cancel: threading.Event = field(default_factory=threading.Event)


class ToolExecutor(Protocol):
    """Runs built-in tools inside a workspace. Blocking: call it from a helper thread."""

    def definitions(self, groups: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Tool schemas in the Messages API ``tools`` format: those of ``groups`` (all
        when None)."""
        ...

    def groups(self) -> dict[str, str]:
        """Tool groups that can be loaded one by one: name -> what they do and which
        tools they hold. Empty: every tool is offered from the start."""
        ...

    def group_of(self, tool: str) -> str | None:
        """The group holding ``tool`` (None: not a grouped tool)."""
        ...

    def sandbox_profile(self, name: str, grant: Grant) -> SandboxProfile | None:
        """The containment ``name`` would run under with ``grant`` (recorded before it
        runs); None for a tool that starts no process."""
        ...

    def execute(
        self, name: str, tool_input: dict[str, Any], workspace: str, grant: Grant | None = None
    ) -> ToolOutput:
        """Run one tool call under ``grant`` (None: no network, no protected writes);
        never raises for a tool's own failure."""
        ...


# --- snapshots ----------------------------------------------------------------------------


class SnapshotEntry(msgspec.Struct, frozen=True):
    """One path in a snapshot: ``kind`` file, dir, symlink or absent; ``blob`` the copy."""

    path: str
    kind: str
    blob: str = ""


class Snapshot(msgspec.Struct, frozen=True):
    """Copies of the paths a tool call was about to change, taken before it ran."""

    id: str
    folder: str
    entries: list[SnapshotEntry]


class Snapshots(Protocol):
    """Takes snapshots before a call changes files, and restores them (``tether undo``)."""

    def take(self, session_id: str, snapshot_id: str, paths: list[str],
             root: str) -> Snapshot:
        """Copy ``paths`` (inside the folder ``root``, never followed out of it) before a
        call changes them; ``OSError`` when one cannot be copied so."""
        ...

    def read(self, folder: str) -> Snapshot:
        """The snapshot taken into ``folder``; ``OSError`` or ``ValueError`` when it
        cannot be read."""
        ...

    def check(self, snapshot: Snapshot, root: str) -> None:
        """Raise ``OSError`` if restoring ``snapshot`` beneath ``root`` would leave it;
        changes nothing."""
        ...

    def restore(self, snapshot: Snapshot, root: str) -> list[str]:
        """Put the snapshot's paths back, beneath the folder ``root`` only (a path or a
        symlink leading out of it raises ``OSError``); returns the paths."""
        ...


# --- bus ----------------------------------------------------------------------------------


class BusError(Exception):
    """The bus could not do what was asked (connect, request)."""


class RequestTimeout(BusError):
    """A request got no reply within its timeout."""


class Inbound(msgspec.Struct):
    """A raw message from the bus, as handed to a subscription callback."""

    subject: str
    data: bytes
    reply: str = ""
    headers: dict[str, str] | None = None


class Subscription(Protocol):
    """A live subscription; ``close`` stops delivery."""

    def close(self) -> None: ...


class Bus(Protocol):
    """Thread-safe view of the process's one NATS connection.

    Callbacks run on the bus's asyncio loop and must not block: hand work to an actor.
    """

    def publish(
        self,
        subject: str,
        data: bytes,
        headers: dict[str, str] | None = None,
        reply: str = "",
    ) -> None:
        """Publish without waiting (ordered per calling thread); ``reply`` forwards a
        request so the final handler answers the original requester."""
        ...

    def subscribe(
        self, subject: str, callback: Callable[[Inbound], None], queue: str = ""
    ) -> Subscription:
        """Subscribe; blocks the caller (not the loop) until the server has the interest."""
        ...

    def request(
        self,
        subject: str,
        data: bytes,
        timeout: float,
        on_reply: Callable[[bytes | None, str], None],
    ) -> None:
        """Send a request; ``on_reply(data, "")`` or ``on_reply(None, error)`` later."""
        ...

    def request_sync(self, subject: str, data: bytes, timeout: float) -> bytes:
        """Blocking request for clients (never call it on the loop or inside an actor)."""
        ...

    def spawn(self, factory: Callable[[], Coroutine[Any, Any, None]]) -> Future[None]:
        """Run a coroutine on the loop; cancelling the future cancels the task."""
        ...

    def call(self, factory: Callable[[], Awaitable[Any]], timeout: float = 10.0) -> Any:
        """Run a coroutine on the loop and wait for its result (clients only)."""
        ...


# --- time and ids -------------------------------------------------------------------------


class Clock(Protocol):
    """Injected time source."""

    def now(self) -> dt.datetime: ...


class SystemClock:
    """The real wall clock, in UTC."""

    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)


class ManualClock:
    """A clock tests move by hand."""

    def __init__(self, start: dt.datetime | None = None) -> None:
        self._now = start or dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
        self._lock = threading.Lock()

    def now(self) -> dt.datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += dt.timedelta(seconds=seconds)


class Ids(Protocol):
    """Injected id source."""

    def new(self) -> str: ...


class RandomIds:
    """Short random ids (hex of a UUID4)."""

    def new(self) -> str:
        return uuid.uuid4().hex[:16]


class SequentialIds:
    """Deterministic ids for tests and replays: ``<prefix>1``, ``<prefix>2``..."""

    def __init__(self, prefix: str = "s") -> None:
        self._counter = itertools.count(1)
        self._prefix = prefix
        self._lock = threading.Lock()

    def new(self) -> str:
        with self._lock:
            return f"{self._prefix}{next(self._counter)}"
