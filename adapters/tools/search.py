"""The search tools: ``glob`` and ``grep``.

They walk folders through directory descriptors opened beneath the workspace
(:mod:`.beneath`): a symlinked folder is never entered, a folder swapped for a symlink while
the walk runs is not followed, and a file symlink counts only when it resolves to a regular
file beneath the workspace. ``grep`` reads each file through a descriptor it checked with
``fstat``: FIFOs, sockets and devices are skipped (never block).

By default both leave out what a developer's tools leave out: files and folders the
``.gitignore`` files of the folders walked exclude (git's rules, through ``pathspec``;
each file applies below its folder), and hidden folders (``.venv``, ``.cache``...).
``include_ignored`` searches everything.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat

import pathspec

from tether.actors.gatekeeper.security.globs import glob_match

# The credential-file test tier 1 applies to read paths: grep skips such files when it
# walks a folder, so a broad search cannot read what read_file would have to ask for.
from tether.actors.gatekeeper.security.heuristics import _credential_kind
from tether.actors.ports import ToolOutput
from tether.adapters.tools.base import ToolError, ToolLimits, plural
from tether.adapters.tools.beneath import (
    READ_FLAGS,
    NotRegularError,
    Root,
    closing_fd,
    confined,
    kind_of,
    open_beneath,
    realpath_beneath,
    stat_beneath,
)
from tether.adapters.tools.files import open_to_read
from tether.adapters.tools.schemas import GlobInput, GrepInput

#: A ``grep`` line longer than this is cut (characters).
MAX_LINE_CHARS = 400
#: Folders the search tools never descend into (version-control internals).
SKIPPED_FOLDERS = frozenset({".git", ".hg", ".svn"})
_SUBDIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _shown(base: str, rel: str) -> str:
    """Workspace-relative ``/`` path of ``rel`` found below the search folder ``base``."""
    joined = posixpath.normpath(posixpath.join(base, rel))
    return joined.lstrip("/") if joined != "." else rel


def _is_file_beneath(root: Root, path: str) -> bool:
    """Does symlink ``path`` lead, beneath the root, to a regular file?"""
    try:
        return stat.S_ISREG(stat_beneath(root, path).st_mode)
    except OSError:  # leads out (EscapeError), dangling, a loop
        return False


def _read_gitignore(fd: int) -> pathspec.GitIgnoreSpec | None:
    """The ``.gitignore`` of the folder open as ``fd``, if it has a readable one."""
    try:
        ignore = os.open(".gitignore", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                         | os.O_CLOEXEC, dir_fd=fd)
    except OSError:
        return None
    with closing_fd(ignore):
        if not stat.S_ISREG(os.fstat(ignore).st_mode):
            return None
        text = os.read(ignore, 1 << 20).decode("utf-8", errors="replace")
    return pathspec.GitIgnoreSpec.from_lines(text.splitlines()) if text.strip() else None


_Rules = tuple[tuple[str, pathspec.GitIgnoreSpec], ...]
"""The ``.gitignore`` files in force: each with the folder (``prefix``) it applies below."""


def _ignored(rules: _Rules, rel: str, is_dir: bool) -> bool:
    """Whether the ``.gitignore`` files in force leave ``rel`` out (the deepest one that
    says anything about it decides, as in git)."""
    verdict = False
    for prefix, spec in rules:
        if not rel.startswith(prefix):
            continue
        below = rel[len(prefix):] + ("/" if is_dir else "")
        result = spec.check_file(below)
        if result.include is not None:
            verdict = result.include  # GitIgnoreSpec: include means "ignored"
    return verdict


def _files_under(root: Root, base_fd: int, base: str,
                 include_ignored: bool = False) -> tuple[list[str], set[str]]:
    """The regular files below the folder open as ``base_fd`` (``base`` relative to the
    root), as ``/`` paths relative to ``base``, sorted, and which of them are symlinks.

    Never leaves ``root``: each subfolder is opened from its parent's descriptor with
    ``O_NOFOLLOW`` (a symlinked folder, or one swapped for a symlink, is not entered), and a
    file symlink counts only when it leads to a regular file beneath the root. FIFOs,
    sockets and devices are left out, version-control folders skipped, unreadable folders
    passed over. Unless ``include_ignored``, what ``.gitignore`` files leave out and hidden
    folders are skipped too (see the module's docstring).
    """
    found: list[str] = []
    links: set[str] = set()
    pending: list[tuple[int, str, _Rules]] = [(os.dup(base_fd), "", ())]
    try:
        while pending:
            fd, prefix, rules = pending.pop()
            with closing_fd(fd):
                try:
                    with os.scandir(fd) as scan:
                        entries = [(e.name, kind_of(e)) for e in scan]
                except OSError:
                    continue
                if not include_ignored and (spec := _read_gitignore(fd)) is not None:
                    rules = (*rules, (prefix, spec))
                for name, kind in entries:
                    rel = prefix + name
                    if not include_ignored and (
                            (kind == "dir" and name.startswith("."))
                            or (rules and _ignored(rules, rel, kind == "dir"))):
                        continue
                    if kind == "file":
                        found.append(rel)
                    elif kind == "link":
                        if _is_file_beneath(root, posixpath.join(base, rel)):
                            found.append(rel)
                            links.add(rel)
                    elif kind == "dir" and name not in SKIPPED_FOLDERS:
                        try:
                            child = os.open(name, _SUBDIR_FLAGS, dir_fd=fd)
                        except OSError:
                            continue
                        pending.append((child, rel + "/", rules))
    finally:
        for fd, _, _ in pending:
            os.close(fd)
    found.sort()
    return found, links


class _Found:
    """What one ``grep`` found: matching lines (at most ``limit``, then ``capped``) and the
    files it skipped, by reason. Reads at most ``max_bytes + 1`` bytes of any file."""

    def __init__(self, limit: int, max_bytes: int, regex: re.Pattern[str]) -> None:
        self.limit = limit
        self.max_bytes = max_bytes
        self.regex = regex
        # One search of a whole file, in C, before its lines are tried one by one: most
        # files do not match. In multiline mode every line's match is also a match of the
        # whole text, except for \A, \Z and \r (a line loses its trailing \r).
        self.whole: re.Pattern[str] | None = None
        if "\\A" not in regex.pattern and "\\Z" not in regex.pattern:
            self.whole = re.compile(regex.pattern, regex.flags | re.MULTILINE)
        self.lines: list[str] = []
        self.skipped: dict[str, list[str]] = {"binary": [], "large": [], "credential": []}
        self.capped = False

    def search_path(self, root: Root, base: str, rel: str, is_link: bool) -> None:
        """Search file ``rel`` found below folder ``base`` by the walk: reopened beneath the
        root (gone, or now leading out: passed over) and searched only if still regular.
        A credential file is skipped, by its name or, for a symlink, its target's."""
        shown = _shown(base, rel)
        path = posixpath.join(base, rel)
        if _credential_kind(shown) is not None or (is_link and _credential_target(root, path)):
            self.skipped["credential"].append(shown)
            return
        try:
            fd = open_beneath(root, path, READ_FLAGS)
        except OSError:
            return
        with closing_fd(fd):
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode):
                self.search_fd(fd, st, shown)

    def search_fd(self, fd: int, st: os.stat_result, shown: str) -> None:
        """Search the regular file open as ``fd`` (shown as ``shown``)."""
        if st.st_size > self.max_bytes:
            self.skipped["large"].append(shown)
            return
        chunks: list[bytes] = []
        size = 0
        while size <= self.max_bytes and (chunk := os.read(fd, self.max_bytes + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
        if size > self.max_bytes:  # grew since fstat
            self.skipped["large"].append(shown)
            return
        if b"\0" in data[:8192]:
            self.skipped["binary"].append(shown)
            return
        text = data.decode("utf-8", errors="replace")
        if self.whole is not None and "\r" not in text and not self.whole.search(text):
            return  # no line can match
        pieces = text.split("\n")
        if pieces and pieces[-1] == "":
            pieces.pop()
        for number, line in enumerate(pieces, 1):
            line = line.removesuffix("\r")
            if not self.regex.search(line):
                continue
            if len(self.lines) >= self.limit:
                self.capped = True
                return
            if len(line) > MAX_LINE_CHARS:
                line = line[:MAX_LINE_CHARS] + " [line cut]"
            self.lines.append(f"{shown}:{number}:{line}")


def _credential_target(root: Root, path: str) -> bool:
    """Does symlink ``path`` lead to a credential file (by its resolved name)?"""
    try:
        return _credential_kind(realpath_beneath(root, path)) is not None
    except OSError:
        return False


class SearchTools(ToolLimits):
    """Finding files by pattern and searching their text, inside the workspace."""

    @staticmethod
    def _open_base(root: Root, rel: str, path: str) -> tuple[int, os.stat_result]:
        """The folder or file ``path`` names beneath the root, opened, and its ``fstat``."""
        try:
            return open_to_read(root, rel, path)
        except FileNotFoundError as err:
            raise ToolError(f"path not found: {path}") from err
        except NotRegularError as err:  # a socket
            raise ToolError(f"{path} is not a regular file or folder") from err

    @staticmethod
    def _check_pattern(pattern: str, field: str) -> None:
        if not pattern:
            raise ToolError(f"{field} is empty; give a glob such as '**/*.py'")
        if pattern.startswith(("/", "~")) or ".." in pattern.split("/"):
            raise ToolError(
                f"refused: {field} {pattern!r} must stay below the search folder (no leading "
                f"'/' or '~', no '..'); choose the folder with 'path'"
            )

    def _glob(self, args: GlobInput, workspace: str) -> ToolOutput:
        self._check_pattern(args.pattern, "pattern")
        with confined(workspace, args.path) as (root, rel):
            fd, st = self._open_base(root, rel, args.path)
            with closing_fd(fd):
                if not stat.S_ISDIR(st.st_mode):
                    raise ToolError(f"{args.path} is a file, not a folder; glob searches a folder")
                found, _ = _files_under(root, fd, rel, args.include_ignored)
        matches = [_shown(rel, f) for f in found if glob_match(args.pattern, f)]
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
            raise ToolError(
                f"invalid regular expression {args.pattern!r}: {err} (Python re syntax; "
                f"escape special characters such as ( [ . * + ? with a backslash)"
            ) from err
        if args.glob is not None:
            self._check_pattern(args.glob, "glob")
        limit = min(args.max_results or self.max_results, self.max_results)
        with confined(workspace, args.path) as (root, rel):
            fd, st = self._open_base(root, rel, args.path)
            with closing_fd(fd):
                if stat.S_ISDIR(st.st_mode):
                    candidates, links = _files_under(root, fd, rel, args.include_ignored)
                    if args.glob is not None:
                        use_path = "/" in args.glob
                        candidates = [
                            c
                            for c in candidates
                            if glob_match(args.glob, c if use_path else c.rsplit("/", 1)[-1])
                        ]
                    found = _Found(limit, self.max_grep_file_bytes, regex)
                    for candidate in candidates:
                        if found.capped:
                            break
                        found.search_path(root, rel, candidate, candidate in links)
                elif stat.S_ISREG(st.st_mode):
                    found = _Found(limit, self.max_grep_file_bytes, regex)
                    found.search_fd(fd, st, _shown(rel, "."))
                else:
                    raise ToolError(f"{args.path} is not a regular file or folder")
        lines, skipped, capped = found.lines, found.skipped, found.capped
        notes: list[str] = []
        if capped:
            notes.append(
                f"[results capped at {limit} matching lines; there are more: narrow the "
                f"pattern, the path or the glob, or raise max_results (up to "
                f"{self.max_results})]"
            )
        if skipped["binary"]:
            notes.append(f"[skipped {plural(len(skipped['binary']), 'binary file')}]")
        if skipped["large"]:
            notes.append(
                f"[skipped {plural(len(skipped['large']), 'file')} larger than "
                f"{self.max_grep_file_bytes} bytes: {', '.join(skipped['large'][:5])}]"
            )
        if skipped["credential"]:
            notes.append(
                f"[skipped {plural(len(skipped['credential']), 'credential file')}: "
                f"{', '.join(skipped['credential'][:5])}; name one in 'path' to search it]"
            )
        body = "\n".join(lines) if lines else f"no matches for {args.pattern!r} in {args.path}"
        text = "\n".join([body, *notes])
        return ToolOutput(self._capped(text, "narrow the pattern, the path or the glob"))
