"""The HTTP connector: post messages, follow a session as server-sent events, metrics."""

from __future__ import annotations

import json
import queue
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from actors.middleware import MiddlewareSettings
from adapters.anthropic_provider import AnthropicProvider
from adapters.config import Settings
from adapters.fake_llm import FakeLLM
from adapters.host import Host
from adapters.http_api import HttpApi
from projections.prometheus import prometheus_text
from tests.helpers import wait_until


@pytest.fixture
def api(fake_llm: Callable[[str], FakeLLM], make_host: Callable[..., Host],
        ) -> Iterator[tuple[HttpApi, Host]]:
    host = make_host(fake_llm("responses: []\n"),
                     middleware=MiddlewareSettings(allow={"locked": ["ana"]}))
    server = HttpApi(host.bus, host.subjects, heartbeat=0.5,
                     metrics=lambda: prometheus_text(host.metrics.snapshot())).start()
    yield server, host
    server.stop()


def post(url: str, body: Any) -> tuple[int, dict[str, Any]]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(f"{url}/messages", data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


class EventStream:
    """Reads a server-sent event stream on a thread."""

    def __init__(self, url: str) -> None:
        self.events: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
        self.response = urllib.request.urlopen(url, timeout=20)
        self.channel = self.response.headers["X-Tether-Channel"]
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        kind, data = "", ""
        try:
            for raw in self.response:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: "):
                    data = line[6:]
                elif not line and kind:
                    self.events.put((kind, json.loads(data)))
                    kind, data = "", ""
        except (OSError, ValueError):
            pass

    def until(self, kind: str) -> list[tuple[str, dict[str, Any]]]:
        seen = []
        while True:
            got = self.events.get(timeout=20)
            seen.append(got)
            if got[0] == kind:
                return seen

    def close(self) -> None:
        self.response.close()


def test_post_then_follow_with_catch_up_and_live_events(
    api: tuple[HttpApi, Host],
) -> None:
    server, host = api
    status, answer = post(server.url, {"text": "first question"})
    assert status == 202
    sid = answer["session_id"]
    wait_until(lambda: any(type(e).__name__ == "TurnCompleted"
                           for e in host.app.session_events(sid)), "the first turn")
    wait_until(lambda: not host.outbox.pending(), "its notices")

    stream = EventStream(f"{server.url}/sessions/first-question/events?channel=web1")
    assert stream.channel == "web1"
    first = stream.until("catchup")  # the reply it missed
    assert first[-1][1]["session_id"] == sid and first[-1][1]["text"]

    status, _ = post(server.url, {"text": "and a second", "session_id": sid})
    assert status == 202
    live = stream.until("completed")
    kinds = [k for k, _ in live]
    assert "stream" in kinds and "reply" in kinds
    stream.close()


def test_refusals_have_fitting_statuses(api: tuple[HttpApi, Host]) -> None:
    server, _ = api
    assert post(server.url, b"not json")[0] == 400
    assert post(server.url, {"channel": "http"})[0] == 400  # no text
    status, body = post(server.url, {"text": "hi", "session_id": "nope"})
    assert (status, body["error"]) == (404, "unknown_session")
    status, body = post(server.url, {"text": "hi", "channel": "locked", "user": "bo"})
    assert (status, body["error"]) == (403, "not_allowed")
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"{server.url}/sessions/nope/events", timeout=10)
    assert missing.value.code == 404


def test_metrics_and_sessions_are_served(api: tuple[HttpApi, Host]) -> None:
    server, host = api
    _, answer = post(server.url, {"text": "count me"})
    wait_until(lambda: host.metrics.snapshot().sessions_launched == 1, "the metrics view")
    with urllib.request.urlopen(f"{server.url}/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    assert "tether_sessions_launched_total 1" in text
    with urllib.request.urlopen(f"{server.url}/sessions", timeout=10) as response:
        listed = json.loads(response.read())["sessions"]
    assert [s["session_id"] for s in listed] == [answer["session_id"]]


def test_only_a_serving_host_starts_the_http_connector(
    fake_llm: Callable[[str], FakeLLM], make_settings: Callable[..., Settings],
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    llm = fake_llm("responses: []\n")
    settings = make_settings(anthropic_base_url=llm.base_url, http_port=port)
    provider = AnthropicProvider(None, llm.base_url)
    chat = Host(settings, provider=provider).start()  # tether chat, tether demo
    try:
        assert not hasattr(chat, "http")
        serving = Host(settings, provider=provider, serve_http=True).start()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health",
                                        timeout=10) as response:
                assert json.loads(response.read()) == {"ok": True}
            assert serving.http.url == f"http://127.0.0.1:{port}"
        finally:
            serving.stop()
    finally:
        chat.stop()
