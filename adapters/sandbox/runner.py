"""Running one tool command inside a bubblewrap sandbox.

:class:`Sandbox` turns a call (its command, workspace and :class:`~actors.ports.Grant`) into
a :class:`~adapters.sandbox.bwrap.MountPlan`, holds the placeholders for protected files
that do not exist yet while it runs, and runs it with the call's limits: its processes are
killed when the call times out, is cancelled, or (where the process-count limit cannot be
enforced by the kernel, as for root) starts more processes than allowed. After a writable
call, the repositories it made are made harmless (:mod:`adapters.sandbox.newrepos`).

Where placeholders are sealed (immutable, so none needs a mount), the next call's sandbox
is built as soon as a call ends (:mod:`adapters.sandbox.prepared`), and the next call uses
it only if it mounts exactly what the call's own plan would. :meth:`Sandbox.command` gives
the same containment to a long-lived process (an MCP stdio server) that the caller starts
and ends itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future
from typing import NamedTuple

import msgspec

from tether.actors.ports import Grant
from tether.adapters.process import Finished, watch_process
from tether.adapters.sandbox.bwrap import MountPlan, bwrap_argv, bwrap_options, prlimit_argv
from tether.adapters.sandbox.cgroup import CallCgroup, CgroupPool, find_parent
from tether.adapters.sandbox.excludes import Excludes
from tether.adapters.sandbox.newrepos import git_folders, gitlinked, make_harmless
from tether.adapters.sandbox.placeholders import Placeholders
from tether.adapters.sandbox.prepared import Prepared, in_background
from tether.adapters.sandbox.protected import (
    Target,
    UnholdablePath,
    ancestors,
    protected_targets,
    remove_created,
    repositories_of,
    watched_paths,
)
from tether.events.sandbox import SandboxLimits, SandboxProfile

log = logging.getLogger(__name__)

#: Longest a call waits for the sandbox being built ahead of it before it builds its own.
PREPARE_WAIT_SECONDS = 1.0

class Sandbox:
    """Runs commands contained by bubblewrap (``bwrap``, with ``prlimit`` for limits).

    ``protected``: the workspace-relative protection globs; ``limits``: each call's
    resource limits; ``home_visible``: entries of the user's home (or absolute paths)
    shown read-only (the
    rest of the home is hidden); ``hidden``: more folders to hide (the state directory);
    ``placeholders``: where absent protected files get their stand-ins; ``cgroup_parent``:
    where each call's pids cgroup is made (None: found here; "": none);
    ``prepare_ahead``: build each call's sandbox after the call before it, off its path
    (where placeholders can be sealed; see :mod:`adapters.sandbox.prepared`);
    ``scratch``: where the sandbox keeps files it generates (a temporary folder when "").
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
        prepare_ahead: bool = True,
        scratch: str = "",
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
        self._excludes = Excludes(scratch)
        #: Whether the next call's sandbox is built after each call, ahead of it.
        self.prepare_ahead = prepare_ahead
        # The sandbox built ahead, in a slot of its own: a Sandbox dropped without close()
        # still ends it when collected.
        self._slot = _Slot(self._cgroups)
        weakref.finalize(self, self._slot.empty)
        self._building: Future[None] | None = None
        self._closed = False

    def close(self) -> None:
        """End the sandbox built ahead, close the placeholder ledger and remove the
        generated exclude files (at the engine's stop). The call cgroups are the
        process's, removed at its exit."""
        self._closed = True
        self._slot.empty()
        self.placeholders.close()
        self._excludes.close()

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
    ) -> Iterator[tuple[MountPlan, bool]]:
        """The mount plan of a process in ``workspace``'s sandbox, valid for the ``with``
        block, and whether every placeholder is sealed (none needs a mount): the
        placeholders of absent protected files are held until it ends, and the
        repositories the process made are made harmless after it. ``writes``: the
        protected paths left writable (still undeletable). Raises ``UnholdablePath`` when
        a protected path cannot be held."""
        root = os.path.realpath(workspace)
        granted = {os.path.realpath(p) for p in writes}
        git_dirs = git_folders(root) if writable else set()  # found once for the call
        targets = protected_targets(root, self.protected, git_dirs) if writable else []
        # Every protected path goes to the placeholders, existing ones too: one that exists
        # because another call's placeholder stands there must be shared, not merely
        # mounted (its removal would detach this sandbox's mount); the lock decides.
        leaves = [(t.path, t.is_dir) for t in targets if t.path not in granted]
        watched = watched_paths(root, git_dirs) if writable else []
        held = [t.path for t in targets]
        # New repositories last, once the placeholders are gone (a sealed one is not git's).
        with (self._new_repositories(root, git_dirs if writable else None, held),
              self.placeholders.holding(leaves) as made, self._removing(watched)):
            sealed = self.placeholders.sealed(made)
            yield self._mount_plan(root, targets, granted=granted, network=network,
                                   writable=writable, made=made, sealed=sealed), (
                sealed == set(made))

    def _mount_plan(
        self, root: str, targets: list[Target], *, granted: set[str], network: bool,
        writable: bool, made: list[str], sealed: set[str],
    ) -> MountPlan:
        """The plan for ``targets`` with the placeholders ``made`` standing (``sealed``:
        those that are immutable, so need no mount and no pinned folder)."""
        held = [t.path for t in targets]
        pins = {a for t in targets for a in ancestors(root, t.path)} | (
            set(made) - {t.path for t in targets} - sealed)
        return MountPlan(
            workspace=root,
            writable=writable,
            hide=self._hidden_folders(root),
            show=self._shown(),
            pin=sorted((p for p in pins if os.path.isdir(p)),
                       key=lambda p: (p.count(os.sep), p)),
            read_only=[p for p in held
                       if p not in granted and p not in sealed and os.path.lexists(p)],
            granted=[p for p in held if p in granted and os.path.lexists(p)],
            files=self._excludes.overlays(repositories_of(root), made),
            network=network,
        )

    @contextlib.contextmanager
    def _removing(self, watched: list[str]) -> Iterator[None]:
        """Remove, once the block ends, each of ``watched`` the process created (or, if
        this process dies first, at the next start: they are in the ledger)."""
        with self.placeholders.watching(watched):
            try:
                yield
            finally:
                for path in remove_created(watched):
                    log.warning("removed %s, made by a sandboxed process: it would point "
                                "a person's git at configuration the sandbox never held",
                                path)

    @staticmethod
    @contextlib.contextmanager
    def _new_repositories(root: str, before: set[str] | None,
                          held: list[str]) -> Iterator[None]:
        """Once the block ends, make each repository its process created harmless: a git
        folder that was not there (one whose configuration the sandbox held is left
        alone: the call could not write it) or, when an index changed, one a gitlink
        points at. ``before``: the git folders before the call (None: a read-only call,
        nothing to do). Never raises: a failure is logged and the others are still done."""
        if before is None:
            yield
            return
        indexes = {path: _identity(path) for path in _indexes(before)}
        try:
            yield
        finally:
            candidates = git_folders(root) - before
            for index, was in indexes.items():
                if _identity(index) != was:
                    candidates.update(gitlinked(os.path.dirname(os.path.dirname(index))))
            kept = tuple(p.rstrip(os.sep) + os.sep for p in held)
            for git_dir in sorted(candidates):
                config = os.path.join(git_dir, "config")
                if config in held or config.startswith(kept):
                    continue
                try:
                    changes = make_harmless(git_dir)
                except Exception:
                    log.exception("could not make the repository %s, made by a sandboxed "
                                  "call, harmless: check its configuration before running "
                                  "git there", git_dir)
                    continue
                if changes:
                    log.warning("a sandboxed call made the repository %s; made harmless: %s",
                                git_dir, "; ".join(changes))

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
        inputs = _Inputs(os.path.realpath(workspace), frozenset(grant.writes), grant.network,
                         writable)
        with self._plan(workspace, writes=grant.writes, network=grant.network,
                        writable=writable) as (plan, all_sealed):
            proc, output, cgroup = self._start(
                plan, self._take_ready(inputs, plan),
                [*prlimit_argv(self.prlimit, self.limits), *argv],
                os.environ if env is None else env)
            try:
                # With a cgroup, the kernel refuses the fork past the limit and the call
                # is stopped (a fork bomb would otherwise retry until its time runs out).
                done = watch_process(
                    proc, output, timeout=timeout, cap=cap, cancel=grant.cancel,
                    watchdog=self._watchdog() if cgroup is None
                    else lambda _pid: self._over_limit(cgroup.hit_limit()))
            finally:
                if cgroup is not None:
                    self._cgroups.give(cgroup)
        if all_sealed and self.prepare_ahead:
            # Only where no placeholder needs a mount: it would stand on disk meanwhile.
            self._prepare_ahead(inputs)
        return done

    def settle(self) -> bool:
        """Wait for the sandbox being built ahead, if one is; whether one now waits ready."""
        self._wait_for_building(PREPARE_WAIT_SECONDS * 10)
        return self._slot.ready()

    def _wait_for_building(self, seconds: float) -> None:
        """Wait at most ``seconds`` for the sandbox being built ahead, if one is."""
        building = self._building
        if building is not None and not building.done():
            with contextlib.suppress(Exception):
                building.result(timeout=seconds)

    def _start(
        self, plan: MountPlan, ready: tuple[Prepared, CallCgroup | None] | None,
        command: list[str], env: Mapping[str, str],
    ) -> tuple[subprocess.Popen[bytes], int, CallCgroup | None]:
        """Start ``command`` on the sandbox built ahead (``ready``) or a new one; returns
        the process, its output pipe and its cgroup (the caller gives it back)."""
        while True:
            prepared, cgroup = ready or self._prepare(plan)
            try:
                proc, output = prepared.start(command, env, plan.workspace)
            except BaseException as exc:
                if cgroup is not None:
                    self._cgroups.give(cgroup)
                if ready is None or not isinstance(exc, OSError):
                    raise
                ready = None  # the one built ahead is gone (killed): build one now
                continue
            return proc, output, cgroup

    def _prepare(self, plan: MountPlan) -> tuple[Prepared, CallCgroup | None]:
        """A sandbox for ``plan`` started now, in a call cgroup where there are some."""
        cgroup = self._cgroups.take() if self.cgroup_parent else None
        try:
            prepared = Prepared(self.bwrap, bwrap_options(plan, self.limits, chdir=False),
                                cgroup.procs if cgroup else "")
        except OSError:
            if cgroup is not None:
                self._cgroups.give(cgroup)
            raise
        return prepared, cgroup

    def _take_ready(
        self, inputs: _Inputs, plan: MountPlan
    ) -> tuple[Prepared, CallCgroup | None] | None:
        """The sandbox built ahead, if it was built for these inputs and mounts exactly
        what ``plan`` does, the same files (else it is discarded)."""
        # Started when the last call ended: waiting costs less than building anew.
        self._wait_for_building(PREPARE_WAIT_SECONDS)
        ready = self._slot.take()
        if ready is None:
            return None
        if ready.inputs == inputs and ready.key == _key(plan) and _still_mounted(
                ready.prepared, plan):
            return ready.prepared, ready.cgroup
        self._slot.discard(ready)
        return None

    def _prepare_ahead(self, inputs: _Inputs) -> None:
        """Build the next call's sandbox for ``inputs`` now, on the preparing thread,
        assuming its placeholders will be sealed (:meth:`_take_ready` checks)."""

        def build() -> None:
            if self._closed:
                return
            granted = set(inputs.writes)
            try:
                targets = (protected_targets(inputs.root, self.protected)
                           if inputs.writable else [])
                made = [t.path for t in targets if not t.exists and t.path not in granted]
                plan = self._mount_plan(inputs.root, targets, granted=granted,
                                        network=inputs.network, writable=inputs.writable,
                                        made=made, sealed=set(made))
                key = _key(plan)
                prepared, cgroup = self._prepare(plan)
            except (OSError, UnholdablePath):
                return  # the next call builds its own, and says what fails
            ready = _Ready(inputs, key, prepared, cgroup)
            if self._closed:  # closed while it was being built
                self._slot.discard(ready)
            else:
                self._slot.put(ready)

        self._building = in_background(build)

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
        with self._plan(cwd, writes=(), network=network, writable=writable) as (plan, _):
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


