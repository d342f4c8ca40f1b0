"""Action requests, their hash, and enrichment (paths resolved, shell parsed, classes).

Contract of :func:`enrich`: it never raises for any payload. Everything it could not pin
down is recorded (``problems``, dynamic :class:`PathRef`) for the protection stage, which
refuses what it cannot prove safe. The only I/O is reading the file system to resolve paths
(``realpath``, ``isdir``, ``glob``, ``stat``); the clock is never read.
"""

from __future__ import annotations

import glob as globmod
import os
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal, NamedTuple

import msgspec

from tether.actors.gatekeeper.deny_lists import action_hash as _gatekeeper_action_hash
from tether.actors.gatekeeper.security.globs import expand_braces, has_glob
from tether.actors.gatekeeper.security.shell import (
    ShellCommand,
    Target,
    hosts_in,
    is_dynamic,
    parse_shell,
)
from tether.actors.paths import inside

ActionClass = Literal["read", "write", "delete", "execute", "network"]
Access = Literal["read", "write", "delete"]
ACTION_CLASSES: tuple[str, ...] = ("read", "write", "delete", "execute", "network")

__all__ = [
    "ACTION_CLASSES",
    "TOOL_SPECS",
    "ActionRequest",
    "EnrichedAction",
    "PathRef",
    "ReadOnlyTools",
    "ShellCommand",
    "ToolSpec",
    "action_hash",
    "enrich",
    "resolve_path",
]


def action_hash(type: str, payload: Mapping[str, Any]) -> str:
    """SHA-256 hex digest of the canonical JSON of ``{"type": type, "payload": payload}``
    (sorted keys, compact separators, UTF-8). Identical to
    :func:`actors.gatekeeper.deny_lists.action_hash`, which it calls."""
    return _gatekeeper_action_hash(type, payload)


class ActionRequest(msgspec.Struct, frozen=True):
    """One proposed tool call: ``type`` is the tool name, ``payload`` its input, ``time``
    when it was proposed (passed in by the caller; never read from the clock here)."""

    id: str
    type: str
    payload: dict[str, Any]
    time: datetime

    @property
    def hash(self) -> str:
        """:func:`action_hash` of this request's type and payload."""
        return action_hash(self.type, self.payload)


class PathRef(msgspec.Struct, frozen=True):
    """One path an action touches, with where it really leads.

    ``original`` is the path as written (for shell targets, after known variables were
    expanded); ``via`` names the tool field or shell form (``write_file.path``, ``>``,
    ``tee``, ``sed -i``); ``command`` indexes :attr:`EnrichedAction.commands` (-1 for tool
    fields). ``resolved`` is the absolute real path (symlinks followed, ``..`` resolved) or
    None when it cannot be known before running (``dynamic``: unknown variable, command
    substitution, ``xargs`` input, ``cd`` to an unknown folder). ``lexical`` is the absolute
    path with ``..`` folded but symlinks not followed. ``relative`` and
    ``lexical_relative`` are workspace-relative ``/`` paths (``.`` for the workspace
    itself) or None outside it. ``escapes`` is True for a relative path whose ``..`` climbs
    above the workspace at any point, even if it comes back. ``glob`` marks a pattern
    (``*``, ``?``, ``[``); the files it matched on disk are separate PathRefs. ``recursive``
    means the whole tree below the path is affected.
    """

    original: str
    access: Access
    via: str
    command: int
    resolved: str | None
    lexical: str | None
    relative: str | None
    lexical_relative: str | None
    inside: bool
    escapes: bool
    dynamic: bool
    glob: bool
    recursive: bool


class EnrichedAction(msgspec.Struct, frozen=True):
    """An :class:`ActionRequest` with everything later stages need.

    ``workspace`` is the real path of the session's workspace; ``classes`` the sorted
    action classes (read, write, delete, execute, network); ``paths`` every path touched
    (tool fields and shell targets); ``command`` the shell command (None for file tools);
    ``commands`` its simple commands; ``hosts`` network hosts named; ``problems`` what
    stopped the analysis (an unparseable command, a bad workspace, a malformed payload);
    ``tool_known`` whether the tool's fields are modelled (unknown tools are treated as
    writing every path-like field); a tool the operator declared read-only (an MCP server
    with ``trust = "read"``) counts as modelled, unless a call of it names a relative path
    from a folder Tether does not know (:func:`enrich`). ``unreadable`` lists why the judge
    cannot read the call completely (a shell construct it does not fully understand: a
    program fed on standard input, inline code, a computed command name ...); protection
    turns each into a minimum tier, so such a call is never allowed without approval.
    """

    request: ActionRequest
    hash: str
    workspace: str
    classes: tuple[str, ...]
    paths: tuple[PathRef, ...]
    command: str | None
    commands: tuple[ShellCommand, ...]
    hosts: tuple[str, ...]
    problems: tuple[str, ...]
    tool_known: bool
    unreadable: tuple[str, ...] = ()

    def touching(self, *accesses: str) -> tuple[PathRef, ...]:
        """The paths touched with one of ``accesses`` (``"write"``, ``"delete"``...)."""
        return tuple(p for p in self.paths if p.access in accesses)

    @property
    def writes(self) -> tuple[PathRef, ...]:
        """Paths written (including permission changes) or deleted."""
        return self.touching("write", "delete")


