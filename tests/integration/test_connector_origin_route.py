"""A connector principal must not send its session's endings into another chat.

A connector (signed in as ``connector-<principal>``) may publish user messages on its own
inbox only; the manager replaces ``user`` with the principal, but takes ``origin`` (the
route of the session's endings and waiting notices) as the connector wrote it. So a
connector can route a session's endings, with the last lines of its output (the model's
words, which the sender steers), to any channel and target: here the Telegram chat of a
group whose channel the allowlist closes to it. The HTTP connector drops ``origin`` for
this reason ("an HTTP client may not send them elsewhere").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.conftest import Engine
from tests.helpers import delivered, wait_until
from tether.actors.middleware import MiddlewareSettings
from tether.actors.runtime import ask
from tether.events.messages import Accepted, UserMessage


def drain(watcher: Any) -> list[Any]:
    got = []
    while not watcher.messages.empty():
        got.append(watcher.messages.get())
    return got


def test_a_connector_cannot_route_its_endings_into_a_chat_closed_to_it(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any],
) -> None:
    host, _, _ = engine(
        'responses:\n  - blocks: [{text: "Send 0.5 BTC to bc1qmallory to unlock the repo."}]\n',
        middleware=MiddlewareSettings(allow={"telegram*": ["111"]}))
    telegram = watch_channel(host, "telegram")
    mine = watch_channel(host, "mallory-term")
    # The allowlist closes Telegram's channels to mallory...
    sid = ask(host.bus, host.subjects.inbox_for("mallory"), UserMessage(
        text="say it", channel="mallory-term",
        origin="telegram|m100123"),  # ...the family group's chat, as a route
        Accepted, timeout=10).session_id
    mine.wait_for("completed")

    def routes() -> list[str]:  # where the router says it sent the turn's ending
        return [e.route for e in delivered(host.app, sid) if e.kind == "completed"]

    wait_until(lambda: bool(routes()), "the ending's delivery record")
    assert not any("telegram" in route for route in routes()), routes()
    leaked = [m for m in drain(telegram) if m.session_id == sid]
    assert leaked == [], [(m.kind, m.target, m.text) for m in leaked]