class _Inputs(NamedTuple):
    """What a call's sandbox is built from, besides the workspace's state."""

    root: str
    writes: frozenset[str]
    network: bool
    writable: bool


class _Ready(NamedTuple):
    """A sandbox built ahead for ``inputs``, mounting what ``key`` says."""

    inputs: _Inputs
    key: bytes
    prepared: Prepared
    cgroup: CallCgroup | None


class _Slot:
    """Where the one sandbox built ahead waits; ``pool`` takes back its cgroup."""

    def __init__(self, pool: CgroupPool) -> None:
        self._pool = pool
        self._ready: _Ready | None = None
        self._lock = threading.Lock()

    def take(self) -> _Ready | None:
        with self._lock:
            ready, self._ready = self._ready, None
        return ready

    def ready(self) -> bool:
        with self._lock:
            return self._ready is not None

    def put(self, ready: _Ready) -> None:
        """Keep ``ready`` (ending the one it replaces)."""
        with self._lock:
            old, self._ready = self._ready, ready
        if old is not None:
            self.discard(old)

    def discard(self, ready: _Ready) -> None:
        ready.prepared.discard()
        if ready.cgroup is not None:
            self._pool.give(ready.cgroup)

    def empty(self) -> None:
        ready = self.take()
        if ready is not None:
            self.discard(ready)


