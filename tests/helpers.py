"""Small helpers shared by the tests (fixtures live in conftest.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

from actors.runtime import ask
from adapters.host import Host
from events.messages import Accepted, UserMessage


def say(host: Host, text: str, session_id: str = "", *, channel: str = "test",
        user: str = "user") -> str:
    """Send a user message to the inbox the way a connector does; return the session id
    the engine answered with (once the message is stored)."""
    accepted = ask(
        host.bus,
        host.subjects.inbox,
        UserMessage(text=text, channel=channel, session_id=session_id, user=user),
        Accepted,
        timeout=10,
    )
    return accepted.session_id


def wait_until(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Wait for an effect another actor produces asynchronously (``check`` turns true);
    fail naming ``what`` if it does not within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
