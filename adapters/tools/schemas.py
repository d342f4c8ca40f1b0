"""The built-in tools: their inputs (msgspec Structs), and the registry that names each
tool, its group and what it does.

The registry (:data:`TOOLS`) is the one list of the built-in tools. The schemas the model
is sent (:data:`DEFINITIONS`, the Messages API ``tools`` format) are derived from the input
Structs with ``msgspec.json.schema``, so what the model is told and what
``BuiltinTools.execute`` accepts cannot drift apart; the groups a session loads lazily
(:data:`TOOL_GROUPS`) are derived from it too.
"""

from __future__ import annotations

from typing import Annotated, Any, NamedTuple

import msgspec

__all__ = ["DEFINITIONS", "TOOLS", "TOOL_GROUPS", "TOOL_GROUP_DESCRIPTIONS", "ToolSpec",
           "input_schema"]


def described(text: str, **constraints: Any) -> msgspec.Meta:
    """A field's description for the model (and its constraints, e.g. ``ge=0``)."""
    return msgspec.Meta(description=text, **constraints)


FilePath = Annotated[str, described("File path, relative to the workspace.")]
IncludeIgnored = Annotated[bool, described(
    "Also files .gitignore leaves out and hidden folders (default false).")]

# --- tool inputs --------------------------------------------------------------------------


class ReadFileInput(msgspec.Struct, forbid_unknown_fields=True):
    """Input of ``read_file``: ``offset`` lines are skipped, then at most ``limit`` read."""

    path: FilePath
    offset: Annotated[int, described(
        "Number of lines to skip from the start (default 0).", ge=0)] = 0
    limit: Annotated[int, described(
        "Maximum number of lines to return (default: all).", ge=1)] | None = None


class WriteFileInput(msgspec.Struct, forbid_unknown_fields=True):
    """Input of ``write_file``: the whole new content of the file."""

    path: FilePath
    content: Annotated[str, described("The complete new file content.")]


class ListDirInput(msgspec.Struct, forbid_unknown_fields=True):
    """Input of ``list_dir``."""

    path: Annotated[str, described(
        "Folder path, relative to the workspace (default '.').")] = "."


class EditFileInput(msgspec.Struct, forbid_unknown_fields=True):
    """Input of ``edit_file``: ``old_text`` replaced exactly by ``new_text``; it must occur
    once unless ``replace_all``."""

    path: FilePath
    old_text: Annotated[str, described("The exact text to replace.")]
    new_text: Annotated[str, described("The text to put in its place.")]
    replace_all: Annotated[bool, described(
        "Replace every occurrence (default false: exactly one).")] = False


class GlobInput(msgspec.Struct, forbid_unknown_fields=True):
    """Input of ``glob``: ``pattern`` relative to the folder ``path``."""

    pattern: Annotated[str, described("Glob pattern, e.g. '**/*.py'.")]
    path: Annotated[str, described(
        "Folder to search in, relative to the workspace (default '.').")] = "."
    include_ignored: IncludeIgnored = False
    """Also files ``.gitignore`` leaves out and hidden folders (skipped by default)."""


class GrepInput(msgspec.Struct, forbid_unknown_fields=True):
    """Input of ``grep``: a Python regex searched line by line below ``path``."""

    pattern: Annotated[str, described("Regular expression to search for.")]
    path: Annotated[str, described(
        "File or folder to search, relative to the workspace (default '.').")] = "."
    glob: Annotated[str, described(
        "Only search files matching this glob: on the file name ('*.py'), or on the path "
        "below 'path' when it has a '/' ('src/**/*.py').")] | None = None
    ignore_case: Annotated[bool, described(
        "Match without regard to case (default false).")] = False
    max_results: Annotated[int, described(
        "Most matching lines to return (default 200).", ge=1)] | None = None
    include_ignored: IncludeIgnored = False
    """Also files ``.gitignore`` leaves out and hidden folders (skipped by default)."""


class RunShellInput(msgspec.Struct, forbid_unknown_fields=True):
    """Input of ``run_shell``."""

    command: Annotated[str, described("The bash command line to run.")]


class GitStatusInput(msgspec.Struct, forbid_unknown_fields=True):
    """Input of ``git_status`` (none)."""


class GitDiffInput(msgspec.Struct, forbid_unknown_fields=True):
    """Input of ``git_diff``: limit to ``path``; ``staged`` compares the index with HEAD."""

    path: Annotated[str, described(
        "Limit the diff to this file or folder, relative to the workspace (default '.': "
        "everything).")] = "."
    staged: Annotated[bool, described(
        "Diff the staged changes instead (default false).")] = False


class CurrentDateInput(msgspec.Struct, forbid_unknown_fields=True):
    """Input of ``current_date`` (none)."""


# --- the registry ---------------------------------------------------------------------------


