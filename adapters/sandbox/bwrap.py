"""The bubblewrap command line of one sandboxed call, built from a plan (pure).

Contract of :func:`bwrap_argv`: the whole file system is mounted read-only; the user's
home, the state directory, ``/tmp`` and ``/run`` are replaced by empty private folders
(the home's listed entries shown read-only again); the workspace is bound read-write (or
read-only); every folder on the way to a protected path is bound onto itself so it cannot
be renamed or removed; the protected paths are bound read-only (read-write but still
undeletable where the verdict granted the write). ``/proc/sys`` is read-only. The process
gets its own user, PID, IPC, UTS and cgroup namespaces and, unless the network is granted,
its own empty network; it may make no user namespace of its own; it keeps no
capabilities, starts a new session (no terminal injection), dies with its parent, and runs
under ``prlimit``'s resource limits; each private folder is a tmpfs of bounded size.
"""

from __future__ import annotations

import msgspec

from tether.events.sandbox import SandboxLimits

_MB = 1024 * 1024


class MountPlan(msgspec.Struct, frozen=True, kw_only=True):
    """What one call's sandbox mounts, in the order bwrap applies it.

    ``hide``: folders replaced by an empty tmpfs; ``show``: paths inside hidden folders
    bound back read-only; ``workspace`` bound read-write when ``writable``; ``pin``:
    folders bound onto themselves (not renamable); ``read_only`` and ``granted``: protected
    paths bound read-only, or read-write (a granted write, still undeletable); ``files``:
    ``(source, destination)`` files bound read-only over workspace files (git's exclude
    list with the placeholders in it).
    """

    workspace: str
    writable: bool = True
    hide: list[str] = []
    show: list[str] = []
    pin: list[str] = []
    read_only: list[str] = []
    granted: list[str] = []
    files: list[tuple[str, str]] = []
    network: bool = False


def prlimit_argv(prlimit: str, limits: SandboxLimits) -> list[str]:
    """``prlimit`` with the call's limits (no core files). The CPU limit's hard bound is a
    second past the soft one: the soft one's SIGXCPU says why the process stopped."""
    return [
        prlimit,
        f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1}",
        f"--as={limits.memory_mb * _MB}",
        f"--fsize={limits.file_size_mb * _MB}",
        f"--nproc={limits.processes}",
        "--core=0",
        "--",
    ]


def bwrap_argv(
    bwrap: str, plan: MountPlan, argv: list[str], *, prlimit: str, limits: SandboxLimits
) -> list[str]:
    """The full command line running ``argv`` in the sandbox ``plan`` describes."""
    return [bwrap, *bwrap_options(plan, limits), "--", *prlimit_argv(prlimit, limits), *argv]


def bwrap_options(plan: MountPlan, limits: SandboxLimits, *, chdir: bool = True) -> list[str]:
    """bwrap's options for the sandbox ``plan`` describes (what comes before the command);
    the command starts in the workspace, or in ``/`` without ``chdir`` (a sandbox built
    ahead waits there, holding no folder of the workspace)."""
    # /proc/sys stays writable in a fresh /proc (bwrap keeps it when it is mode 0555), and
    # sysctls check the uid, not capabilities: a root engine's sandbox could set
    # kernel.core_pattern and run code on the host. It is bound read-only.
    args = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--ro-bind", "/proc/sys", "/proc/sys"]
    scratch = str(limits.scratch_mb * _MB)
    for folder in plan.hide:
        args += ["--size", scratch, "--tmpfs", folder]
    for path in plan.show:
        args += ["--ro-bind-try", path, path]
    args += ["--bind" if plan.writable else "--ro-bind", plan.workspace, plan.workspace]
    for folder in plan.pin:
        args += ["--bind", folder, folder]
    for path in plan.read_only:
        args += ["--ro-bind", path, path]
    for path in plan.granted:
        args += ["--bind", path, path]
    for source, destination in plan.files:
        args += ["--ro-bind", source, destination]
    # No user namespace inside: one would grant CAP_SYS_ADMIN over new mount and cgroup
    # namespaces (a cgroup2 mount there reaches the engine's own cgroup: kill, freeze).
    args += ["--chdir", plan.workspace if chdir else "/", "--unshare-all", "--unshare-user",
             "--disable-userns"]
    if plan.network:
        args.append("--share-net")
    args += [
        "--hostname", "tether-sandbox",
        "--die-with-parent",
        "--new-session",
        "--cap-drop", "ALL",
    ]
    return args