def _still_mounted(prepared: Prepared, plan: MountPlan) -> bool:
    """Whether the sandbox built ahead still has every mount ``plan`` asks for (a path
    unlinked and linked back on the host keeps its inode but loses its mount)."""
    points = prepared.mounted()
    if points is None:
        return False
    wanted = [*plan.hide, plan.workspace, *plan.pin, *plan.read_only, *plan.granted,
              *(destination for _, destination in plan.files),
              *(path for path in plan.show if os.path.lexists(path))]
    return all(path in points for path in wanted)


def _indexes(git_dirs: Iterable[str]) -> list[str]:
    """The index files of the worktrees whose git folders are ``git_dirs``."""
    return [os.path.join(g, "index") for g in git_dirs if os.path.basename(g) == ".git"]


def _identity(path: str) -> tuple[int, int, int, int]:
    """What tells a file rewritten from the one before (0s where there is none)."""
    try:
        info = os.stat(path)
    except OSError:
        return (0, 0, 0, 0)
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


def _key(plan: MountPlan) -> bytes:
    """What a sandbox built from ``plan`` mounts: the plan, and which file or folder
    (device and inode) stands at each path bound now."""
    identities = []
    for path in (plan.workspace, *plan.show, *plan.pin, *plan.read_only, *plan.granted):
        try:
            info = os.stat(path)
            identities.append((info.st_dev, info.st_ino))
        except OSError:
            identities.append((0, 0))
    return msgspec.json.encode((plan, identities))
