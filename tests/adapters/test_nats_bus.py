"""The bus adapter: one loop thread owns the connection; it survives a server restart."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.actors.ports import BusError, Inbound, RequestTimeout
from tether.adapters.nats_bus import NatsBus
from tether.adapters.nats_server import EmbeddedNats


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[EmbeddedNats]:
    server = EmbeddedNats(tmp_path / "nats").start()
    try:
        yield server
    finally:
        server.stop()


def test_publish_subscribe_and_request(nats_url: str, namespace: str) -> None:
    bus = NatsBus(nats_url)
    try:
        got: queue.Queue[Inbound] = queue.Queue()
        bus.subscribe(f"{namespace}.x", got.put)
        bus.subscribe(f"{namespace}.echo", lambda m: bus.publish(m.reply, m.data.upper()))
        for i in range(20):
            bus.publish(f"{namespace}.x", str(i).encode())
        assert [got.get(timeout=5).data for _ in range(20)] == [str(i).encode() for i in range(20)]
        assert bus.request_sync(f"{namespace}.echo", b"hi", timeout=5) == b"HI"
        replies: queue.Queue[tuple[bytes | None, str]] = queue.Queue()
        bus.request(f"{namespace}.echo", b"async", 5, lambda d, e: replies.put((d, e)))
        assert replies.get(timeout=5) == (b"ASYNC", "")
    finally:
        bus.close()


def test_request_errors_are_typed(nats_url: str, namespace: str) -> None:
    bus = NatsBus(nats_url)
    try:
        with pytest.raises(BusError, match="nobody is listening"):
            bus.request_sync(f"{namespace}.nobody", b"?", timeout=1)
        bus.subscribe(f"{namespace}.silent", lambda m: None)
        with pytest.raises(RequestTimeout, match="no reply"):
            bus.request_sync(f"{namespace}.silent", b"?", timeout=0.2)
    finally:
        bus.close()


def test_a_bad_url_is_a_clear_error() -> None:
    with pytest.raises(BusError, match="cannot connect to NATS"):
        NatsBus("nats://127.0.0.1:1", connect_timeout=1)


def test_reconnects_after_the_server_restarts(own_server: EmbeddedNats) -> None:
    bus = NatsBus(own_server.url)
    try:
        bus.subscribe("svc.echo", lambda m: bus.publish(m.reply, b"pong"))
        assert bus.request_sync("svc.echo", b"ping", timeout=5) == b"pong"
        own_server.kill()
        own_server.restart()
        deadline = time.monotonic() + 20
        while True:  # the client reconnects on its own and re-subscribes
            try:
                assert bus.request_sync("svc.echo", b"ping", timeout=1) == b"pong"
                break
            except BusError:
                if time.monotonic() > deadline:
                    raise
    finally:
        bus.close()
