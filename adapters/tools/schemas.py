"""The built-in tools' inputs (msgspec Structs), their schemas in the Messages API ``tools``
format, and the groups a session loads lazily."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

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
    include_ignored: bool = False
    """Also files ``.gitignore`` leaves out and hidden folders (skipped by default)."""


class GrepInput(msgspec.Struct, forbid_unknown_fields=True):
    """Input of ``grep``: a Python regex searched line by line below ``path``."""

    pattern: str
    path: str = "."
    glob: str | None = None
    ignore_case: bool = False
    max_results: Positive | None = None
    include_ignored: bool = False
    """Also files ``.gitignore`` leaves out and hidden folders (skipped by default)."""


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

DEFINITIONS: list[dict[str, Any]] = [
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
            "'?' one character, '[abc]' a set. Symlinked folders and .git are not entered; "
            "files .gitignore leaves out and hidden folders (.venv, .cache) are skipped "
            "unless include_ignored. Long results are capped with a note."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Glob pattern, e.g. '**/*.py'."},
                "path": {
                    "type": "string",
                    "description": "Folder to search in, relative to the workspace (default '.').",
                },
                "include_ignored": {
                    "type": "boolean",
                    "description": ("Also files .gitignore leaves out and hidden folders "
                                    "(default false)."),
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
            "folder are skipped, and so are files .gitignore leaves out and hidden folders "
            "unless include_ignored. Results are capped at max_results with a note."
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
                "include_ignored": {
                    "type": "boolean",
                    "description": ("Also files .gitignore leaves out and hidden folders "
                                    "(default false)."),
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
