"""Running a child process for a tool: its own process group, stdout and stderr captured
together (capped, the middle shortened), killed with its group at a deadline."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from typing import NamedTuple


class CappedBuffer:
    """Keeps the first and last ``cap // 2`` bytes of a stream and counts the rest."""

    def __init__(self, cap: int) -> None:
        self._half = max(cap // 2, 1)
        self._head = bytearray()
        self._tail = bytearray()
        self._lock = threading.Lock()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        with self._lock:
            self._add(chunk)

    def _add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self._half - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self._tail += chunk
            if len(self._tail) > self._half:
                del self._tail[: len(self._tail) - self._half]

    def text(self) -> str:
        with self._lock:
            head_bytes, tail_bytes, total = bytes(self._head), bytes(self._tail), self.total
        head = head_bytes.decode("utf-8", errors="replace")
        tail = tail_bytes.decode("utf-8", errors="replace")
        omitted = total - len(head_bytes) - len(tail_bytes)
        if omitted > 0:
            return f"{head}\n[... {omitted} bytes of output omitted ...]\n{tail}"
        return head + tail


def _drain(fd: int, buffer: CappedBuffer) -> None:
    """Read ``fd`` to its end into ``buffer``, then close it."""
    try:
        while chunk := os.read(fd, 65536):
            buffer.add(chunk)
    except OSError:
        pass
    finally:
        os.close(fd)


class Finished(NamedTuple):
    """A finished (or killed) process: its exit code and its capped, combined output."""

    code: int
    timed_out: bool
    output: str



def run_process(
    argv: list[str], cwd: str, env: Mapping[str, str] | None, *, timeout: float, cap: int
) -> Finished:
    """Run ``argv`` in ``cwd`` in its own process group, capturing stdout and stderr
    together (at most ``cap`` bytes kept, the middle shortened); killed with its whole
    group when ``timeout`` seconds run out. Raises ``OSError`` when it cannot start."""
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=write_fd,
            stderr=write_fd,
            start_new_session=True,
            env=env,
        )
    except OSError:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)

    buffer = CappedBuffer(cap)
    reader = threading.Thread(target=_drain, args=(read_fd, buffer), daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    timed_out = False
    try:
        proc.wait(timeout=timeout)
        # Background children may still hold the output open; they share the deadline.
        reader.join(max(deadline - time.monotonic(), 0.0))
        timed_out = reader.is_alive()
    except subprocess.TimeoutExpired:
        timed_out = True
    if timed_out:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        # A process that left the group may still hold the pipe: the daemon reader then
        # ends (and closes it) when that process does; report what arrived so far.
        reader.join(2.0)
    return Finished(proc.returncode, timed_out, buffer.text())