class ReadOnlyTools(NamedTuple):
    """Tools the operator declared read-only (an MCP server with ``trust = "read"``): the
    name prefix of its tools and the folder its tools take relative paths from (a stdio
    server's working folder), or None when that folder is not known here (an HTTP server,
    which may not even run on this machine)."""

    prefix: str
    cwd: str | None = None


class ToolSpec(NamedTuple):
    """How a tool's payload maps to classes, paths (key, access, default) and a command."""

    classes: tuple[str, ...]
    paths: tuple[tuple[str, Access, str | None], ...] = ()
    command: str | None = None


#: Built-in tools and the usual Claude Code tool names.
#:
#: ``edit_file`` writes its path. ``glob`` and ``grep`` read the folder (or file) ``path``
#: and nothing else: their ``pattern`` and ``glob`` are not paths of the workspace (the
#: tool refuses patterns that climb out, and a pattern matched against the disk here would
#: count every symlink that leads out of the workspace as a read outside it).
#: ``git_status`` and ``git_diff`` are ``read`` of the workspace (``git_diff``: of its
#: ``path``), not ``execute``: the command line is fixed by the tool, not written by the
#: model, and the executor switches off what a repository's configuration could make git
#: run (fsmonitor, hooks, filters, external diff, textconv) and the index refresh, so their
#: only effect is reading the repository. As ``execute`` they would be caught by every
#: policy rule about commands and refused in plan mode, where inspecting the work is the
#: point. ``git_status`` has no ``path`` field: the workspace is its default, and a
#: ``path`` slipped into its payload is still checked. ``current_date`` touches nothing.
TOOL_SPECS: Mapping[str, ToolSpec] = {
    "read_file": ToolSpec(("read",), (("path", "read", None),)),
    "write_file": ToolSpec(("write",), (("path", "write", None),)),
    "edit_file": ToolSpec(("write",), (("path", "write", None),)),
    "list_dir": ToolSpec(("read",), (("path", "read", "."),)),
    "glob": ToolSpec(("read",), (("path", "read", "."),)),
    "grep": ToolSpec(("read",), (("path", "read", "."),)),
    "run_shell": ToolSpec(("execute",), (), "command"),
    "git_status": ToolSpec(("read",), (("path", "read", "."),)),
    "git_diff": ToolSpec(("read",), (("path", "read", "."),)),
    "current_date": ToolSpec(()),
    "Read": ToolSpec(("read",), (("file_path", "read", None),)),
    "Write": ToolSpec(("write",), (("file_path", "write", None),)),
    "Edit": ToolSpec(("write",), (("file_path", "write", None),)),
    "MultiEdit": ToolSpec(("write",), (("file_path", "write", None),)),
    "NotebookEdit": ToolSpec(("write",), (("notebook_path", "write", None),)),
    "Glob": ToolSpec(("read",), (("path", "read", "."),)),
    "Grep": ToolSpec(("read",), (("path", "read", "."),)),
    "LS": ToolSpec(("read",), (("path", "read", "."),)),
    "Bash": ToolSpec(("execute",), (), "command"),
    "WebFetch": ToolSpec(("network",)),
    "WebSearch": ToolSpec(("network",)),
    "ExitPlanMode": ToolSpec(()),
    "TodoWrite": ToolSpec(()),
}

#: Payload keys taken for paths in tools that are not modelled (treated as written).
UNKNOWN_TOOL_PATH_KEYS: frozenset[str] = frozenset(
    {
        "path",
        "paths",
        "file",
        "files",
        "file_path",
        "filename",
        "filepath",
        "target",
        "destination",
        "dest",
        "source",
        "src",
        "directory",
        "dir",
        "cwd",
        "notebook_path",
        "output",
        "input",
    }
)



def _relative(path: str | None, root: str) -> str | None:
    if path is None or not inside(path, root):
        return None
    rel = os.path.relpath(path, root)
    return "." if rel == "." else rel.replace(os.sep, "/")


