"""The inbox middleware: who may talk, how often, and how much. Pure.

Checked in order for every user message before anything is stored: the size limit, the
allowlist of the connector (channel), then the sender's token bucket. A refused message
is not stored as a user message; the manager records the refusal for the audit trail and
tells the sender why.
"""

from __future__ import annotations

import fnmatch
from typing import Annotated, Literal

import msgspec

from tether.events.messages import UserMessage

RefusalKind = Literal["too_large", "not_allowed", "rate_limited"]


class MiddlewareSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The ``[middleware]`` table of tether.toml."""

    allow: dict[str, list[str]] = {}
    """Channel name or glob (``telegram``, ``terminal-*``) -> user ids allowed there. A
    channel that no key matches is open to everyone; a matching key with an empty list is
    closed."""
    rate_per_minute: Annotated[float, msgspec.Meta(gt=0)] = 30.0
    burst: Annotated[int, msgspec.Meta(ge=1)] = 5
    """Tokens a sender's bucket holds (seed 000: 5), refilled at ``rate_per_minute / 60``
    per second."""
    max_message_bytes: Annotated[int, msgspec.Meta(ge=1)] = 64 * 1024


class Refusal(msgspec.Struct, frozen=True):
    """Why a message was turned away, in words for the sender."""

    kind: RefusalKind
    reason: str


class TokenBucket:
    """``burst`` tokens, refilled at ``rate`` per second; one message takes one."""

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self.updated = now

    def take(self, now: float) -> float:
        """0 if a token was taken, else the seconds until one is available."""
        # A clock stepped back gives nothing and takes nothing.
        self.tokens = min(self.burst, self.tokens + max(0.0, now - self.updated) * self.rate)
        self.updated = max(self.updated, now)
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


class Gate:
    """Applies the middleware settings to incoming user messages."""

    def __init__(self, settings: MiddlewareSettings) -> None:
        self.settings = settings
        self._buckets: dict[tuple[str, str], TokenBucket] = {}

    def allowed_users(self, channel: str) -> list[str] | None:
        """The allowlist that applies to ``channel``, or None when it is open."""
        for pattern, users in self.settings.allow.items():
            if fnmatch.fnmatchcase(channel, pattern):
                return users
        return None

    def check(self, message: UserMessage, size: int, now: float) -> Refusal | None:
        """None if ``message`` (``size`` bytes on the wire) may pass at time ``now``
        (seconds, monotonic), else why not."""
        limit = self.settings.max_message_bytes
        if size > limit:
            return Refusal("too_large", f"the message is {size} bytes; the limit is {limit}")
        users = self.allowed_users(message.channel)
        if users is not None and message.user not in users:
            return Refusal(
                "not_allowed",
                f"user {message.user!r} is not allowed on {message.channel}; ask an "
                "operator to add you to the allowlist",
            )
        key = (message.channel, message.user)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenBucket(
                self.settings.rate_per_minute / 60.0, self.settings.burst, now
            )
        wait = bucket.take(now)
        if wait > 0:
            return Refusal(
                "rate_limited", f"too many messages; wait {wait:.0f} s and send it again"
                if wait >= 1 else "too many messages; wait a second and send it again",
            )
        return None
