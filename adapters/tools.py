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

import contextlib
import copy
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, tzinfo
from typing import Annotated, Any, NamedTuple

import msgspec

from actors.gatekeeper_policy import resolve_in_workspace
from actors.ports import ToolOutput
from actors.security.globs import glob_match

# The credential-file test tier 1 applies to read paths: grep skips such files when it
# walks a folder, so a broad search cannot read what read_file would have to ask for.
from actors.security.heuristics import _credential_kind

DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_READ_CHARS = 100_000
DEFAULT_MAX_OUTPUT_CHARS = 30_000
#: Most files ``glob`` lists and matching lines ``grep`` returns.
DEFAULT_MAX_RESULTS = 200
#: ``grep`` skips files larger than this (bytes).
DEFAULT_MAX_GREP_FILE_BYTES = 5_000_000
#: A ``grep`` line longer than this is cut (characters).
MAX_LINE_CHARS = 400
#: Folders the search tools never descend into (version-control internals).
SKIPPED_FOLDERS = frozenset({".git", ".hg", ".svn"})

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


class EditFileInput(msgspec.Struct, forbid_unknown_fields=True):
    """Input of ``edit_file``: ``old_text`` replaced exactly by ``new_text``; it must occur
    once unless ``replace_all``."""

    path: str
    old_text: str
    new_text: str
    replace_all: bool = False


class GlobInput(msgspec.Struct, forbid_unknown_fields=True):
    """Input of ``glob``: ``pattern`` relative to the folder ``path``."""

    pattern: str
    path: str = "."


class GrepInput(msgspec.Struct, forbid_unknown_fields=True):
    """Input of ``grep``: a Python regex searched line by line below ``path``."""

    pattern: str
    path: str = "."
    glob: str | None = None
    ignore_case: bool = False
    max_results: Positive | None = None


class RunShellInput(msgspec.Struct, forbid_unknown_fields=True):
    """Input of ``run_shell``."""

    command: str


class GitStatusInput(msgspec.Struct, forbid_unknown_fields=True):
    """Input of ``git_status`` (none)."""


class GitDiffInput(msgspec.Struct, forbid_unknown_fields=True):
    """Input of ``git_diff``: limit to ``path``; ``staged`` compares the index with HEAD."""

    path: str = "."
    staged: bool = False


class CurrentDateInput(msgspec.Struct, forbid_unknown_fields=True):
    """Input of ``current_date`` (none)."""


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
        "name": "edit_file",
        "description": (
            "Edit a UTF-8 text file in the workspace by exact replacement: old_text must match "
            "the file exactly (whitespace and indentation included) and occur exactly once, "
            "unless replace_all is true. Include enough surrounding lines to make it unique. "
            "Reports the line numbers that changed. Use write_file to create a file."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace."},
                "old_text": {"type": "string", "description": "The exact text to replace."},
                "new_text": {"type": "string", "description": "The text to put in its place."},
                "replace_all": {
                    "type": "boolean",
                    "description": "Replace every occurrence (default false: exactly one).",
                },
            },
            "required": ["path", "old_text", "new_text"],
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
    {
        "name": "glob",
        "description": (
            "Find files in the workspace whose path matches a glob pattern, sorted by path. "
            "The pattern is relative to the folder 'path': '*' matches within one folder "
            "level, '**/' any number of folders ('**/*.py' finds Python files at any depth), "
            "'?' one character, '[abc]' a set. Symlinked folders and .git are not entered. "
            "Long results are capped with a note."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Glob pattern, e.g. '**/*.py'."},
                "path": {
                    "type": "string",
                    "description": "Folder to search in, relative to the workspace (default '.').",
                },
            },
            "required": ["pattern"],
            "additionalProperties": False,
        },
    },
    {
        "name": "grep",
        "description": (
            "Search the text files of the workspace for a regular expression (Python re "
            "syntax), line by line. Returns 'file:line:text' for each matching line, sorted by "
            "file; binary files, .git and credential files (.env, keys) met while walking a "
            "folder are skipped. Results are capped at max_results with a note."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Regular expression to search for."},
                "path": {
                    "type": "string",
                    "description": (
                        "File or folder to search, relative to the workspace (default '.')."
                    ),
                },
                "glob": {
                    "type": "string",
                    "description": (
                        "Only search files matching this glob: on the file name ('*.py'), or "
                        "on the path below 'path' when it has a '/' ('src/**/*.py')."
                    ),
                },
                "ignore_case": {
                    "type": "boolean",
                    "description": "Match without regard to case (default false).",
                },
                "max_results": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Most matching lines to return (default 200).",
                },
            },
            "required": ["pattern"],
            "additionalProperties": False,
        },
    },
    {
        "name": "git_status",
        "description": (
            "Show the git status of the workspace (read-only): the branch, then one line per "
            "changed or untracked file in git's short format ('XY path': X the index, Y the "
            "work tree; '??' untracked). The workspace must be the top of a git repository."
        ),
        "input_schema": {"type": "object", "properties": {}, "additionalProperties": False},
    },
    {
        "name": "git_diff",
        "description": (
            "Show the git diff of the workspace (read-only): unstaged changes by default, or "
            "staged ones (index against HEAD) with staged=true, optionally for one path. "
            "Untracked files do not appear; long output is shortened in the middle."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": (
                        "Limit the diff to this file or folder, relative to the workspace "
                        "(default '.': everything)."
                    ),
                },
                "staged": {
                    "type": "boolean",
                    "description": "Diff the staged changes instead (default false).",
                },
            },
            "additionalProperties": False,
        },
    },
    {
        "name": "current_date",
        "description": "The current date, weekday and time, in UTC and in local time.",
        "input_schema": {"type": "object", "properties": {}, "additionalProperties": False},
    },
]


