"""Built-in tools inside a workspace: files, search, shell, git and the current date.

:class:`BuiltinTools` implements the ``ToolExecutor`` port. Every path is confined to the
session's workspace (symlinks followed, ``..`` resolved) even though the gatekeeper checks
the same thing first: defence in depth. A tool's own failure (bad input, missing file,
unknown tool, a command that times out) comes back as ``ToolOutput(is_error=True)`` with a
message the model can act on; ``execute`` does not raise for those.

The tools come in groups (:data:`TOOL_GROUPS`) so a session can load them lazily:
``definitions(["files", "git"])`` returns only those groups' schemas.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, tzinfo
from typing import Any

import msgspec

from tether.actors.ports import Grant, ToolOutput
from tether.adapters.sandbox import Sandbox
from tether.adapters.tools.base import (
    DEFAULT_MAX_GREP_FILE_BYTES,
    DEFAULT_MAX_OUTPUT_CHARS,
    DEFAULT_MAX_READ_CHARS,
    DEFAULT_MAX_RESULTS,
    DEFAULT_TIMEOUT,
    ToolError,
)
from tether.adapters.tools.files import FileTools
from tether.adapters.tools.schemas import (
    DEFINITIONS,
    TOOL_GROUP_DESCRIPTIONS,
    TOOL_GROUPS,
    TOOLS,
    CurrentDateInput,
)
from tether.adapters.tools.search import SearchTools
from tether.adapters.tools.shell import NO_SANDBOX, ShellTools, Unconfined

_Run = Callable[[Any, str, Grant], ToolOutput]

_ENCODED = [(d["name"], msgspec.json.encode(d)) for d in DEFINITIONS]
"""Each definition's JSON: decoding it makes a fresh copy several times faster than a
deep copy (a copy is made for every model call)."""


def _judged(grant: Grant) -> str:
    """The one path a file write was judged to land on ("" when there is not exactly one)."""
    return grant.writes[0] if len(grant.writes) == 1 else ""


def _ignoring_grant(run: Callable[[Any, str], ToolOutput]) -> _Run:
    return lambda args, workspace, grant: run(args, workspace)


class BuiltinTools(FileTools, SearchTools, ShellTools):
    """The built-in tools: ``read_file``, ``write_file``, ``edit_file``, ``list_dir``,
    ``glob``, ``grep``, ``run_shell``, ``git_status``, ``git_diff`` and ``current_date``.

    ``timeout`` bounds each shell or git command in seconds (its whole process group is
    killed when it runs out); ``max_read_chars`` caps what ``read_file`` returns and
    ``max_output_chars`` what the other tools return; ``max_results`` caps the files
    ``glob`` lists and the lines ``grep`` returns (a ``grep`` call may ask for fewer);
    ``max_grep_file_bytes`` is the largest file ``grep`` reads. ``env`` replaces the
    environment of shell and git commands (default: this process's environment). ``clock``
    returns the current time (default: the system clock, in UTC; a naive time is taken as
    UTC) and ``local_zone`` is the zone ``current_date`` reports as local (default: the
    system's). ``sandbox`` contains every process the shell and git tools start (default:
    none, so they are refused; ``Unconfined(True, ...)`` runs them plain).
    """

    def __init__(
        self,
        timeout: float = DEFAULT_TIMEOUT,
        max_read_chars: int = DEFAULT_MAX_READ_CHARS,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        env: Mapping[str, str] | None = None,
        *,
        max_results: int = DEFAULT_MAX_RESULTS,
        max_grep_file_bytes: int = DEFAULT_MAX_GREP_FILE_BYTES,
        clock: Callable[[], datetime] | None = None,
        local_zone: tzinfo | None = None,
        sandbox: Sandbox | Unconfined = NO_SANDBOX,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        if max_read_chars < 1 or max_output_chars < 2:
            raise ValueError("max_read_chars and max_output_chars must be positive")
        if max_results < 1 or max_grep_file_bytes < 1:
            raise ValueError("max_results and max_grep_file_bytes must be positive")
        self.timeout = timeout
        self.max_read_chars = max_read_chars
        self.max_output_chars = max_output_chars
        self.max_results = max_results
        self.max_grep_file_bytes = max_grep_file_bytes
        self.env = dict(env) if env is not None else None
        self.clock: Callable[[], datetime] = clock or (lambda: datetime.now(UTC))
        self.local_zone = local_zone
        self.sandbox = sandbox
        # Only the process tools use the call's grant; the others run the same for all.
        runs: dict[str, _Run] = {
            "read_file": _ignoring_grant(self._read_file),
            "list_dir": _ignoring_grant(self._list_dir),
            "glob": _ignoring_grant(self._glob),
            "grep": _ignoring_grant(self._grep),
            "current_date": _ignoring_grant(self._current_date),
            # A write lands on the path the gatekeeper judged, or nowhere (a link swapped in
            # since the judgement is not followed).
            "write_file": lambda a, w, g: self._write_file(a, w, _judged(g)),
            "edit_file": lambda a, w, g: self._edit_file(a, w, _judged(g)),
            "run_shell": self._run_shell,
            "git_status": self._git_status,
            "git_diff": self._git_diff,
        }
        self._tools: dict[str, tuple[type[msgspec.Struct], _Run]] = {
            tool.name: (tool.input, runs[tool.name]) for tool in TOOLS}
        """Each tool of the registry, with its input type and what runs it."""

    def groups(self) -> dict[str, str]:
        """Each group of :data:`TOOL_GROUPS`: what it does and its tools."""
        return {name: f"{TOOL_GROUP_DESCRIPTIONS.get(name, name)} ({', '.join(tools)})"
                for name, tools in TOOL_GROUPS.items()}

    def group_of(self, tool: str) -> str | None:
        """The group of :data:`TOOL_GROUPS` holding ``tool``."""
        return next((name for name, tools in TOOL_GROUPS.items() if tool in tools), None)

    def definitions(self, groups: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """The tool schemas in the Messages API ``tools`` format (a fresh copy each call).

        ``groups`` names groups of :data:`TOOL_GROUPS` (a single name is accepted too):
        only their tools are returned, in the usual order; None returns every tool. An
        unknown group raises ``ValueError`` naming the known ones.
        """
        if groups is None:
            return [msgspec.json.decode(encoded) for _, encoded in _ENCODED]
        wanted = [groups] if isinstance(groups, str) else list(groups)
        unknown = [g for g in wanted if g not in TOOL_GROUPS]
        if unknown:
            raise ValueError(
                f"unknown tool group {', '.join(map(repr, unknown))}; "
                f"known groups: {', '.join(TOOL_GROUPS)}"
            )
        names = {name for group in wanted for name in TOOL_GROUPS[group]}
        return [msgspec.json.decode(encoded) for name, encoded in _ENCODED if name in names]

    def execute(
        self, name: str, tool_input: dict[str, Any], workspace: str, grant: Grant | None = None
    ) -> ToolOutput:
        """Run tool ``name`` with ``tool_input`` inside ``workspace`` (blocking), under
        ``grant`` (None: no network, no protected writes, never cancelled).

        Returns the tool's output; any failure of the tool itself is an error output with a
        clear message, never an exception.
        """
        entry = self._tools.get(name)
        if entry is None:
            known = ", ".join(sorted(self._tools))
            return ToolOutput(f"unknown tool {name!r}; available tools: {known}", is_error=True)
        input_type, run = entry
        try:
            args = msgspec.convert(tool_input, input_type)
        except msgspec.ValidationError as err:
            return ToolOutput(f"invalid input for {name}: {err}", is_error=True)
        if not isinstance(workspace, str) or not os.path.isabs(workspace):
            return ToolOutput(f"workspace {workspace!r} is not an absolute path", is_error=True)
        if not os.path.isdir(workspace):
            return ToolOutput(f"workspace {workspace} does not exist", is_error=True)
        try:
            return run(args, workspace, grant or Grant())
        except ToolError as err:
            return ToolOutput(str(err), is_error=True)
        except OSError as err:
            reason = err.strerror or str(err)
            return ToolOutput(f"{name} failed: {reason}", is_error=True)
        except UnicodeError as err:
            return ToolOutput(f"{name} failed: text is not valid Unicode ({err})", is_error=True)

    # --- time -------------------------------------------------------------------------

    def _current_date(self, args: CurrentDateInput, workspace: str) -> ToolOutput:
        now = self.clock()
        if now.tzinfo is None:
            now = now.replace(tzinfo=UTC)
        now = now.replace(microsecond=0)
        utc = now.astimezone(UTC)
        local = now.astimezone(self.local_zone)
        offset = local.strftime("%z")
        offset = f"UTC{offset[:3]}:{offset[3:]}" if offset else "UTC"
        zone = local.tzname() or offset
        return ToolOutput(
            f"UTC: {utc:%A %Y-%m-%d %H:%M:%S} ({utc.isoformat()})\n"
            f"local: {local:%A %Y-%m-%d %H:%M:%S} {zone}, {offset} ({local.isoformat()})"
        )