def _climbs_out(original: str, base: str, root: str) -> bool:
    """True when relative ``original`` taken from ``base`` steps above ``root`` anywhere."""
    if os.path.isabs(original):
        return False
    base_rel = _relative(os.path.normpath(base), root)
    if base_rel is None:
        return True
    depth = 0 if base_rel == "." else len(base_rel.split("/"))
    for part in original.split("/"):
        if part in ("", "."):
            continue
        depth = depth - 1 if part == ".." else depth + 1
        if depth < 0:
            return True
    return False


def resolve_path(
    original: str, base: str | None, root: str, home: str
) -> tuple[str | None, str | None, bool, bool]:
    """Resolve ``original`` from folder ``base`` against workspace ``root`` (a real path).

    Returns ``(resolved, lexical, escapes, dynamic)``: the real path (symlinks followed for
    every existing component; a missing tail resolves through its nearest existing parent),
    the lexically normalised absolute path, whether a relative path climbs above the
    workspace, and whether the path cannot be resolved statically (then the paths are None).
    """
    if not original or is_dynamic(original) or "\x00" in original:
        return None, None, False, True
    path = home + original[1:] if original == "~" or original.startswith("~/") else original
    if base is None and not os.path.isabs(path):
        return None, None, False, True
    start = base if base is not None else root
    joined = os.path.join(start, path)
    try:
        resolved = os.path.realpath(joined)
    except (OSError, ValueError):
        return None, None, False, True
    return resolved, os.path.normpath(joined), _climbs_out(path, start, root), False


def _make_ref(
    original: str,
    access: Access,
    via: str,
    command: int,
    base: str | None,
    root: str,
    home: str,
    *,
    recursive: bool = False,
    dynamic: bool = False,
) -> list[PathRef]:
    refs: list[PathRef] = []
    for word in expand_braces(original) if "{" in original else [original]:
        resolved, lexical, escapes, dyn = resolve_path(word, base, root, home)
        dyn = dyn or dynamic
        pattern = has_glob(word)
        refs.append(
            PathRef(
                original=word,
                access=access,
                via=via,
                command=command,
                resolved=None if dyn else resolved,
                lexical=None if dyn else lexical,
                relative=None if dyn else _relative(resolved, root),
                lexical_relative=None if dyn else _relative(lexical, root),
                inside=not dyn and resolved is not None and inside(resolved, root),
                escapes=escapes,
                dynamic=dyn,
                glob=pattern,
                recursive=recursive,
            )
        )
        if pattern and not dyn and lexical is not None:
            try:
                matches = sorted(globmod.glob(lexical))[:1000]
            except (OSError, ValueError):
                matches = []
            for match in matches:
                real = os.path.realpath(match)
                refs.append(
                    PathRef(
                        original=match,
                        access=access,
                        via=via,
                        command=command,
                        resolved=real,
                        lexical=os.path.normpath(match),
                        relative=_relative(real, root),
                        lexical_relative=_relative(os.path.normpath(match), root),
                        inside=inside(real, root),
                        escapes=escapes,
                        dynamic=False,
                        glob=False,
                        recursive=recursive,
                    )
                )
    return refs


