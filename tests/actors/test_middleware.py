"""The inbox middleware's decisions: size, allowlist, token bucket (pure, injected time)."""

from __future__ import annotations

import pytest

from tether.actors.middleware import Gate, MiddlewareSettings, TokenBucket
from tether.events.messages import UserMessage


def msg(user: str = "ana", channel: str = "web") -> UserMessage:
    return UserMessage(text="hi", channel=channel, user=user)


def test_size_is_checked_first() -> None:
    gate = Gate(MiddlewareSettings(max_message_bytes=100, allow={"web": []}))
    refusal = gate.check(msg(), 101, 0.0)
    assert refusal is not None and refusal.kind == "too_large" and "100" in refusal.reason
    assert gate.check(msg(), 100, 0.0) is not None  # then the (closed) allowlist
    assert gate.check(msg(), 100, 0.0).kind == "not_allowed"  # type: ignore[union-attr]


def test_allowlists_per_channel_with_globs() -> None:
    gate = Gate(MiddlewareSettings(allow={"telegram": ["ana"], "terminal-*": ["root"]}))
    assert gate.check(msg("ana", "telegram"), 10, 0.0) is None
    bo = gate.check(msg("bo", "telegram"), 10, 0.0)
    assert bo is not None and bo.kind == "not_allowed" and "'bo'" in bo.reason
    assert gate.check(msg("root", "terminal-42"), 10, 0.0) is None
    assert gate.check(msg("bo", "terminal-42"), 10, 0.0) is not None
    assert gate.check(msg("anyone", "web"), 10, 0.0) is None  # no key matches: open


def test_rate_limit_refills_with_time() -> None:
    gate = Gate(MiddlewareSettings(rate_per_minute=6, burst=2))  # one token every 10 s
    assert gate.check(msg(), 1, 100.0) is None
    assert gate.check(msg(), 1, 100.0) is None
    third = gate.check(msg(), 1, 100.0)
    assert third is not None and third.kind == "rate_limited" and "wait 10 s" in third.reason
    assert gate.check(msg("bo"), 1, 100.0) is None  # buckets are per user
    assert gate.check(msg(), 1, 105.0) is not None
    assert gate.check(msg(), 1, 110.0) is None


def test_bucket_never_exceeds_its_burst() -> None:
    bucket = TokenBucket(rate=1.0, burst=3, now=0.0)
    assert [bucket.take(1000.0) for _ in range(4)][:3] == [0.0, 0.0, 0.0]
    assert bucket.take(1000.0) == pytest.approx(1.0)


def test_the_default_bucket_holds_five_and_refills_at_the_rate() -> None:
    """Seed 000: burst 5, refilled at rpm / 60 per second (30 a minute: one every 2 s)."""
    gate = Gate(MiddlewareSettings())
    sent = [gate.check(UserMessage(text="hi", channel="c", user="u"), 2, 100.0)
            for _ in range(6)]
    assert [r is None for r in sent] == [True] * 5 + [False]
    assert gate.check(UserMessage(text="hi", channel="c", user="u"), 2, 101.9) is not None
    assert gate.check(UserMessage(text="hi", channel="c", user="u"), 2, 102.0) is None
