"""Small helpers shared by the tests (fixtures live in conftest.py)."""

from __future__ import annotations

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