class ToolSpec(NamedTuple):
    """One built-in tool: its name, the group it is loaded with, its input and what the
    model is told it does."""

    name: str
    group: str
    input: type[msgspec.Struct]
    description: str


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec("read_file", "files", ReadFileInput, (
        "Read a UTF-8 text file in the workspace. Use offset and limit to read a range of "
        "lines from a large file; long output is truncated with a note saying so."
    )),
    ToolSpec("write_file", "files", WriteFileInput, (
        "Create or overwrite a file in the workspace with the given content. Missing parent "
        "folders are created."
    )),
    ToolSpec("edit_file", "files", EditFileInput, (
        "Edit a UTF-8 text file in the workspace by exact replacement: old_text must match "
        "the file exactly (whitespace and indentation included) and occur exactly once, "
        "unless replace_all is true. Include enough surrounding lines to make it unique. "
        "Reports the line numbers that changed. Use write_file to create a file."
    )),
    ToolSpec("list_dir", "files", ListDirInput, (
        "List a folder in the workspace, sorted by name; folders end with a '/'."
    )),
    ToolSpec("run_shell", "shell", RunShellInput, (
        "Run a command with bash in the workspace folder. Returns the exit code and the "
        "combined stdout and stderr (long output is shortened in the middle). Commands that "
        "run too long are killed."
    )),
    ToolSpec("glob", "search", GlobInput, (
        "Find files in the workspace whose path matches a glob pattern, sorted by path. The "
        "pattern is relative to the folder 'path': '*' matches within one folder level, '**/' "
        "any number of folders ('**/*.py' finds Python files at any depth), '?' one "
        "character, '[abc]' a set. Symlinked folders and .git are not entered; files "
        ".gitignore leaves out and hidden folders (.venv, .cache) are skipped unless "
        "include_ignored. Long results are capped with a note."
    )),
    ToolSpec("grep", "search", GrepInput, (
        "Search the text files of the workspace for a regular expression (Python re syntax), "
        "line by line. Returns 'file:line:text' for each matching line, sorted by file; "
        "binary files, .git and credential files (.env, keys) met while walking a folder are "
        "skipped, and so are files .gitignore leaves out and hidden folders unless "
        "include_ignored. Results are capped at max_results with a note."
    )),
    ToolSpec("git_status", "git", GitStatusInput, (
        "Show the git status of the workspace (read-only): the branch, then one line per "
        "changed or untracked file in git's short format ('XY path': X the index, Y the work "
        "tree; '??' untracked). The workspace must be the top of a git repository."
    )),
    ToolSpec("git_diff", "git", GitDiffInput, (
        "Show the git diff of the workspace (read-only): unstaged changes by default, or "
        "staged ones (index against HEAD) with staged=true, optionally for one path. "
        "Untracked files do not appear; long output is shortened in the middle."
    )),
    ToolSpec("current_date", "time", CurrentDateInput, (
        "The current date, weekday and time, in UTC and in local time."
    )),
)
"""Every built-in tool, in the order the model is shown them."""


def input_schema(struct: type[msgspec.Struct]) -> dict[str, Any]:
    """The JSON schema of a tool's input Struct, as the model is sent it: the object with
    its properties, their descriptions and constraints; an optional field (``X | None =
    None``) is shown as ``X`` and not required; defaults are told in the descriptions."""
    (schema,) = msgspec.json.schema_components([struct])[1].values()
    properties: dict[str, Any] = {}
    for name, field in schema.get("properties", {}).items():
        field = dict(field)
        field.pop("default", None)
        options = field.pop("anyOf", None)
        if options:
            (kept,) = [o for o in options if o != {"type": "null"}]
            field = {**kept, **field}
        properties[name] = field
    result: dict[str, Any] = {"type": "object", "properties": properties}
    if schema.get("required"):
        result["required"] = list(schema["required"])
    result["additionalProperties"] = False
    return result


DEFINITIONS: list[dict[str, Any]] = [
    {"name": t.name, "description": t.description, "input_schema": input_schema(t.input)}
    for t in TOOLS
]
"""The tools as the Messages API's ``tools`` parameter lists them."""


#: One line per group, for the ``load_tools`` meta-tool's description; the groups in order.
TOOL_GROUP_DESCRIPTIONS: dict[str, str] = {
    "files": "read, write, edit (exact replacement) and list files in the workspace",
    "search": "find files by glob pattern and search their text with regular expressions",
    "shell": "run bash commands in the workspace",
    "git": "git status and diff of the workspace (read-only)",
    "time": "the current date and time",
}

#: Tool groups a session loads lazily (``load_tools``); every built-in tool is in one.
#: ``current_date`` has a group of its own: it is not about files, search, commands or git,
#: it is harmless and tiny, and a model that only needs the date should not have to load
#: (and be tempted by) the shell to run ``date``.
TOOL_GROUPS: dict[str, list[str]] = {
    group: [t.name for t in TOOLS if t.group == group] for group in TOOL_GROUP_DESCRIPTIONS}
