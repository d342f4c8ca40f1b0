"""Built-in tools: read, write and list files, and run shell commands, inside a workspace.

:class:`BuiltinTools` implements the ``ToolExecutor`` port. Every path is confined to the
session's workspace (symlinks followed, ``..`` resolved) even though the gatekeeper checks
the same thing first: defence in depth. A tool's own failure (bad input, missing file,
unknown tool, a command that times out) comes back as ``ToolOutput(is_error=True)`` with a
message the model can act on; ``execute`` does not raise for those.
"""

from __future__ import annotations

import contextlib
import copy
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import msgspec

from actors.gatekeeper_policy import resolve_in_workspace
from actors.ports import ToolOutput

DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_READ_CHARS = 100_000
DEFAULT_MAX_OUTPUT_CHARS = 30_000

NonNegative = Annotated[int, msgspec.Meta(ge=0)]
Positive = Annotated[int, msgspec.Meta(ge=1)]


# --- tool inputs --------------------------------------------------------------------------


class ReadFileInput(msgspec.Struct, forbid_unknown_fields=True):
    """Input of ``read_file``: ``offset`` lines are skipped, then at most ``limit`` read."""

    path: str
    offset: NonNegative = 0
    limit: Positive | None = None


class WriteFileInput(msgspec.Struct, forbid_unknown_fields=True):
    """Input of ``write_file``: the whole new content of the file."""

    path: str
    content: str


class ListDirInput(msgspec.Struct, forbid_unknown_fields=True):
    """Input of ``list_dir``."""

    path: str = "."


class RunShellInput(msgspec.Struct, forbid_unknown_fields=True):
    """Input of ``run_shell``."""

    command: str


# --- schemas (Messages API ``tools`` format) --------------------------------------------

_DEFINITIONS: list[dict[str, Any]] = [
    {
        "name": "read_file",
        "description": (
            "Read a UTF-8 text file in the workspace. Use offset and limit to read a range of "
            "lines from a large file; long output is truncated with a note saying so."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace."},
                "offset": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "Number of lines to skip from the start (default 0).",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Maximum number of lines to return (default: all).",
                },
            },
            "required": ["path"],
            "additionalProperties": False,
        },
    },
    {
        "name": "write_file",
        "description": (
            "Create or overwrite a file in the workspace with the given content. Missing "
            "parent folders are created."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace."},
                "content": {"type": "string", "description": "The complete new file content."},
            },
            "required": ["path", "content"],
            "additionalProperties": False,
        },
    },
    {
        "name": "list_dir",
        "description": "List a folder in the workspace, sorted by name; folders end with a '/'.",
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "Folder path, relative to the workspace (default '.').",
                },
            },
            "additionalProperties": False,
        },
    },
    {
        "name": "run_shell",
        "description": (
            "Run a command with bash in the workspace folder. Returns the exit code and the "
            "combined stdout and stderr (long output is shortened in the middle). Commands "
            "that run too long are killed."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The bash command line to run."},
            },
            "required": ["command"],
            "additionalProperties": False,
        },
    },
]


class _ToolError(Exception):
    """A tool's own failure, reported to the model as an error result."""


# --- output capture -----------------------------------------------------------------------


class _CappedBuffer:
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


def _drain(fd: int, buffer: _CappedBuffer) -> None:
    """Read ``fd`` to its end into ``buffer``, then close it."""
    try:
        while chunk := os.read(fd, 65536):
            buffer.add(chunk)
    except OSError:
        pass
    finally:
        os.close(fd)


# --- the executor -------------------------------------------------------------------------


