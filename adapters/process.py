"""Running a child process for a tool: its own process group, stdout and stderr captured
together (capped, the middle shortened), killed with its group at a deadline."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
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
    """A finished (or killed) process: its exit code, its capped, combined output, and why
    it was killed (``timed_out``, or ``stopped``: cancelled or over a limit, with a line
    saying which)."""

    code: int
    timed_out: bool
    output: str
    stopped: str = ""


#: How often a running process is checked for cancellation and its watchdog asked.
POLL_SECONDS = 0.05


def run_process(
    argv: list[str],
    cwd: str,
    env: Mapping[str, str] | None,
    *,
    timeout: float,
    cap: int,
    cancel: threading.Event | None = None,
    watchdog: Callable[[int], str] | None = None,
) -> Finished:
    """Run ``argv`` in ``cwd`` in its own process group, capturing stdout and stderr
    together (at most ``cap`` bytes kept, the middle shortened).

    The whole group is killed when ``timeout`` seconds run out, when ``cancel`` is set, or
    when ``watchdog(pid)`` (asked every :data:`POLL_SECONDS`) returns a reason. Raises
    ``OSError`` when it cannot start.
    """
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
    stopped = ""
    # Background children may still hold the output open after the first process ends:
    # they share the deadline, so wait for the output's end, not only the process's.
    while reader.is_alive() or proc.poll() is None:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        if cancel is not None and cancel.is_set():
            stopped = "cancelled: the call was stopped"
            break
        if reader.is_alive():
            reader.join(min(left, POLL_SECONDS))
        else:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(min(left, POLL_SECONDS))
        if watchdog is not None and proc.poll() is None:
            stopped = watchdog(proc.pid)
            if stopped:
                break
    timed_out = not stopped and (reader.is_alive() or proc.poll() is None)
    if timed_out or stopped:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        # A process that left the group may still hold the pipe: the daemon reader then
        # ends (and closes it) when that process does; report what arrived so far.
        reader.join(2.0)
    return Finished(proc.returncode, timed_out, buffer.text(), stopped)
