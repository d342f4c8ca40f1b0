"""What a tool call's sandbox allowed: the profile recorded before the call runs.

The profile is part of the event log (``ToolCallStarted``), so an audit shows what each
call could have done: whether it ran contained at all, with the network or without, which
protected files its verdict let it write, and the resource limits it ran under.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

PositiveInt = Annotated[int, msgspec.Meta(ge=1)]

#: ``bubblewrap``: contained by the sandbox; ``none``: run as a plain process (the settings
#: say ``sandbox = "off"``, or the tool runs no process, such as the file tools).
SandboxKind = Literal["bubblewrap", "none"]


class SandboxLimits(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Resource limits of one sandboxed call (the ``[limits]`` table of the settings).

    ``cpu_seconds`` of CPU time per process, ``memory_mb`` of address space per process,
    ``file_size_mb`` the largest file a process may write, ``processes`` how many may run
    at once in the call's sandbox, ``scratch_mb`` the size of each private in-memory folder
    (``/tmp``, ``/run``, ``/dev/shm``, the hidden home). The wall-clock bound is the shell
    timeout.
    """

    cpu_seconds: PositiveInt = 300
    memory_mb: PositiveInt = 4096
    file_size_mb: PositiveInt = 1024
    processes: PositiveInt = 256
    scratch_mb: PositiveInt = 256


class SandboxProfile(msgspec.Struct, frozen=True, kw_only=True):
    """The containment one call ran under.

    ``writable`` is ``workspace`` (the workspace read-write, the rest read-only) or
    ``none`` (nothing writable: the read-only git tools). ``granted`` lists the paths
    (absolute) the call's verdict judged it to write: a protected file among them was left
    writable; every other protected file was read-only, and none could be deleted.
    ``wall_seconds`` is the call's time limit.
    """

    kind: SandboxKind
    network: bool = False
    writable: Literal["workspace", "none"] = "workspace"
    granted: list[str] = []
    limits: SandboxLimits = SandboxLimits()
    wall_seconds: float = 0.0

    def describe(self) -> str:
        """One line for people: ``bubblewrap, network off, workspace writable, ...``."""
        if self.kind == "none":
            return "no sandbox"
        parts = [
            self.kind,
            f"network {'on' if self.network else 'off'}",
            "workspace writable" if self.writable == "workspace" else "read-only",
        ]
        if self.granted:
            parts.append(f"may write {', '.join(self.granted)}")
        lim = self.limits
        parts.append(
            f"limits cpu {lim.cpu_seconds}s, memory {lim.memory_mb} MB, file "
            f"{lim.file_size_mb} MB, {lim.processes} processes, scratch {lim.scratch_mb} MB, "
            f"wall {self.wall_seconds:g}s"
        )
        return ", ".join(parts)
