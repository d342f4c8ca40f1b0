"""The search tools: ``glob`` and ``grep``."""

from __future__ import annotations

import os
import re

from actors.ports import ToolOutput
from actors.security.globs import glob_match

# The credential-file test tier 1 applies to read paths: grep skips such files when it
# walks a folder, so a broad search cannot read what read_file would have to ask for.
from actors.security.heuristics import _credential_kind
from adapters.tools.base import ToolError, ToolLimits, inside, plural
from adapters.tools.schemas import GlobInput, GrepInput

#: A ``grep`` line longer than this is cut (characters).
MAX_LINE_CHARS = 400
#: Folders the search tools never descend into (version-control internals).
SKIPPED_FOLDERS = frozenset({".git", ".hg", ".svn"})


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
            if inside(real, root) and os.path.isfile(real):
                found.append(os.path.relpath(full, base).replace(os.sep, "/"))
    found.sort()
    return found



class SearchTools(ToolLimits):
    """Finding files by pattern and searching their text, inside the workspace."""

    def _search_base(self, path: str, workspace: str) -> tuple[str, str]:
        """The real workspace and the real folder or file ``path`` names inside it."""
        root = os.path.realpath(workspace)
        base = self._confine(path, workspace)
        if not os.path.exists(base):
            raise ToolError(f"path not found: {path}")
        return root, base

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
        root, base = self._search_base(args.path, workspace)
        if not os.path.isdir(base):
            raise ToolError(f"{args.path} is a file, not a folder; glob searches a folder")
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
            raise ToolError(
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
            raise ToolError(f"{args.path} is not a regular file or folder")
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
