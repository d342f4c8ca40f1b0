"""Running one tool command inside a bubblewrap sandbox.

:class:`Sandbox` turns a call (its command, workspace and :class:`~actors.ports.Grant`) into
a :class:`~adapters.sandbox.bwrap.MountPlan`, holds the placeholders for protected files
that do not exist yet while it runs, and runs it with the call's limits: its processes are
killed when the call times out, is cancelled, or (where the process-count limit cannot be
enforced by the kernel, as for root) starts more processes than allowed.
:meth:`Sandbox.command` gives the same containment to a long-lived process (an MCP stdio
server) that the caller starts and ends itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping

from actors.ports import Grant
from adapters.process import Finished, run_process
from adapters.sandbox.bwrap import MountPlan, bwrap_argv
from adapters.sandbox.cgroup import CgroupPool, find_parent
from adapters.sandbox.placeholders import Placeholders
from adapters.sandbox.protected import (
    ancestors,
    protected_targets,
    remove_created,
    watched_paths,
)
from events.sandbox import SandboxLimits, SandboxProfile

log = logging.getLogger(__name__)

class Sandbox:
    """Runs commands contained by bubblewrap (``bwrap``, with ``prlimit`` for limits).

    ``protected``: the workspace-relative protection globs; ``limits``: each call's
    resource limits; ``home_visible``: entries of the user's home (or absolute paths)
    shown read-only (the
    rest of the home is hidden); ``hidden``: more folders to hide (the state directory);
    ``placeholders``: where absent protected files get their stand-ins; ``cgroup_parent``:
    where each call's pids cgroup is made (None: found here; "": none).
    """

    def __init__(
        self,
        bwrap: str,
        prlimit: str,
        *,
        protected: Iterable[str] = (),
        limits: SandboxLimits | None = None,
        home_visible: Iterable[str] = (),
        hidden: Iterable[str] = (),
        placeholders: Placeholders | None = None,
        cgroup_parent: str | None = None,
    ) -> None:
        self.bwrap = bwrap
        self.prlimit = prlimit
        self.protected = tuple(protected)
        self.limits = limits or SandboxLimits()
        self.home_visible = tuple(home_visible)
        self.hidden = tuple(hidden)
        self.placeholders = placeholders or Placeholders()
        #: Where each call gets a pids cgroup ("" where none can be made: the kernel's
        #: RLIMIT_NPROC, or for root a polling watchdog, limits processes instead).
        self.cgroup_parent = find_parent() if cgroup_parent is None else cgroup_parent
        self._cgroups = CgroupPool.shared(self.cgroup_parent, self.limits.processes)

    def close(self) -> None:
        """Remove the call cgroups this sandbox kept (at the engine's stop)."""
        self._cgroups.close()

    def profile(self, grant: Grant, *, writable: bool, wall_seconds: float) -> SandboxProfile:
        """The profile a call with ``grant`` runs under (recorded before it runs)."""
        return SandboxProfile(
            kind="bubblewrap",
            network=grant.network,
            writable="workspace" if writable else "none",
            granted=sorted(grant.writes) if writable else [],
            limits=self.limits,
            wall_seconds=wall_seconds,
        )

    def _hidden_folders(self, root: str) -> list[str]:
        """The folders replaced by an empty tmpfs: private ``/tmp`` and ``/run`` (the
        sockets of local services live there), the home, the state directory. One that
        holds the workspace is hidden too: the workspace is bound back on top."""
        home = os.path.expanduser("~")
        hide: set[str] = set()
        for folder in ("/tmp", "/run", "/var/run", "/dev/shm", home, *self.hidden):
            if not os.path.isabs(folder) or os.path.islink(folder) or not os.path.isdir(folder):
                continue  # /var/run is usually a link to /run
            real = os.path.realpath(folder)
            if real != "/" and not real.startswith(root + os.sep):
                hide.add(real)
        return sorted(hide, key=lambda p: (p.count(os.sep), p))

    def _shown(self) -> list[str]:
        """What is shown read-only inside the hidden folders: the ``home_visible``
        entries (relative to the home, or absolute), and the Python installation the
        engine runs on (a venv under ``/tmp`` or a pyenv under the home would be hidden)."""
        home = os.path.expanduser("~")
        shown = [os.path.join(home, entry) for entry in self.home_visible
                 if entry and ".." not in entry.split("/")]  # join keeps an absolute one
        shown += [os.path.realpath(p) for p in (sys.base_prefix, sys.prefix)]
        return list(dict.fromkeys(shown))

    @contextlib.contextmanager
    def _plan(
        self, workspace: str, *, writes: Iterable[str], network: bool, writable: bool,
    ) -> Iterator[MountPlan]:
        """The mount plan of a process in ``workspace``'s sandbox, valid for the ``with``
        block: the placeholders of absent protected files are held until it ends.
        ``writes``: the protected paths left writable (still undeletable). Raises
        ``UnholdablePath`` when a protected path cannot be held."""
        root = os.path.realpath(workspace)
        granted = {os.path.realpath(p) for p in writes}
        targets = protected_targets(root, self.protected) if writable else []
        # Every protected path goes to the placeholders, existing ones too: one that exists
        # because another call's placeholder stands there must be shared, not merely
        # mounted (its removal would detach this sandbox's mount); the lock decides.
        leaves = [(t.path, t.is_dir) for t in targets if t.path not in granted]
        watched = watched_paths(root) if writable else []
        with self.placeholders.holding(leaves) as made, self._removing(watched):
            held = [t.path for t in targets]
            pins = {a for t in targets for a in ancestors(root, t.path)} | (
                set(made) - {p for p, _ in leaves})
            yield MountPlan(
                workspace=root,
                writable=writable,
                hide=self._hidden_folders(root),
                show=self._shown(),
                pin=sorted((p for p in pins if os.path.isdir(p)),
                           key=lambda p: (p.count(os.sep), p)),
                read_only=[p for p in held if p not in granted and os.path.lexists(p)],
                granted=[p for p in held if p in granted and os.path.lexists(p)],
                network=network,
            )

    @staticmethod
    @contextlib.contextmanager
    def _removing(watched: list[str]) -> Iterator[None]:
        """Remove, once the block ends, each of ``watched`` the process created."""
        try:
            yield
        finally:
            for path in remove_created(watched):
                log.warning("removed %s, made by a sandboxed process: it would point a "
                            "person's git at configuration the sandbox never held", path)

    def run(
        self,
        argv: list[str],
        workspace: str,
        *,
        grant: Grant,
        writable: bool,
        env: Mapping[str, str] | None,
        timeout: float,
        cap: int,
    ) -> Finished:
        """Run ``argv`` in ``workspace``'s sandbox; see the module's contract. Raises
        ``UnholdablePath`` when a protected path cannot be held (nothing runs) and
        ``OSError`` when bwrap cannot start."""
        with self._plan(workspace, writes=grant.writes, network=grant.network,
                        writable=writable) as plan:
            command = bwrap_argv(self.bwrap, plan, argv, prlimit=self.prlimit,
                                 limits=self.limits)
            if not self.cgroup_parent:
                return run_process(command, plan.workspace, env, timeout=timeout, cap=cap,
                                   cancel=grant.cancel, watchdog=self._watchdog())
            with self._cgroups.cgroup() as cgroup:
                # The kernel refuses the fork past the limit; the call is then stopped
                # (a fork bomb would otherwise retry until its time runs out).
                return run_process(cgroup.wrap(command), plan.workspace, env,
                                   timeout=timeout, cap=cap, cancel=grant.cancel,
                                   watchdog=lambda _pid: self._over_limit(
                                       cgroup.hit_limit()))

    @contextlib.contextmanager
    def command(
        self, argv: list[str], cwd: str, *, network: bool, writable: bool,
    ) -> Iterator[list[str]]:
        """The command line that runs ``argv`` in ``cwd``'s sandbox as a long-lived
        process (an MCP stdio server), for the caller to start inside the ``with`` block:
        the placeholders are held until the block ends, so the process must have ended
        by then. The same containment as :meth:`run` (``cwd`` the writable root, or
        read-only; no protected file writable; the network only if ``network``), the
        prlimit limits (its CPU seconds count over the process's whole life) and
        ``--die-with-parent``; no wall-clock limit and no process watchdog. Raises
        ``UnholdablePath`` when a protected path cannot be held."""
        with self._plan(cwd, writes=(), network=network, writable=writable) as plan:
            yield bwrap_argv(self.bwrap, plan, argv, prlimit=self.prlimit,
                             limits=self.limits)

    def _over_limit(self, over: bool) -> str:
        return (f"stopped: it tried to run more than {self.limits.processes} processes at "
                f"once (the sandbox's process limit)") if over else ""

    def _watchdog(self) -> Callable[[int], str] | None:
        """A process counter for when the kernel will not count for us: RLIMIT_NPROC
        does not bind root, so a root engine counts its sandbox's processes itself."""
        if os.geteuid() != 0:
            return None
        limit = self.limits.processes
        namespace: list[int] = []

        def check(pid: int) -> str:
            if not namespace:
                ino = _child_pid_namespace(pid)
                if ino is None:
                    return ""
                namespace.append(ino)
            return self._over_limit(_count_in_namespace(namespace[0], limit + 1) > limit)

        return check


def _child_pid_namespace(pid: int) -> int | None:
    """The PID namespace (its inode) of ``pid``'s first child: bwrap's sandbox init."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as handle:
            children = handle.read().split()
        if not children:
            return None
        return os.stat(f"/proc/{children[0]}/ns/pid").st_ino
    except OSError:
        return None


def _count_in_namespace(ino: int, stop_at: int) -> int:
    """How many processes live in the PID namespace ``ino`` (counting stops at
    ``stop_at``)."""
    count = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{name}/ns/pid").st_ino == ino:
                count += 1
                if count >= stop_at:
                    break
        except OSError:
            continue
    return count
