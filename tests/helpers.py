"""Small helpers shared by the tests (fixtures live in conftest.py)."""

from __future__ import annotations

import contextlib
import datetime as dt
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tether.actors.runtime import ask
from tether.adapters.host import Host
from tether.adapters.sandbox import SandboxReport, probe
from tether.events.application import TetherApplication
from tether.events.deliveries import Deliveries, deliveries_uuid
from tether.events.messages import Accepted, UserMessage

TWO_REPLIES = 'responses:\n  - blocks: [{text: "one"}]\n  - blocks: [{text: "two"}]\n'


def after_one_turn(engine: Callable[..., Any], watch_channel: Callable[..., Any],
                   script: str = TWO_REPLIES) -> tuple[Host, Any, str]:
    """An engine whose model plays ``script`` (by default it answers "one" then "two"),
    and a session of channel "test" that had its first turn: (host, the channel's
    watcher, session id)."""
    host = engine(script).host
    test = watch_channel(host, "test")
    sid = say(host, "hello")
    test.wait_for("completed")
    return host, test, sid


def propose(bus: Any, host: Host, workspace: Path, session_id: str, call_id: str, tool: str,
            tool_input: dict[str, Any], timeout: float = 10.0, **fields: Any) -> Any:
    """Ask ``host``'s gatekeeper over ``bus`` about a call, as a program outside the
    engine would (``fields``: more of the proposal, e.g. ``mode``); its Verdict."""
    from tether.actors.gatekeeper.deny_lists import action_hash
    from tether.events.messages import ToolProposal, Verdict

    return ask(bus, host.subjects.gatekeeper, ToolProposal(
        session_id=session_id, call_id=call_id, tool=tool, input=tool_input,
        workspace=str(workspace), action_hash=action_hash(tool, tool_input), **fields),
        Verdict, timeout=timeout)


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


class MonotonicClock:
    """A monotonic clock for code that takes one (``clock=``): it moves when a test sets
    or advances ``now``."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def wait_until(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Wait for an effect another actor produces asynchronously (``check`` turns true);
    fail naming ``what`` if it does not within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def tether_cli(host: Host, nats_url: str) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``tether ARGS...`` in a subprocess against ``host`` (its bus, namespace, state
    and store), as a user at another terminal would."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "ANTHROPIC_"))}
    env.update({"TETHER_NATS_URL": nats_url, "TETHER_NAMESPACE": host.subjects.namespace,
                "TETHER_STATE_DIR": host.settings.state_dir,
                "TETHER_DATABASE_URL": host.settings.database_url})

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tether.adapters.cli", *args], env=env,
                              capture_output=True, text=True, timeout=60)

    return run


@dataclass(frozen=True)
class Hit:
    """One connection a listener accepted: when, on which port, what it received."""

    at: dt.datetime
    port: int
    data: bytes


class Listener:
    """A loopback TCP listener recording every connection and its bytes. Each connection
    is read for at most half a second (a reverse shell gets EOF and ends)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port: int = self.sock.getsockname()[1]
        self.hits: list[Hit] = []
        self._reading = 0
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"listener-{self.port}",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            at = dt.datetime.now(dt.UTC)
            with self._lock:
                self._reading += 1
            threading.Thread(target=self._read, args=(conn, at), daemon=True).start()

    def _read(self, conn: socket.socket, at: dt.datetime) -> None:
        """Read until the peer is quiet for 0.15 s, ends, or half a second passed."""
        data = b""
        conn.settimeout(0.15)
        deadline = time.monotonic() + 0.5
        with conn:
            while time.monotonic() < deadline and len(data) < 65536:
                try:
                    chunk = conn.recv(4096)
                except OSError:
                    break
                if not chunk:
                    break
                data += chunk
        with self._lock:
            self.hits.append(Hit(at, self.port, data))
            self._reading -= 1
            self._lock.notify_all()

    def settle(self) -> None:
        """Wait for the connections being read (each ends within half a second)."""
        with self._lock:
            self._lock.wait_for(lambda: self._reading == 0, timeout=2.0)

    def since(self, index: int) -> list[Hit]:
        with self._lock:
            return self.hits[index:]

    def count(self) -> int:
        with self._lock:
            return len(self.hits)

    @property
    def connections(self) -> int:
        """How many connections reached it (each read to its end)."""
        self.settle()
        return self.count()

    @property
    def received(self) -> bytes:
        """Every byte that reached it, in order."""
        self.settle()
        with self._lock:
            return b"".join(hit.data for hit in self.hits)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


