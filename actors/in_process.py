"""In-process delivery: the subjects this process's actors listen on, for its own actors.

A message between two actors of one process goes straight to the receiver's mailbox,
typed, instead of out to the NATS server and back: no encoding, no decoding, no trip
through the bus's loop. Subjects stay the addresses, and the bus stays the way in for
every other process and client (see :class:`actors.runtime.Binding`).

:class:`LocalRoutes` is the table: which actors of this process take which subjects
(exact subjects, or patterns with NATS's ``*`` and ``>``), and whether each also listens
on the bus. :class:`LocalAsks` holds the requests made in process: the reply address is
a token that never reaches NATS, answered in process, or expired after its timeout. Only
an envelope the runtime made for such a request is answered in process
(:attr:`actors.runtime.Envelope.asked_here`): a reply address that came over the bus is
published to, whatever it looks like, so no outsider can answer an ask made here.

Order: messages one thread sends in process to one actor arrive in the order sent, as
they do over one NATS connection; an actor's messages to another go all one way or all
the other (the bindings decide per subject, and the engine binds the subjects of one
conversation, session, monitor, router and coordinator, alike).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

import msgspec

__all__ = ["LocalAsks", "LocalRoute", "LocalRoutes", "Waiting", "is_a", "matches"]

LOCAL_REPLY_PREFIX = "_LOCAL."
"""Reply addresses of requests made in process (never valid on NATS: they are not
published there)."""


class LocalRoute(msgspec.Struct, frozen=True, eq=False):
    """An actor of this process taking ``subject``; ``on_bus``: it also listens on NATS
    (so a message sent to it in process must not be published as well, or it would get
    it twice)."""

    subject: str
    ref: Any
    on_bus: bool


def matches(pattern: str, subject: str) -> bool:
    """Whether NATS would deliver ``subject`` to a subscription on ``pattern`` (``*``: one
    token, ``>``: one or more at the end)."""
    wanted, got = pattern.split("."), subject.split(".")
    for index, token in enumerate(wanted):
        if token == ">":
            return len(got) > index
        if index >= len(got) or (token != "*" and token != got[index]):
            return False
    return len(wanted) == len(got)


class LocalRoutes:
    """The subjects this process's actors take in process (thread-safe)."""

    def __init__(self) -> None:
        self._exact: dict[str, list[LocalRoute]] = {}
        self._patterns: list[LocalRoute] = []
        self._lock = threading.Lock()

    def add(self, route: LocalRoute) -> Callable[[], None]:
        """Take ``route``; returns what removes it."""
        wildcard = any(token in ("*", ">") for token in route.subject.split("."))
        with self._lock:
            if wildcard:
                self._patterns = [*self._patterns, route]
            else:
                self._exact[route.subject] = [*self._exact.get(route.subject, []), route]

        def remove() -> None:
            with self._lock:
                if wildcard:
                    self._patterns = [r for r in self._patterns if r is not route]
                else:
                    left = [r for r in self._exact.get(route.subject, []) if r is not route]
                    if left:
                        self._exact[route.subject] = left
                    else:
                        self._exact.pop(route.subject, None)
        return remove

    def to(self, subject: str) -> list[LocalRoute]:
        """The routes that take ``subject`` (exact ones first)."""
        exact, patterns = self._exact.get(subject, []), self._patterns
        return [*exact, *(r for r in patterns if matches(r.subject, subject))]


class Waiting(msgspec.Struct):
    """A request made in process: whose (``ref``), under which ``tag``, answered by a
    ``reply_type``."""

    ref: Any
    tag: str
    reply_type: Any


class LocalAsks:
    """Requests made in process, waiting for their answer (thread-safe). The runtime
    turns what :meth:`take` gives into the asker's ``AskResult``."""

    def __init__(self, process: str) -> None:
        self._prefix = f"{LOCAL_REPLY_PREFIX}{process}."
        self._counter = itertools.count(1)
        self._waiting: dict[str, Waiting] = {}
        self._lock = threading.Lock()

    def open(self, ref: Any, tag: str, reply_type: Any) -> str:
        """A reply address for a request of the actor ``ref``."""
        token = f"{self._prefix}{next(self._counter)}"
        with self._lock:
            self._waiting[token] = Waiting(ref, tag, reply_type)
        return token

    def take(self, token: str) -> Waiting | None:
        """The request ``token`` answers, no longer waiting; None when nobody waits for
        it any more (answered, or expired)."""
        with self._lock:
            return self._waiting.pop(token, None)


def is_a(message: Any, reply_type: Any) -> bool:
    """``isinstance``, for a reply type that is a class or a union of classes (any other
    annotation is taken as met: the receiver is this process's own code)."""
    try:
        return isinstance(message, reply_type)
    except TypeError:
        return True