#: Tool groups a session loads lazily (``load_tools``); every built-in tool is in one.
#: ``current_date`` has a group of its own: it is not about files, search, commands or git,
#: it is harmless and tiny, and a model that only needs the date should not have to load
#: (and be tempted by) the shell to run ``date``.
TOOL_GROUPS: dict[str, list[str]] = {
    "files": ["read_file", "write_file", "edit_file", "list_dir"],
    "search": ["glob", "grep"],
    "shell": ["run_shell"],
    "git": ["git_status", "git_diff"],
    "time": ["current_date"],
}

#: One line per group, for the ``load_tools`` meta-tool's description.
TOOL_GROUP_DESCRIPTIONS: dict[str, str] = {
    "files": "read, write, edit (exact replacement) and list files in the workspace",
    "search": "find files by glob pattern and search their text with regular expressions",
    "shell": "run bash commands in the workspace",
    "git": "git status and diff of the workspace (read-only)",
    "time": "the current date and time",
}


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


class _Finished(NamedTuple):
    """A finished (or killed) process: its exit code and its capped, combined output."""

    code: int
    timed_out: bool
    output: str


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _files_under(base: str, root: str) -> list[str]:
    """The regular files below folder ``base``, as ``/`` paths relative to ``base``, sorted.

    Never leaves ``root``: symlinked folders are not entered, and a file symlink counts only
    when it leads to a regular file inside ``root``. Version-control folders are skipped;
    unreadable folders are passed over.
    """
    found: list[str] = []
    for folder, subfolders, names in os.walk(base, followlinks=False):
        subfolders[:] = [
            d
            for d in subfolders
            if d not in SKIPPED_FOLDERS and not os.path.islink(os.path.join(folder, d))
        ]
        for name in names:
            full = os.path.join(folder, name)
            real = os.path.realpath(full) if os.path.islink(full) else full
            if _inside(real, root) and os.path.isfile(real):
                found.append(os.path.relpath(full, base).replace(os.sep, "/"))
    found.sort()
    return found


def _span(content: str, start: int, text: str) -> str:
    """``line N`` or ``lines N-M``: where ``text``, at offset ``start``, lies in ``content``."""
    first = content.count("\n", 0, start) + 1
    body = text[:-1] if text.endswith("\n") else text
    last = first + body.count("\n")
    return f"line {first}" if last == first else f"lines {first}-{last}"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