def need_sandbox() -> SandboxReport:
    """The sandbox's probe report when bubblewrap is usable here. Where it is not, the
    test is skipped with the reason, or failed under CI (``.ci/run`` installs it)."""
    report = probe()
    if report.usable:
        return report
    if os.environ.get("CI"):
        pytest.fail(f"bubblewrap is required in CI (.ci/run installs it): {report.reason}")
    pytest.skip(f"no sandbox here: {report.reason}")


def need_sealing(sealed: bool, what: str) -> None:
    """Go on only where placeholders were sealed (immutable: root, on a file system with
    the flag), which ``what`` needs. Elsewhere the test is skipped with the reason, or
    failed under CI, which runs as root on such a file system."""
    if sealed:
        return
    reason = f"{what}: placeholders cannot be sealed here (not root, or no immutable flag)"
    if os.environ.get("CI"):
        pytest.fail(f"CI runs as root on ext4, where they must be: {reason}")
    pytest.skip(reason)


TETHER = [sys.executable, "-m", "tether.adapters.cli"]
"""The command line, run by this interpreter."""


class Serve:
    """A `tether serve` child process."""

    def __init__(self, env: dict[str, str], log: Path, cwd: Path | None = None,
                 command: Sequence[str] = ("serve",)) -> None:
        self.log = log.open("a")
        self.proc = subprocess.Popen(
            [*TETHER, *command], env=env, stdout=subprocess.PIPE, stderr=self.log, text=True,
            cwd=cwd,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # blocks until the engine is up (or died)
        if "serving" not in line:
            self.proc.kill()
            raise AssertionError(f"tether serve did not start: {line!r}; see {log}")

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=30)
        self.log.close()
        return code


def engine_env(tmp_path: Path, nats_url: str, namespace: str, workspace: Path,
               model_url: str) -> dict[str, str]:
    """The environment of a ``tether`` process a test starts: the test's NATS namespace,
    state, workspace, rules and home, the model stand-in at ``model_url``, titles off (a
    background title call would take a scripted answer), and nothing of the caller's
    ``TETHER_*`` or ``ANTHROPIC_*`` settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "ANTHROPIC_"))}
    env.update({
        "TETHER_NATS_URL": nats_url, "TETHER_NAMESPACE": namespace,
        "TETHER_STATE_DIR": str(tmp_path / "state"), "TETHER_WORKSPACE": str(workspace),
        "TETHER_RULES_DIR": str(tmp_path / "rules"), "TETHER_TITLES": "false",
        "ANTHROPIC_BASE_URL": model_url, "HOME": str(tmp_path / "home"),
    })
    return env


def notices_settled(host: Host) -> bool:
    """The notice outbox has read the whole log and every notice it planned is delivered
    (it lags the log while it settles, so "nothing pending" alone can come too early)."""
    return host.outbox.position() >= host.app.max_notification_id() and not (
        host.outbox.pending())


def delivered(app: TetherApplication, session_id: str) -> list[Deliveries.Delivered]:
    """The router's delivery records of a session's notices, oldest first."""
    return [e for e in app.repository.event_store.get(deliveries_uuid(session_id))
            if isinstance(e, Deliveries.Delivered)]


@contextlib.contextmanager
def wake_webhook() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A local HTTP server taking the router's wake-webhook POSTs: its URL, and the JSON
    bodies posted to it so far."""
    posted: list[dict[str, Any]] = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            posted.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hooks/wake", posted
    finally:
        server.shutdown()
