"""Running a child process for a tool: its own process group, stdout and stderr captured
together (capped, the middle shortened), killed with its group at a deadline."""

from __future__ import annotations

import contextlib
import os
import selectors
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

#: How long output is still read after a killed process's group is gone: a process that
#: left the group may hold the pipe open.
DRAIN_SECONDS = 2.0


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
    proc, output = start_process(argv, cwd, env)
    return watch_process(proc, output, timeout=timeout, cap=cap, cancel=cancel,
                         watchdog=watchdog)


def start_process(
    argv: list[str], cwd: str, env: Mapping[str, str] | None, *, stdin: int | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``argv`` in ``cwd`` in a new session (its own process group), stdin empty
    (or the file descriptor ``stdin``), stdout and stderr into one pipe; returns the
    process and the pipe's read end (for :func:`watch_process`). Raises ``OSError`` when
    it cannot start."""
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            stdin=subprocess.DEVNULL if stdin is None else stdin,
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
    return proc, read_fd


def watch_process(
    proc: subprocess.Popen[bytes],
    output: int,
    *,
    timeout: float,
    cap: int,
    cancel: threading.Event | None = None,
    watchdog: Callable[[int], str] | None = None,
) -> Finished:
    """Wait for ``proc`` (started by :func:`start_process`) and its ``output`` pipe, which
    this closes, as :func:`run_process` says."""
    buffer = CappedBuffer(cap)
    with _Waiter(proc, output, buffer) as waiter:
        deadline = time.monotonic() + timeout
        next_check = time.monotonic() + POLL_SECONDS
        stopped = ""
        # Background children may still hold the output open after the first process
        # ends: they share the deadline, so wait for the output's end, not only the exit.
        while waiter.running():
            now = time.monotonic()
            if now >= deadline:
                break
            if cancel is not None and cancel.is_set():
                stopped = "cancelled: the call was stopped"
                break
            waiter.wait(min(deadline - now, POLL_SECONDS))
            if watchdog is not None and time.monotonic() >= next_check:
                next_check = time.monotonic() + POLL_SECONDS
                if proc.poll() is None:
                    stopped = watchdog(proc.pid)
                    if stopped:
                        break
        timed_out = not stopped and waiter.running()
        if timed_out or stopped:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            # A process that left the group may still hold the pipe: read what arrives
            # a little longer, then report what came.
            end = time.monotonic() + DRAIN_SECONDS
            while waiter.reading and time.monotonic() < end:
                waiter.wait(end - time.monotonic())
    return Finished(proc.returncode, timed_out, buffer.text(), stopped)


class _Waiter:
    """Waits on a process's output pipe and its exit at once (a pidfd, where the kernel
    has them), reading the output into ``buffer``: a call ends the moment both are done,
    with no polling delay."""

    def __init__(self, proc: subprocess.Popen[bytes], read_fd: int,
                 buffer: CappedBuffer) -> None:
        self._proc = proc
        self._fd = read_fd
        self._buffer = buffer
        self._selector = selectors.DefaultSelector()
        self._selector.register(read_fd, selectors.EVENT_READ)
        self._pidfd: int | None = None
        with contextlib.suppress(AttributeError, OSError):
            self._pidfd = os.pidfd_open(proc.pid)
            self._selector.register(self._pidfd, selectors.EVENT_READ)
        self.reading = True

    def __enter__(self) -> _Waiter:
        return self

    def __exit__(self, *_: object) -> None:
        self._selector.close()
        os.close(self._fd)
        if self._pidfd is not None:
            os.close(self._pidfd)

    def running(self) -> bool:
        """Whether the output is still open or the process still runs."""
        return self.reading or self._proc.poll() is None

    def wait(self, seconds: float) -> None:
        """Wait at most ``seconds`` for output or the exit, reading what came."""
        if not self.reading and self._pidfd is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(seconds)
            return
        for key, _ in self._selector.select(max(seconds, 0.0)):
            if key.fd == self._pidfd:
                self._selector.unregister(key.fd)  # it exited: poll() reaps it
                continue
            try:
                chunk = os.read(self._fd, 65536)
            except OSError:
                chunk = b""
            if chunk:
                self._buffer.add(chunk)
            else:
                self._selector.unregister(self._fd)
                self.reading = False