def enrich(request: ActionRequest, workspace: str, home: str | None = None,
           read_only: tuple[str | ReadOnlyTools, ...] = ()) -> EnrichedAction:
    """Resolve and classify ``request`` for the session whose workspace is ``workspace``.

    Relative paths are taken from the workspace (for shell commands: from the folder the
    command has ``cd``-ed to); ``~`` and ``$HOME`` mean ``home`` (default: this process's
    home folder). File tools contribute their path fields; shell tools are parsed into simple
    commands whose targets become paths.

    A tool that is not modelled but whose name starts with the prefix of one of
    ``read_only`` (the operator says it only reads; a plain string is a prefix whose folder
    is unknown) is a ``read`` whose path-like fields are read, instead of an ``execute``
    writing them. Its relative paths are taken from that entry's ``cwd``, where the server
    resolves them, not from the workspace; when the folder is unknown, a call with a
    relative path is not trusted as a read and is modelled like any unknown tool (so the
    policy escalates it). Never raises; see :class:`EnrichedAction`.
    """
    home_dir = home if home is not None else os.path.expanduser("~")
    problems: list[str] = []
    if not isinstance(workspace, str) or not workspace or not os.path.isabs(workspace):
        problems.append(f"the workspace {workspace!r} is not an absolute path")
        root = os.path.realpath(workspace) if isinstance(workspace, str) and workspace else "/"
    else:
        root = os.path.realpath(workspace)
        if not os.path.isdir(root):
            problems.append(f"the workspace {workspace} does not exist or is not a folder")
    payload = request.payload if isinstance(request.payload, dict) else {}
    if not isinstance(request.payload, dict):
        problems.append("the payload is not an object")

    spec = TOOL_SPECS.get(request.type)
    declared = None if spec is not None else _read_only_entry(request.type, read_only)
    path_base = root
    if declared is not None and declared.cwd is not None:
        path_base = os.path.realpath(declared.cwd)
    trusted_read = declared is not None and (
        declared.cwd is not None or not _has_relative_path(payload, home_dir))
    unknown_access: Access = "read" if trusted_read else "write"
    classes: set[str] = set(spec.classes) if spec else {"read" if trusted_read else "execute"}
    paths: list[PathRef] = []
    commands: tuple[ShellCommand, ...] = ()
    hosts: list[str] = []
    command: str | None = None
    unreadable: list[str] = []

    if spec is not None:
        for key, access, default in spec.paths:
            value = payload.get(key, default)
            if value is None:
                problems.append(f"{request.type} needs a {key!r}")
                continue
            if not isinstance(value, str):
                problems.append(f"{request.type}.{key} is not a string")
                continue
            paths.extend(
                _make_ref(value, access, f"{request.type}.{key}", -1, root, root, home_dir)
            )
        if spec.command:
            raw = payload.get(spec.command)
            if not isinstance(raw, str):
                problems.append(f"{request.type} needs a string {spec.command!r}")
            else:
                command = raw
    else:
        for key, value in payload.items():
            if key not in UNKNOWN_TOOL_PATH_KEYS:
                continue
            values = value if isinstance(value, list) else [value]
            for item in values:
                if isinstance(item, str):
                    refs = _make_ref(item, unknown_access, f"{request.type}.{key}", -1,
                                     path_base if trusted_read else root, root, home_dir)
                    if trusted_read and not inside(path_base, root):
                        # Taken from a folder outside the workspace, a relative path does
                        # not climb out with ``..``: where it leads is judged instead.
                        refs = [msgspec.structs.replace(r, escapes=False) for r in refs]
                    paths.extend(refs)
        for key in ("url", "uri", "host"):
            if isinstance(payload.get(key), str):
                classes.add("network")
        if isinstance(payload.get("command"), str):
            command = payload["command"]

    if command is not None:
        parsed = parse_shell(command, root, home_dir)
        problems.extend(parsed.problems)
        commands = parsed.commands
        unreadable.extend(parsed.unreadable)
        for index, cmd in enumerate(commands):
            classes.update(cmd.classes)
            hosts.extend(cmd.hosts)
            unreadable.extend(cmd.unreadable)
            for target in cmd.targets:
                paths.extend(_target_refs(target, index, cmd, root, home_dir))
    if spec is not None and request.type in ("WebFetch",):
        url = payload.get("url")
        if isinstance(url, str):
            hosts.extend(hosts_in([url]))

    for ref in paths:
        classes.add(ref.access)
    return EnrichedAction(
        request=request,
        hash=action_hash(request.type, payload),
        workspace=root,
        classes=tuple(c for c in ACTION_CLASSES if c in classes),
        paths=tuple(paths),
        command=command,
        commands=commands,
        hosts=tuple(dict.fromkeys(hosts)),
        problems=tuple(problems),
        tool_known=spec is not None or trusted_read,
        unreadable=tuple(dict.fromkeys(unreadable)),
    )


def _read_only_entry(tool: str, read_only: tuple[str | ReadOnlyTools, ...]
                     ) -> ReadOnlyTools | None:
    """The first entry of ``read_only`` whose prefix starts ``tool``'s name."""
    for entry in read_only:
        declared = ReadOnlyTools(entry) if isinstance(entry, str) else entry
        if declared.prefix and tool.startswith(declared.prefix):
            return declared
    return None


def _has_relative_path(payload: Mapping[str, Any], home: str) -> bool:
    """Whether a path-like field of an unmodelled tool's ``payload`` holds a path that is
    not absolute (after ``~`` is taken as ``home``)."""
    for key, value in payload.items():
        if key not in UNKNOWN_TOOL_PATH_KEYS:
            continue
        for item in value if isinstance(value, list) else [value]:
            if not isinstance(item, str):
                continue
            path = home + item[1:] if item == "~" or item.startswith("~/") else item
            if not os.path.isabs(path):
                return True
    return False


def _target_refs(
    target: Target, index: int, cmd: ShellCommand, root: str, home: str
) -> list[PathRef]:
    """The paths ``target`` may lead to: taken from the folder the command runs in, and
    from every other folder it may run in (a ``cd`` before it that may have failed)."""
    refs: list[PathRef] = []
    absolute = target.path.startswith(("/", "~"))
    bases = [cmd.cwd] if absolute else list(dict.fromkeys([cmd.cwd, *cmd.alt_cwds]))
    for base in bases:
        refs.extend(_make_ref(
            target.path,
            target.access,
            target.via,
            index,
            base,
            root,
            home,
            recursive=target.recursive,
            dynamic=target.dynamic,
        ))
    return refs