class BuiltinTools:
    """The built-in ``read_file``, ``write_file``, ``list_dir`` and ``run_shell`` tools.

    ``timeout`` bounds each shell command in seconds (its whole process group is killed when
    it runs out); ``max_read_chars`` caps what ``read_file`` returns and ``max_output_chars``
    what ``run_shell`` returns. ``env`` replaces the environment of shell commands (default:
    this process's environment).
    """

    def __init__(
        self,
        timeout: float = DEFAULT_TIMEOUT,
        max_read_chars: int = DEFAULT_MAX_READ_CHARS,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        if max_read_chars < 1 or max_output_chars < 2:
            raise ValueError("max_read_chars and max_output_chars must be positive")
        self.timeout = timeout
        self.max_read_chars = max_read_chars
        self.max_output_chars = max_output_chars
        self.env = dict(env) if env is not None else None
        self._tools: dict[str, tuple[type[msgspec.Struct], Callable[[Any, str], ToolOutput]]] = {
            "read_file": (ReadFileInput, self._read_file),
            "write_file": (WriteFileInput, self._write_file),
            "list_dir": (ListDirInput, self._list_dir),
            "run_shell": (RunShellInput, self._run_shell),
        }

    def definitions(self) -> list[dict[str, Any]]:
        """The tool schemas in the Messages API ``tools`` format (a fresh copy each call)."""
        return copy.deepcopy(_DEFINITIONS)

    def execute(self, name: str, tool_input: dict[str, Any], workspace: str) -> ToolOutput:
        """Run tool ``name`` with ``tool_input`` inside ``workspace`` (blocking).

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
            return run(args, workspace)
        except _ToolError as err:
            return ToolOutput(str(err), is_error=True)
        except OSError as err:
            reason = err.strerror or str(err)
            return ToolOutput(f"{name} failed: {reason}", is_error=True)
        except UnicodeError as err:
            return ToolOutput(f"{name} failed: text is not valid Unicode ({err})", is_error=True)

    # --- tools ----------------------------------------------------------------------------

    @staticmethod
    def _confine(path: str, workspace: str) -> str:
        resolved = resolve_in_workspace(path, workspace)
        if resolved is None:
            raise _ToolError(f"refused: path {path} is outside the workspace {workspace}")
        return resolved

    def _read_file(self, args: ReadFileInput, workspace: str) -> ToolOutput:
        target = self._confine(args.path, workspace)
        if not os.path.exists(target):
            raise _ToolError(f"file not found: {args.path}")
        if os.path.isdir(target):
            raise _ToolError(f"{args.path} is a folder, not a file; use list_dir")
        pieces: list[str] = []
        size = 0
        shown = 0
        total = 0
        truncated = False
        with open(target, encoding="utf-8", errors="replace", newline="") as handle:
            for line in handle:
                total += 1
                if total <= args.offset or truncated:
                    continue
                if args.limit is not None and shown >= args.limit:
                    continue
                if size + len(line) > self.max_read_chars:
                    pieces.append(line[: self.max_read_chars - size])
                    truncated = True
                    continue
                pieces.append(line)
                size += len(line)
                shown += 1
        content = "".join(pieces)
        if truncated:
            first = args.offset + 1
            content += (
                f"\n[truncated: output capped at {self.max_read_chars} characters; showed lines "
                f"{first}-{first + shown} of {total}, the last one cut short. Use offset and "
                f"limit to read the rest.]"
            )
        elif args.offset and args.offset >= total:
            content = f"[offset {args.offset} is past the end of the file ({total} lines)]"
        return ToolOutput(content)

    def _write_file(self, args: WriteFileInput, workspace: str) -> ToolOutput:
        target = self._confine(args.path, workspace)
        if os.path.isdir(target):
            raise _ToolError(f"{args.path} is a folder; give a file path")
        parent = os.path.dirname(target)
        os.makedirs(parent, exist_ok=True)
        # Folders just created cannot be symlinks, but check the result once more.
        if resolve_in_workspace(parent, workspace) is None:
            raise _ToolError(f"refused: path {args.path} is outside the workspace {workspace}")
        data = args.content.encode("utf-8")
        with open(target, "wb") as handle:
            handle.write(data)
        return ToolOutput(f"wrote {len(data)} bytes to {args.path}")

    def _list_dir(self, args: ListDirInput, workspace: str) -> ToolOutput:
        target = self._confine(args.path, workspace)
        if not os.path.exists(target):
            raise _ToolError(f"folder not found: {args.path}")
        if not os.path.isdir(target):
            raise _ToolError(f"{args.path} is a file, not a folder; use read_file")
        with os.scandir(target) as entries:
            names = sorted(e.name + ("/" if e.is_dir() else "") for e in entries)
        if not names:
            return ToolOutput(f"{args.path} is empty")
        return ToolOutput("\n".join(names))

    def _run_shell(self, args: RunShellInput, workspace: str) -> ToolOutput:
        if not args.command.strip():
            raise _ToolError("run_shell needs a non-empty command")
        read_fd, write_fd = os.pipe()
        try:
            proc = subprocess.Popen(
                ["bash", "-c", args.command],
                cwd=os.path.realpath(workspace),
                stdin=subprocess.DEVNULL,
                stdout=write_fd,
                stderr=write_fd,
                start_new_session=True,
                env=self.env,
            )
        except OSError as err:
            os.close(read_fd)
            raise _ToolError(f"could not start bash: {err.strerror or err}") from err
        finally:
            os.close(write_fd)

        buffer = _CappedBuffer(self.max_output_chars)
        reader = threading.Thread(target=_drain, args=(read_fd, buffer), daemon=True)
        reader.start()
        deadline = time.monotonic() + self.timeout
        timed_out = False
        try:
            proc.wait(timeout=self.timeout)
            # Background children may still hold the output open; they share the deadline.
            reader.join(max(deadline - time.monotonic(), 0.0))
            timed_out = reader.is_alive()
        except subprocess.TimeoutExpired:
            timed_out = True
        if timed_out:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            # A process that left the group may still hold the pipe: the daemon reader then
            # ends (and closes it) when that process does; report what arrived so far.
            reader.join(2.0)

        output = buffer.text()
        if timed_out:
            header = f"command timed out after {self.timeout:g} s; its process group was killed"
            return ToolOutput(f"{header}\n{output}", is_error=True)
        code = proc.returncode
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = str(-code)
            header = f"exit code: {code} (killed by signal {name})"
        else:
            header = f"exit code: {code}"
        return ToolOutput(f"{header}\n{output}", is_error=code != 0)
