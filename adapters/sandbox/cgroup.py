"""A pids cgroup per sandboxed call, where this process may make one.

``RLIMIT_NPROC`` does not bind root, and a fork bomb outruns any watchdog that polls, so an
engine that can create cgroups (root on most machines, or a delegated cgroup v2 subtree)
puts each call in a cgroup of its own whose ``pids.max`` is the call's process limit: the
kernel refuses the fork past it. :func:`find_parent` finds where such cgroups can be made
(cgroup v1's pids hierarchy, or the v2 hierarchy under this process's own cgroup);
:class:`CallCgroup` makes one, which a call's sandbox joins before it starts anything
(:mod:`adapters.sandbox.prepared`), and removes it afterwards.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator

#: Where cgroup hierarchies are mounted.
CGROUP_ROOT = "/sys/fs/cgroup"


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


@functools.cache
def find_parent() -> str:
    """A folder where this process can make pids cgroups, or "" when there is none
    (found once per process: every sandbox the process makes shares the answer)."""
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


def _kill_all(path: str) -> None:
    """Kill every process in the cgroup at ``path``."""
    try:
        with open(os.path.join(path, "cgroup.procs"), encoding="ascii") as handle:
            pids = [int(p) for p in handle.read().split()]
    except OSError:
        return
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _remove(path: str) -> None:
    for _ in range(200):
        _kill_all(path)
        with contextlib.suppress(OSError):
            os.rmdir(path)
            return
        time.sleep(0.005)


class CallCgroup:
    """A pids cgroup under ``parent`` for one call at a time, at most ``limit`` processes.

    Cgroups are reused from call to call (:class:`CgroupPool`): a fresh one costs its
    creation, and removing one waits for the last exit."""

    def __init__(self, parent: str, limit: int) -> None:
        # The engine's pid in the name: a sweep removes only the cgroups of dead engines.
        self.path = os.path.join(parent, f"tether-{os.getpid()}-{uuid.uuid4().hex[:12]}")
        os.mkdir(self.path)
        with open(os.path.join(self.path, "pids.max"), "w", encoding="ascii") as handle:
            handle.write(str(limit))
        #: Where a process writes its pid to join.
        self.procs = os.path.join(self.path, "cgroup.procs")
        self._refused = self._refusals()

    def _refusals(self) -> int:
        try:
            with open(os.path.join(self.path, "pids.events"), encoding="ascii") as handle:
                return sum(int(line.split()[1]) for line in handle if line.strip())
        except (OSError, ValueError, IndexError):
            return 0

    def hit_limit(self) -> bool:
        """Whether a fork was refused for the limit since the call began."""
        return self._refusals() > self._refused

    def empty(self) -> None:
        """Kill whatever is left in it, so the next call starts alone."""
        _kill_all(self.path)
        self._refused = self._refusals()

    def remove(self) -> None:
        """Kill whatever is left in it, then remove it (waiting a little for the exits)."""
        _remove(self.path)


class CgroupPool:
    """Call cgroups under ``parent``, each used by one call at a time and kept for the
    next; :meth:`close` removes them (and the process's exit, for pools from
    :meth:`shared`)."""

    _shared: dict[tuple[str, int], CgroupPool] = {}
    _shared_lock = threading.Lock()

    @classmethod
    def shared(cls, parent: str, limit: int) -> CgroupPool:
        """The process's one pool for ``parent`` and ``limit``: sandboxes made and dropped
        one after another (each test, each engine) leave no cgroups behind."""
        with cls._shared_lock:
            pool = cls._shared.get((parent, limit))
            if pool is None:
                pool = cls._shared[(parent, limit)] = cls(parent, limit)
                atexit.register(pool.close)
            return pool

    def __init__(self, parent: str, limit: int) -> None:
        self.parent = parent
        self.limit = limit
        self._free: list[CallCgroup] = []
        self._all: list[CallCgroup] = []
        self._lock = threading.Lock()

    def take(self) -> CallCgroup:
        """A cgroup no call uses, for one call (give it back with :meth:`give`)."""
        with self._lock:
            if self._free:
                return self._free.pop()
        cgroup = CallCgroup(self.parent, self.limit)
        with self._lock:
            self._all.append(cgroup)
        return cgroup

    def give(self, cgroup: CallCgroup) -> None:
        """Empty ``cgroup`` and keep it for the next call."""
        cgroup.empty()
        with self._lock:
            self._free.append(cgroup)

    @contextlib.contextmanager
    def cgroup(self) -> Iterator[CallCgroup]:
        """A cgroup of its own for the ``with`` block (emptied when it ends)."""
        cgroup = self.take()
        try:
            yield cgroup
        finally:
            self.give(cgroup)

    def close(self) -> None:
        """Remove every cgroup of the pool."""
        with self._lock:
            cgroups, self._all, self._free = self._all, [], []
        for cgroup in cgroups:
            cgroup.remove()


def sweep_cgroups(parent: str) -> int:
    """Remove the call cgroups under ``parent`` of engines no longer running (one died
    during a call); how many were removed."""
    removed = 0
    with contextlib.suppress(OSError):
        for name in os.listdir(parent):
            parts = name.split("-")
            if len(parts) != 3 or parts[0] != "tether" or not parts[1].isdigit():
                continue
            if os.path.exists(f"/proc/{parts[1]}"):
                continue  # its engine still runs (or the pid was reused: it stays a while)
            path = os.path.join(parent, name)
            _remove(path)
            removed += not os.path.exists(path)
    return removed
