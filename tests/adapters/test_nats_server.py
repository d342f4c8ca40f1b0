"""The embedded nats-server: real processes, real nats-py clients; never the shared :4222."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from tether.adapters.config import Settings
from tether.adapters.nats_server import (
    EmbeddedNats,
    NatsServerError,
    find_nats_server,
    nats_server_version,
)

SHARED_PORT = 4222


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def server(tmp_path: Path) -> Iterator[EmbeddedNats]:
    srv = EmbeddedNats(tmp_path / "nats")
    with srv:
        assert srv.port != SHARED_PORT
        yield srv


def test_packaged_binary_reports_pinned_version() -> None:
    assert nats_server_version(find_nats_server()).startswith("2.15.")


def test_publish_subscribe_and_jetstream(server: EmbeddedNats) -> None:
    assert server.url == f"nats://127.0.0.1:{server.port}"
    assert server.running and server.version is not None

    async def main() -> None:
        nc = await nats.connect(server.url)
        try:
            sub = await nc.subscribe("t.hello")
            await nc.publish("t.hello", b"hi")
            msg = await sub.next_msg(timeout=2)
            assert msg.data == b"hi"
            js = nc.jetstream()
            info = await js.account_info()
            assert info.streams == 0
            await js.add_stream(name="T", subjects=["t.js.>"])
            ack = await js.publish("t.js.one", b"stored")
            assert ack.seq == 1
        finally:
            await nc.close()

    asyncio.run(main())
    log_text = Path(server.log_path).read_text()
    assert "Server is ready" in log_text
    assert server.log_path == os.path.join(server.data_dir, "nats-server.log")


def test_kill_restart_same_port_and_client_reconnects(server: EmbeddedNats) -> None:
    port, old_pid = server.port, server.pid
    assert old_pid is not None

    async def main() -> None:
        reconnected = asyncio.Event()
        disconnected = asyncio.Event()

        async def on_reconnect() -> None:
            reconnected.set()

        async def on_disconnect() -> None:
            disconnected.set()

        nc = await nats.connect(
            server.url,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.1,
            reconnected_cb=on_reconnect,
            disconnected_cb=on_disconnect,
        )
        try:
            js = nc.jetstream()
            await js.add_stream(name="KEEP", subjects=["keep.>"])
            await js.publish("keep.a", b"before")
            sub = await nc.subscribe("t.flow")

            server.kill()
            assert not pid_alive(old_pid)
            await asyncio.wait_for(disconnected.wait(), 5)

            await asyncio.to_thread(server.restart)
            assert server.port == port and server.pid != old_pid
            await asyncio.wait_for(reconnected.wait(), 10)

            await nc.publish("t.flow", b"after")
            msg = await sub.next_msg(timeout=2)
            assert msg.data == b"after"
            # same data dir: the JetStream stream and its message survived the kill
            stored = await js.get_msg("KEEP", 1)
            assert stored.data == b"before"
        finally:
            await nc.close()

    asyncio.run(main())


def test_stop_leaves_no_process(tmp_path: Path) -> None:
    srv = EmbeddedNats(tmp_path / "nats").start()
    pid = srv.pid
    assert pid is not None and pid_alive(pid)
    srv.stop()
    assert not pid_alive(pid)
    assert srv.pid is None and not srv.running
    srv.stop()  # stopping twice is harmless
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", srv.port or 0), timeout=1).close()


def test_context_manager_and_from_settings(tmp_path: Path) -> None:
    settings = Settings(state_dir=str(tmp_path / "state"))
    srv = EmbeddedNats.from_settings(settings)
    with srv:
        pid = srv.pid
        assert pid is not None
        assert srv.data_dir == str(tmp_path / "state" / "nats")
    assert not pid_alive(pid)


def test_missing_binary_fails_clearly(tmp_path: Path) -> None:
    srv = EmbeddedNats(tmp_path / "nats", binary=str(tmp_path / "no-such-nats-server"))
    with pytest.raises(NatsServerError, match="not found or not executable"):
        srv.start()


def test_broken_binary_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(NatsServerError, match="--version failed"):
        EmbeddedNats(tmp_path / "nats", binary="false").start()


def test_port_in_use_reports_log_lines(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        srv = EmbeddedNats(tmp_path / "nats", port=port)
        with pytest.raises(NatsServerError, match="address already in use") as info:
            srv.start()
        assert "last lines of" in str(info.value)
        assert not srv.running


def test_other_version_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    real = find_nats_server()
    wrapper = tmp_path / "nats-server-other"
    wrapper.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "nats-server: v2.99.0"; exit 0; fi\n'
        f'exec "{real}" "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    caplog.set_level(logging.WARNING, logger="tether.adapters.nats_server")
    with EmbeddedNats(tmp_path / "nats", binary=str(wrapper)) as srv:
        assert srv.version == "2.99.0" and srv.running
    assert "2.99.0" in caplog.text and "2.15.x" in caplog.text


AUTH = """authorization {
  users = [ {user: "only", password: "secret-enough-for-a-test"} ]
}
"""


def test_config_is_owner_only_and_applies_after_a_restart(tmp_path: Path) -> None:
    async def login(url: str, **auth: str) -> bool:
        try:
            nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0,
                                    connect_timeout=2, **auth)
        except nats.errors.Error:
            return False
        await nc.close()
        return True

    with EmbeddedNats(tmp_path / "nats", config=AUTH) as srv:
        assert srv.port != SHARED_PORT
        assert stat.S_IMODE(os.stat(srv.config_path).st_mode) == 0o600
        for _ in range(2):  # the first start, then a restart on the same port
            assert not asyncio.run(login(srv.url))
            assert asyncio.run(login(srv.url, user="only", password="secret-enough-for-a-test"))
            srv.kill()
            srv.restart()
    with EmbeddedNats(tmp_path / "plain") as plain:  # no config: no file, anyone may connect
        assert asyncio.run(login(plain.url))
        assert not os.path.exists(plain.config_path)
