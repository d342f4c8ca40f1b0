"""One engine per namespace: a second is refused, naming the first (the file lock of a state
directory; the lease on a shared NATS server)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import pytest

from tests.helpers import wait_until
from tether.adapters.anthropic_provider import AnthropicProvider
from tether.adapters.config import Settings
from tether.adapters.engine_lease import EngineLease, holder_of
from tether.adapters.engine_lock import EngineLock, EngineRunning, lock_path, running_engine
from tether.adapters.fake_llm import FakeLLM
from tether.adapters.host import Host
from tether.adapters.nats_bus import NatsBus

HOLD = """
import sys, time
from tether.adapters.engine_lock import EngineLock
EngineLock(sys.argv[1], "ns").acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_a_second_engine_is_refused_until_the_first_dies(tmp_path: Path) -> None:
    state = str(tmp_path)
    first = subprocess.Popen([sys.executable, "-c", HOLD, state], stdout=subprocess.PIPE,
                             text=True, cwd=os.getcwd())
    try:
        assert first.stdout is not None and first.stdout.readline() == "held\n"
        with pytest.raises(EngineRunning) as refused:
            EngineLock(state, "ns").acquire()
        assert f"pid {first.pid}" in str(refused.value)
        assert (running_engine(state, "ns") or {}).get("pid") == first.pid
        EngineLock(state, "other").acquire().release()  # another namespace is another engine
    finally:
        os.kill(first.pid, signal.SIGKILL)  # however it dies, the lock goes with it
        first.wait()
    assert running_engine(state, "ns") is None
    lock = EngineLock(state, "ns").acquire()
    assert (running_engine(state, "ns") or {}).get("pid") == os.getpid()
    lock.release()
    assert os.path.exists(lock_path(state, "ns"))  # nobody deletes it


# --- the lease: one engine per namespace on a shared NATS server ----------------------------

HOLD_LEASE = """
import sys, time
from tether.adapters.engine_lease import EngineLease
from tether.adapters.nats_bus import NatsBus
EngineLease(NatsBus(sys.argv[1]), sys.argv[2], sys.argv[3], bucket=sys.argv[4],
            ttl=float(sys.argv[5])).acquire()
print("held", flush=True)
time.sleep(600)
"""


@pytest.fixture
def lease_bus(nats_url: str) -> Iterator[NatsBus]:
    """A client of the shared server (JetStream on); buckets a test made are removed."""
    bus = NatsBus(nats_url, name="lease-test")
    made: list[str] = []
    bus.made_buckets = made  # type: ignore[attr-defined]
    try:
        yield bus
    finally:
        for bucket in made:
            with contextlib.suppress(Exception):
                bus.call(lambda b=bucket: bus.js.delete_key_value(b))
        bus.close()


def _bucket(bus: NatsBus, namespace: str) -> str:
    bucket = f"lease_{namespace}"
    bus.made_buckets.append(bucket)  # type: ignore[attr-defined]
    return bucket


def _hold(nats_url: str, namespace: str, state: str, bucket: str,
          ttl: float) -> subprocess.Popen[str]:
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LEASE, nats_url, namespace, state,
                               bucket, str(ttl)], stdout=subprocess.PIPE, text=True,
                              cwd=os.getcwd())
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def _revision(bus: NatsBus, bucket: str, key: str) -> int:
    async def read() -> int:
        kv = await bus.js.key_value(bucket)
        revision: int = (await kv.get(key)).revision
        return revision

    result: int = bus.call(read)
    return result