#: Configuration that git commands run with, over anything the repository sets: no
#: fsmonitor hook, no hooks, no pager, no colour, UTF-8 paths shown as they are.
_GIT_SAFE_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", os.devnull),
    ("core.pager", "cat"),
    ("core.quotePath", "false"),
    ("color.ui", "never"),
)


# --- the executor -------------------------------------------------------------------------


class BuiltinTools:
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
    system's).
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
        self._tools: dict[str, tuple[type[msgspec.Struct], Callable[[Any, str], ToolOutput]]] = {
            "read_file": (ReadFileInput, self._read_file),
            "write_file": (WriteFileInput, self._write_file),
            "edit_file": (EditFileInput, self._edit_file),
            "list_dir": (ListDirInput, self._list_dir),
            "glob": (GlobInput, self._glob),
            "grep": (GrepInput, self._grep),
            "run_shell": (RunShellInput, self._run_shell),
            "git_status": (GitStatusInput, self._git_status),
            "git_diff": (GitDiffInput, self._git_diff),
            "current_date": (CurrentDateInput, self._current_date),
        }

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
            return copy.deepcopy(_DEFINITIONS)
        wanted = [groups] if isinstance(groups, str) else list(groups)
        unknown = [g for g in wanted if g not in TOOL_GROUPS]
        if unknown:
            raise ValueError(
                f"unknown tool group {', '.join(map(repr, unknown))}; "
                f"known groups: {', '.join(TOOL_GROUPS)}"
            )
        names = {name for group in wanted for name in TOOL_GROUPS[group]}
        return [copy.deepcopy(d) for d in _DEFINITIONS if d["name"] in names]

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

    def _capped(self, text: str, note: str) -> str:
        """``text`` cut to ``max_output_chars`` at a line end if possible, with ``note``."""
        if len(text) <= self.max_output_chars:
            return text
        cut = text.rfind("\n", 0, self.max_output_chars)
        kept = text[: cut if cut > 0 else self.max_output_chars]
        return f"{kept}\n[output capped at {self.max_output_chars} characters; {note}]"

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

    def _edit_file(self, args: EditFileInput, workspace: str) -> ToolOutput:
        target = self._confine(args.path, workspace)
        if not os.path.exists(target):
            raise _ToolError(f"file not found: {args.path}; use write_file to create a file")
        if not os.path.isfile(target):
            raise _ToolError(f"{args.path} is not a regular file")
        if not args.old_text:
            raise _ToolError(
                "old_text is empty; give the exact text to replace (write_file replaces "
                "a whole file)"
            )
        if args.old_text == args.new_text:
            raise _ToolError("old_text and new_text are the same; there is nothing to change")
        with open(target, "rb") as handle:
            raw = handle.read()
        try:
            content = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise _ToolError(
                f"{args.path} is not UTF-8 text ({err.reason} at byte {err.start}); "
                f"edit_file only edits text files"
            ) from err
        offsets: list[int] = []
        at = content.find(args.old_text)
        while at >= 0:
            offsets.append(at)
            at = content.find(args.old_text, at + len(args.old_text))
        if not offsets:
            hint = ""
            if "\r\n" in content and "\n" in args.old_text and "\r\n" not in args.old_text:
                hint = " The file has Windows (CRLF) line endings; old_text must have them too."
            raise _ToolError(
                f"old_text was not found in {args.path}; it must match the file exactly, "
                f"whitespace and indentation included (read the file again and copy the "
                f"text).{hint}"
            )
        if len(offsets) > 1 and not args.replace_all:
            where = ", ".join(_span(content, o, args.old_text) for o in offsets[:20])
            more = f" and {len(offsets) - 20} more" if len(offsets) > 20 else ""
            raise _ToolError(
                f"old_text occurs {len(offsets)} times in {args.path} ({where}{more}); "
                f"include more surrounding lines to make it unique, or set replace_all to "
                f"replace every occurrence"
            )
        updated = content.replace(args.old_text, args.new_text)
        with open(target, "wb") as handle:
            handle.write(updated.encode("utf-8"))
        growth = len(args.new_text) - len(args.old_text)
        changes = [
            f"{_span(content, o, args.old_text)} -> {_span(updated, o + i * growth, args.new_text)}"
            for i, o in enumerate(offsets[:20])
        ]
        if len(offsets) > 20:
            changes.append(f"and {len(offsets) - 20} more")
        summary = _plural(len(offsets), "replacement")
        return ToolOutput(f"edited {args.path}: {summary}: {'; '.join(changes)}")

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

    def _search_base(self, path: str, workspace: str) -> tuple[str, str]:
        """The real workspace and the real folder or file ``path`` names inside it."""
        root = os.path.realpath(workspace)
        base = self._confine(path, workspace)
        if not os.path.exists(base):
            raise _ToolError(f"path not found: {path}")
        return root, base

    @staticmethod
    def _check_pattern(pattern: str, field: str) -> None:
        if not pattern:
            raise _ToolError(f"{field} is empty; give a glob such as '**/*.py'")
        if pattern.startswith(("/", "~")) or ".." in pattern.split("/"):
            raise _ToolError(
                f"refused: {field} {pattern!r} must stay below the search folder (no leading "
                f"'/' or '~', no '..'); choose the folder with 'path'"
            )

    def _glob(self, args: GlobInput, workspace: str) -> ToolOutput:
        self._check_pattern(args.pattern, "pattern")
        root, base = self._search_base(args.path, workspace)
        if not os.path.isdir(base):
            raise _ToolError(f"{args.path} is a file, not a folder; glob searches a folder")
        matches = [
            os.path.relpath(os.path.join(base, rel), root).replace(os.sep, "/")
            for rel in _files_under(base, root)
            if glob_match(args.pattern, rel)
        ]
        if not matches:
            return ToolOutput(f"no files match {args.pattern!r} in {args.path}")
        shown = matches[: self.max_results]
        text = "\n".join(shown)
        if len(matches) > len(shown):
            text += (
                f"\n[showing the first {len(shown)} of {len(matches)} files, sorted by path; "
                f"narrow the pattern or the path to see the rest]"
            )
        return ToolOutput(self._capped(text, "narrow the pattern or the path"))

    def _grep(self, args: GrepInput, workspace: str) -> ToolOutput:
        flags = re.IGNORECASE if args.ignore_case else 0
        try:
            regex = re.compile(args.pattern, flags)
        except re.error as err:
            raise _ToolError(
                f"invalid regular expression {args.pattern!r}: {err} (Python re syntax; "
                f"escape special characters such as ( [ . * + ? with a backslash)"
            ) from err
        if args.glob is not None:
            self._check_pattern(args.glob, "glob")
        root, base = self._search_base(args.path, workspace)
        if os.path.isdir(base):
            candidates = _files_under(base, root)
            if args.glob is not None:
                use_path = "/" in args.glob
                candidates = [
                    rel
                    for rel in candidates
                    if glob_match(args.glob, rel if use_path else rel.rsplit("/", 1)[-1])
                ]
            files = [os.path.join(base, rel) for rel in candidates]
            walked = True
        elif os.path.isfile(base):
            files = [base]
            walked = False
        else:
            raise _ToolError(f"{args.path} is not a regular file or folder")
        limit = min(args.max_results or self.max_results, self.max_results)
        lines: list[str] = []
        skipped: dict[str, list[str]] = {"binary": [], "large": [], "credential": []}
        capped = False
        for full in files:
            shown = os.path.relpath(full, root).replace(os.sep, "/")
            if walked and _credential_kind(shown) is not None:
                skipped["credential"].append(shown)
                continue
            if os.path.getsize(full) > self.max_grep_file_bytes:
                skipped["large"].append(shown)
                continue
            with open(full, "rb") as handle:
                data = handle.read()
            if b"\0" in data[:8192]:
                skipped["binary"].append(shown)
                continue
            text = data.decode("utf-8", errors="replace")
            pieces = text.split("\n")
            if pieces and pieces[-1] == "":
                pieces.pop()
            for number, line in enumerate(pieces, 1):
                line = line.removesuffix("\r")
                if not regex.search(line):
                    continue
                if len(lines) >= limit:
                    capped = True
                    break
                if len(line) > MAX_LINE_CHARS:
                    line = line[:MAX_LINE_CHARS] + " [line cut]"
                lines.append(f"{shown}:{number}:{line}")
            if capped:
                break
        notes: list[str] = []
        if capped:
            notes.append(
                f"[results capped at {limit} matching lines; there are more: narrow the "
                f"pattern, the path or the glob, or raise max_results (up to "
                f"{self.max_results})]"
            )
        if skipped["binary"]:
            notes.append(f"[skipped {_plural(len(skipped['binary']), 'binary file')}]")
        if skipped["large"]:
            notes.append(
                f"[skipped {_plural(len(skipped['large']), 'file')} larger than "
                f"{self.max_grep_file_bytes} bytes: {', '.join(skipped['large'][:5])}]"
            )
        if skipped["credential"]:
            notes.append(
                f"[skipped {_plural(len(skipped['credential']), 'credential file')}: "
                f"{', '.join(skipped['credential'][:5])}; name one in 'path' to search it]"
            )
        body = "\n".join(lines) if lines else f"no matches for {args.pattern!r} in {args.path}"
        text = "\n".join([body, *notes])
        return ToolOutput(self._capped(text, "narrow the pattern, the path or the glob"))

    def _run_shell(self, args: RunShellInput, workspace: str) -> ToolOutput:
        if not args.command.strip():
            raise _ToolError("run_shell needs a non-empty command")
        try:
            done = self._run_process(["bash", "-c", args.command], workspace, self.env)
        except OSError as err:
            raise _ToolError(f"could not start bash: {err.strerror or err}") from err
        if done.timed_out:
            header = f"command timed out after {self.timeout:g} s; its process group was killed"
            return ToolOutput(f"{header}\n{done.output}", is_error=True)
        code = done.code
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = str(-code)
            header = f"exit code: {code} (killed by signal {name})"
        else:
            header = f"exit code: {code}"
        return ToolOutput(f"{header}\n{done.output}", is_error=code != 0)

    def _run_process(
        self, argv: list[str], workspace: str, env: Mapping[str, str] | None
    ) -> _Finished:
        """Run ``argv`` in ``workspace`` in its own process group, capturing stdout and
        stderr together (capped, middle shortened); killed when ``timeout`` runs out.
        Raises ``OSError`` when it cannot start."""
        read_fd, write_fd = os.pipe()
        try:
            proc = subprocess.Popen(
                argv,
                cwd=os.path.realpath(workspace),
                stdin=subprocess.DEVNULL,
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
        return _Finished(proc.returncode, timed_out, buffer.text())

    # --- git --------------------------------------------------------------------------

    def _git_env(self, overrides: Iterable[tuple[str, str]] = ()) -> dict[str, str]:
        """The environment of git commands: no inherited ``GIT_*`` variables (they could
        point git at another repository or run an external diff), repository discovery
        stopped at the workspace (``GIT_CEILING_DIRECTORIES`` is set per call), literal
        pathspecs, no optional locks (status does not rewrite the index), and the
        configuration ``overrides`` (passed as ``GIT_CONFIG_*``, which outrank every file).
        """
        base = self.env if self.env is not None else os.environ
        env = {k: v for k, v in base.items() if not k.startswith("GIT_")}
        env.update(
            GIT_OPTIONAL_LOCKS="0",
            GIT_LITERAL_PATHSPECS="1",
            GIT_TERMINAL_PROMPT="0",
            GIT_PAGER="cat",
        )
        items = list(_GIT_SAFE_CONFIG) + list(overrides)
        env["GIT_CONFIG_COUNT"] = str(len(items))
        for index, (key, value) in enumerate(items):
            env[f"GIT_CONFIG_KEY_{index}"] = key
            env[f"GIT_CONFIG_VALUE_{index}"] = value
        return env

    def _git_quick(self, argv: list[str], root: str, env: Mapping[str, str]) -> tuple[int, str]:
        """Run a small git query in ``root``: ``(exit code, stdout)``; stderr on failure."""
        try:
            done = subprocess.run(
                ["git", *argv],
                cwd=root,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=self.timeout,
                check=False,
            )
        except FileNotFoundError as err:
            raise _ToolError("git is not installed (or not on the PATH)") from err
        except subprocess.TimeoutExpired as err:
            raise _ToolError(f"git did not answer within {self.timeout:g} s") from err
        out = done.stdout if done.returncode == 0 else done.stderr
        return done.returncode, out.decode("utf-8", errors="replace")

    def _git(self, argv: list[str], workspace: str) -> str:
        """Run ``git argv`` read-only in the repository at the top of ``workspace``.

        Refuses a workspace that is not the top of a work tree (git never looks at the
        folders above it, and a ``core.worktree`` elsewhere is refused). Commands that the
        repository's configuration could make git run are switched off: the fsmonitor
        hook, hooks, external diff and textconv (also by the callers' flags), and every
        clean/smudge filter driver found in the configuration. Returns the capped output.
        """
        root = os.path.realpath(workspace)
        env = self._git_env()
        env["GIT_CEILING_DIRECTORIES"] = os.path.dirname(root)
        code, out = self._git_quick(["rev-parse", "--show-toplevel"], root, env)
        if code != 0:
            reason = out.strip().splitlines()[0] if out.strip() else f"exit code {code}"
            raise _ToolError(
                f"the workspace {workspace} is not a git repository (git looks only at the "
                f"workspace itself, not the folders above it): {reason}"
            )
        top = os.path.realpath(out.strip())
        if top != root:
            raise _ToolError(
                f"refused: the repository's work tree is {top}, not the workspace {workspace}"
            )
        code, out = self._git_quick(
            ["config", "-z", "--name-only", "--get-regexp", r"^filter\."], root, env
        )
        drivers = {
            name[len("filter.") :].rsplit(".", 1)[0]
            for name in (out.split("\0") if code == 0 else [])
            if name.startswith("filter.") and name.count(".") >= 2
        }
        neutral = [
            (f"filter.{driver}.{key}", value)
            for driver in sorted(drivers)
            for key, value in (
                ("clean", ""),
                ("smudge", ""),
                ("process", ""),
                ("required", "false"),
            )
        ]
        env = self._git_env(neutral)
        env["GIT_CEILING_DIRECTORIES"] = os.path.dirname(root)
        try:
            done = self._run_process(["git", "--no-pager", *argv], workspace, env)
        except OSError as err:
            raise _ToolError(f"could not start git: {err.strerror or err}") from err
        if done.timed_out:
            raise _ToolError(f"git {argv[0]} timed out after {self.timeout:g} s")
        if done.code != 0:
            raise _ToolError(f"git {argv[0]} failed (exit code {done.code}):\n{done.output}")
        return done.output

    def _git_status(self, args: GitStatusInput, workspace: str) -> ToolOutput:
        output = self._git(
            ["status", "--short", "--branch", "--ignore-submodules=dirty"], workspace
        )
        lines = output.rstrip("\n").splitlines()
        if all(line.startswith("## ") for line in lines):
            output = output.rstrip("\n") + "\nnothing to commit, working tree clean"
        return ToolOutput(output.rstrip("\n"))

    def _git_diff(self, args: GitDiffInput, workspace: str) -> ToolOutput:
        argv = ["diff", "--no-color", "--no-ext-diff", "--no-textconv", "--ignore-submodules=dirty"]
        if args.staged:
            argv.append("--cached")
        target = self._confine(args.path, workspace)
        argv += ["--", os.path.relpath(target, os.path.realpath(workspace))]
        where = "" if args.path == "." else f" in {args.path}"
        output = self._git(argv, workspace)
        if not output.strip():
            kind = "staged" if args.staged else "unstaged"
            hint = "" if args.staged else " (untracked files never show here; see git_status)"
            return ToolOutput(f"no {kind} changes{where}{hint}")
        return ToolOutput(output)

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
