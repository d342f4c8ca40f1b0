"""A pids cgroup per sandboxed call, where this process may make one.

``RLIMIT_NPROC`` does not bind root, and a fork bomb outruns any watchdog that polls, so an
engine that can create cgroups (root on most machines, or a delegated cgroup v2 subtree)
puts each call in a cgroup of its own whose ``pids.max`` is the call's process limit: the
kernel refuses the fork past it. :func:`find_parent` finds where such cgroups can be made
(cgroup v1's pids hierarchy, or the v2 hierarchy under this process's own cgroup);
:class:`CallCgroup` makes one, wraps the command so it joins before it starts anything,
and removes it afterwards.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid

#: Where cgroup hierarchies are mounted.
CGROUP_ROOT = "/sys/fs/cgroup"

# The command joins its cgroup itself before it execs bwrap, so nothing it starts can be
# outside it (a parent writing the child's pid afterwards would race the first fork).
_JOIN = 'echo $$ > "$0" && exec "$@"'


def _own_path(controller: str) -> str | None:
    """This process's cgroup path in the hierarchy of ``controller`` ("" for v2)."""
    try:
        with open("/proc/self/cgroup", encoding="ascii") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(",") or (controller == "" and controllers == ""):
            return path
    return None


def _usable(parent: str) -> bool:
    probe = os.path.join(parent, f"tether-probe-{os.getpid()}")
    try:
        os.mkdir(probe)
    except OSError:
        return False
    try:
        return os.access(os.path.join(probe, "pids.max"), os.W_OK)
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(probe)


def find_parent() -> str:
    """A folder where this process can make pids cgroups, or "" when there is none."""
    candidates: list[str] = []
    v1 = _own_path("pids")
    if v1 is not None:
        candidates.append(os.path.join(CGROUP_ROOT, "pids", v1.lstrip("/")))
    v2 = _own_path("")
    if v2 is not None:
        for mount in (CGROUP_ROOT, os.path.join(CGROUP_ROOT, "unified")):
            if os.path.exists(os.path.join(mount, "cgroup.controllers")):
                candidates.append(os.path.join(mount, v2.lstrip("/")))
    return next((c for c in candidates if os.path.isdir(c) and _usable(c)), "")


class CallCgroup:
    """One call's pids cgroup under ``parent``, at most ``limit`` processes."""

    def __init__(self, parent: str, limit: int) -> None:
        self.path = os.path.join(parent, f"tether-{uuid.uuid4().hex[:12]}")
        os.mkdir(self.path)
        with open(os.path.join(self.path, "pids.max"), "w", encoding="ascii") as handle:
            handle.write(str(limit))

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` made to join this cgroup before it runs."""
        return ["/bin/sh", "-c", _JOIN, os.path.join(self.path, "cgroup.procs"), *argv]

    def hit_limit(self) -> bool:
        """Whether a fork was refused for the limit."""
        try:
            with open(os.path.join(self.path, "pids.events"), encoding="ascii") as handle:
                return any(int(line.split()[1]) > 0 for line in handle if line.strip())
        except (OSError, ValueError, IndexError):
            return False

    def remove(self) -> None:
        """Kill whatever is left in it, then remove it."""
        for _ in range(50):
            try:
                with open(os.path.join(self.path, "cgroup.procs"), encoding="ascii") as handle:
                    pids = [int(p) for p in handle.read().split()]
            except OSError:
                return
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.rmdir(self.path)
                return
            time.sleep(0.01)


def sweep_cgroups(parent: str) -> int:
    """Remove the empty call cgroups under ``parent`` older than a minute (left by an
    engine that died during a call; one in use has processes, or is a moment old and not
    joined yet, and stays); how many were removed."""
    removed = 0
    with contextlib.suppress(OSError):
        for name in os.listdir(parent):
            path = os.path.join(parent, name)
            if not name.startswith("tether-") or name.startswith("tether-probe-"):
                continue
            with contextlib.suppress(OSError):
                if os.stat(path).st_mtime < time.time() - 60:
                    os.rmdir(path)
                    removed += 1
    return removed
