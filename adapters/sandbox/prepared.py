"""A sandbox built ahead of its command.

Building a sandbox (bwrap making the namespaces and a mount per protected path) is most of
a short call's cost, and on cgroup v1 so is joining the call's pids cgroup (the write to
``cgroup.procs`` waits for an RCU grace period: 5 to 20 ms on these machines). A
:class:`Prepared` sandbox does both before its command is known: bwrap's command is a
shell that sources its standard input, a pipe this process holds; it waits in ``/``, so
an idle sandbox holds no folder of the workspace. :meth:`Prepared.start` writes the call's
script there: into the workspace, its environment, standard input back to ``/dev/null``,
then ``exec`` of the command (shell-quoted). The shell's environment is empty
(``--clearenv``) until the script sets it.

A prepared sandbox runs one command. It is started on one long-lived thread: bwrap's
``--die-with-parent`` follows the *thread* that started it, which must outlive the call.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor

from tether.adapters.process import start_process

# The shell joins the cgroup itself before it execs bwrap, so nothing bwrap starts can be
# outside it (a parent writing the child's pid afterwards would race the first fork).
_JOIN = 'echo $$ > "$0" && exec "$@"'
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

_spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tether-sandbox-prepare")


def _unescape(field: bytes) -> str:
    """A mountinfo path: space, tab, newline and backslash come as octal escapes."""
    return os.fsdecode(re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m[1], 8)]), field))


def in_background(work: Callable[[], None]) -> Future[None]:
    """Run ``work`` on the preparing thread: a sandbox it starts lives as long as needed."""
    return _spawner.submit(work)


def script(command: list[str], env: Mapping[str, str], cwd: str) -> bytes:
    """The script a prepared sandbox's shell runs: into ``cwd``, ``env`` exported (names a
    shell cannot set are left out), standard input back to ``/dev/null``, ``command``
    exec'd."""
    lines = [f"cd -- {shlex.quote(cwd)} || exit 126", "exec </dev/null"]
    lines += [f"export {key}={shlex.quote(value)}" for key, value in env.items()
              if _NAME.match(key)]
    lines.append("exec " + shlex.join(command))
    # Names and values that are not UTF-8 reach Python as surrogate escapes: back to bytes.
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")


class Prepared:
    """bwrap with ``options``, waiting for its command (see the module's contract);
    ``procs``: the ``cgroup.procs`` of the cgroup to join first ("" for none)."""

    def __init__(self, bwrap: str, options: list[str], procs: str = "") -> None:
        argv = [bwrap, *options, "--clearenv", "--", "/bin/sh", "-c", ". /dev/stdin"]
        if procs:
            argv = ["/bin/sh", "-c", _JOIN, procs, *argv]
        read_end, self._input = os.pipe()
        try:
            self.proc, self.output = start_process(argv, "/", {}, stdin=read_end)
        except OSError:
            os.close(self._input)
            raise
        finally:
            os.close(read_end)

    def start(
        self, command: list[str], env: Mapping[str, str], cwd: str
    ) -> tuple[subprocess.Popen[bytes], int]:
        """Run ``command`` with ``env`` in ``cwd``; returns the process and its output pipe (see
        :func:`adapters.process.watch_process`). Raises ``OSError`` when the sandbox is
        gone (it failed to build, or was killed): then nothing ran."""
        if self.proc.poll() is not None:
            self.discard()
            raise OSError(f"the prepared sandbox ended before its command (exit code "
                          f"{self.proc.returncode})")
        try:
            view = memoryview(script(command, env, cwd))
            while view:
                view = view[os.write(self._input, view):]
        except BaseException:
            self.discard()
            raise
        os.close(self._input)
        self._input = -1
        return self.proc, self.output

    def mounted(self) -> set[str] | None:
        """The mount points the waiting sandbox has now (None where it cannot be read): a
        path unlinked on the host since it was built has lost its mount there."""
        try:
            with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children",
                      encoding="ascii") as handle:
                child = handle.read().split()[0]
            with open(f"/proc/{child}/mountinfo", "rb") as handle:
                lines = handle.read().splitlines()
        except (OSError, IndexError):
            return None
        points = set()
        for line in lines:
            fields = line.split(b" ")
            if len(fields) > 4:
                points.add(_unescape(fields[4]))
        return points

    def discard(self) -> None:
        """End an unused prepared sandbox."""
        if self._input >= 0:
            os.close(self._input)
            self._input = -1
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, 9)
        self.proc.wait()
        with contextlib.suppress(OSError):
            os.close(self.output)
