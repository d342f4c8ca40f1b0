"""The lifecycle's transition table."""

from __future__ import annotations

import pytest

from tether.events.lifecycle import STATUSES, allowed, refusal


@pytest.mark.parametrize(("current", "new"), [
    ("starting", "running"), ("starting", "failed"), ("starting", "killed"),
    ("running", "completed"), ("running", "failed"), ("running", "killed"),
    ("completed", "running"), ("failed", "running"), ("killed", "running"),
])
def test_allowed_transitions(current: str, new: str) -> None:
    assert allowed(current, new) and refusal(current, new) is None


@pytest.mark.parametrize(("current", "new"), [
    ("starting", "completed"), ("running", "starting"), ("running", "running"),
    ("killed", "completed"), ("completed", "failed"), ("failed", "killed"),
    ("killed", "killed"),
])
def test_refused_transitions_say_why(current: str, new: str) -> None:
    assert not allowed(current, new)
    assert refusal(current, new) == f"a {current} session cannot become {new}"


def test_unknown_statuses_are_refused() -> None:
    assert refusal("running", "waiting") == (
        f"'waiting' is not a session status (one of {', '.join(STATUSES)})")
    assert not allowed("paused", "running")