def test_a_second_engine_sharing_the_namespace_is_refused_naming_the_holder(
        lease_bus: NatsBus, nats_url: str, namespace: str, tmp_path: Path) -> None:
    bucket = _bucket(lease_bus, namespace)
    first = EngineLease(lease_bus, namespace, str(tmp_path / "a"), bucket=bucket).acquire()
    other_bus = NatsBus(nats_url, name="elsewhere")  # as from another machine
    try:
        with pytest.raises(EngineRunning) as refused:
            EngineLease(other_bus, namespace, str(tmp_path / "b"), bucket=bucket).acquire()
        line = str(refused.value)
        assert "\n" not in line and f"namespace {namespace!r}" in line
        for part in (socket.gethostname(), f"pid {os.getpid()}", str(tmp_path / "a"),
                     "since "):
            assert part in line
        assert holder_of(other_bus, namespace, bucket) == first.holder
        # Another namespace is another engine.
        EngineLease(other_bus, namespace + "x", str(tmp_path / "b"), bucket=bucket
                    ).acquire().release()
        first.release()  # a clean stop gives it back at once
        assert holder_of(other_bus, namespace, bucket) is None
        second = EngineLease(other_bus, namespace, str(tmp_path / "b"), bucket=bucket).acquire()
        second.release()
    finally:
        first.release()
        other_bus.close()


def test_a_lease_is_kept_while_its_engine_lives_and_expires_when_it_dies(
        lease_bus: NatsBus, nats_url: str, namespace: str, tmp_path: Path) -> None:
    ttl = 1.5
    bucket = _bucket(lease_bus, namespace)
    holder = _hold(nats_url, namespace, str(tmp_path / "a"), bucket, ttl)
    try:
        first = _revision(lease_bus, bucket, namespace)
        wait_until(lambda: _revision(lease_bus, bucket, namespace) > first + 1,
                   "two refreshes", timeout=ttl * 3)  # outlives its first TTL, refreshed
        with pytest.raises(EngineRunning, match=f"pid {holder.pid}"):
            EngineLease(lease_bus, namespace, str(tmp_path / "b"), bucket=bucket).acquire()
    finally:
        os.kill(holder.pid, signal.SIGKILL)  # dies without giving it back
        holder.wait()
    wait_until(lambda: holder_of(lease_bus, namespace, bucket) is None, "the lease to expire",
               timeout=ttl * 4)
    lease = EngineLease(lease_bus, namespace, str(tmp_path / "b"), bucket=bucket).acquire()
    assert (holder_of(lease_bus, namespace, bucket) or {}).get("pid") == os.getpid()
    lease.release()


def test_the_lease_of_a_dead_engine_of_this_state_directory_is_taken_at_once(
        lease_bus: NatsBus, nats_url: str, namespace: str, tmp_path: Path) -> None:
    bucket = _bucket(lease_bus, namespace)
    state = str(tmp_path / "state")
    holder = _hold(nats_url, namespace, state, bucket, 60.0)
    os.kill(holder.pid, signal.SIGKILL)  # e.g. `tether serve` killed; its file lock went too
    holder.wait()
    assert (holder_of(lease_bus, namespace, bucket) or {}).get("pid") == holder.pid
    lease = EngineLease(lease_bus, namespace, state, bucket=bucket).acquire()
    assert (holder_of(lease_bus, namespace, bucket) or {}).get("pid") == os.getpid()
    lease.release()


def test_an_engine_on_a_shared_server_holds_the_namespace(
        make_settings: Callable[..., Settings], fake_llm: Callable[[str], FakeLLM],
        tmp_path: Path) -> None:
    llm = fake_llm("responses: []\n")
    provider = AnthropicProvider(None, llm.base_url)
    settings = make_settings(anthropic_base_url=llm.base_url)
    first = Host(settings, provider=provider).start()
    try:
        assert first.lease is not None and not first.lease.lost
        elsewhere = msgspec.structs.replace(settings, state_dir=str(tmp_path / "elsewhere"))
        with pytest.raises(EngineRunning) as refused:
            Host(elsewhere, provider=provider).start()
        assert settings.state_dir in str(refused.value)
    finally:
        first.stop()
    Host(elsewhere, provider=provider).start().stop()  # given back at the first's stop
