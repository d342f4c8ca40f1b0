"""One engine per namespace and state directory, enforced by a file lock.

The running engine holds an exclusive ``flock`` on ``<state_dir>/engine-<namespace>.lock``
and writes who it is there (pid, command, since when). A second engine for the same
namespace and state directory cannot take it and refuses to start, naming the holder.
The kernel drops the lock when the holder dies, however it dies; the file stays (no
process deletes a file another may hold).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import sys
from typing import Any


class EngineRunning(Exception):
    """Another engine holds the namespace's lock; ``holder`` says who (may be empty)."""

    def __init__(self, message: str, holder: dict[str, Any]) -> None:
        super().__init__(message)
        self.holder = holder


def lock_path(state_dir: str, namespace: str) -> str:
    """The namespace's lock file."""
    return os.path.join(state_dir, f"engine-{namespace}.lock")


class EngineLock:
    """The lock of ``namespace`` in ``state_dir``: :meth:`acquire`, then :meth:`release`."""

    def __init__(self, state_dir: str, namespace: str) -> None:
        self.path = lock_path(state_dir, namespace)
        self.namespace = namespace
        self._fd = -1

    def acquire(self) -> EngineLock:
        """Take the lock, or raise :class:`EngineRunning` naming its holder."""
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(fd)
            os.close(fd)
            raise EngineRunning(
                f"an engine already runs for namespace {self.namespace!r} with this state "
                f"directory ({_describe(holder)}); stop it first, or talk to it "
                "(`tether chat --remote`)", holder) from None
        me = {"pid": os.getpid(), "command": " ".join(sys.argv[:3]) or "tether",
              "since": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
        data = json.dumps(me).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Let another engine start (the file stays)."""
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


def running_engine(state_dir: str, namespace: str) -> dict[str, Any] | None:
    """Who holds the namespace's lock now, or None when no engine runs."""
    try:
        fd = os.open(lock_path(state_dir, namespace), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read(fd)
        os.close(fd)
        return holder
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
    return None


def _read(fd: int) -> dict[str, Any]:
    try:
        value = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _describe(holder: dict[str, Any]) -> str:
    if not holder:
        return "its holder did not say who it is"
    return (f"pid {holder.get('pid', '?')}, `{holder.get('command', '?')}`, since "
            f"{holder.get('since', '?')}")
