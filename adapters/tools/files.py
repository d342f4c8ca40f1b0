"""The file tools: ``read_file``, ``write_file``, ``edit_file`` and ``list_dir``.

Every path is resolved beneath the workspace's directory descriptor (:mod:`.beneath`), never
checked as a string and opened later: a symlink, a ``..`` or a folder swapped for a symlink
in the meantime cannot lead a tool out of the workspace. Writes replace the file (a new file
renamed over it), so a hard link is never written through. A final symlink that stays inside
the workspace is followed: ``write_file`` and ``edit_file`` replace its target and keep the
link. FIFOs, sockets and devices are refused ("not a regular file") without blocking.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat

from tether.actors.ports import ToolOutput
from tether.adapters.tools.base import ToolError, ToolLimits, plural
from tether.adapters.tools.beneath import (
    READ_FLAGS,
    ChangedError,
    EscapeError,
    NotRegularError,
    Root,
    closing_fd,
    confined,
    listdir_fd,
    open_beneath,
    stat_beneath,
    write_beneath,
)
from tether.adapters.tools.schemas import EditFileInput, ListDirInput, ReadFileInput, WriteFileInput

#: Errors that mean "nothing there" (a missing part, or a file where a folder was needed).
_MISSING = (errno.ENOENT, errno.ENOTDIR)


def open_to_read(root: Root, rel: str, path: str) -> tuple[int, os.stat_result]:
    """``rel`` opened for reading beneath the root, without blocking, and its ``fstat``;
    ``FileNotFoundError`` when it does not exist, :class:`NotRegularError` for a FIFO or
    socket that cannot be opened. The caller closes the descriptor."""
    try:
        fd = open_beneath(root, rel, READ_FLAGS)
    except OSError as err:
        if isinstance(err, EscapeError):
            raise
        if err.errno in _MISSING:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path) from err
        if err.errno == errno.ENXIO:  # a socket
            raise NotRegularError(path) from err
        raise
    return fd, os.fstat(fd)


def _read_regular(root: Root, rel: str, path: str) -> tuple[bytes, os.stat_result]:
    """The bytes of regular file ``rel`` (ToolError for anything else) and its ``fstat``,
    read through one descriptor."""
    try:
        fd, st = open_to_read(root, rel, path)
    except FileNotFoundError as err:
        raise ToolError(f"file not found: {path}; use write_file to create a file") from err
    except NotRegularError as err:
        raise ToolError(f"{path} is not a regular file") from err
    with closing_fd(fd):
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(f"{path} is not a regular file")
        chunks: list[bytes] = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    return b"".join(chunks), st


def _replace_file(
    root: Root,
    rel: str,
    path: str,
    data: bytes,
    *,
    make_parents: bool,
    expect: os.stat_result | None = None,
    only: str | None = None,
) -> None:
    """Replace file ``rel`` beneath the root by ``data`` (:func:`.beneath.write_beneath`:
    never through a hard link, a final symlink inside followed), with the tools' messages."""
    try:
        write_beneath(root, rel, data, make_parents=make_parents, expect=expect, only=only)
    except IsADirectoryError as err:
        raise ToolError(f"{path} is a folder; give a file path") from err
    except NotRegularError as err:
        raise ToolError(f"{path} is not a regular file") from err
    except NotADirectoryError as err:
        raise ToolError(f"cannot write {path}: a part of it is a file, not a folder") from err
    except ChangedError as err:
        raise ToolError(f"{path} was replaced (or made a link elsewhere) since it was read or "
                        f"judged; nothing was written: read it again") from err


def _relative(judged: str, workspace: str) -> str | None:
    """The workspace-relative form of the judged real path (None when none was judged)."""
    if not judged:
        return None
    return os.path.relpath(judged, os.path.realpath(workspace))


def _span(content: str, start: int, text: str) -> str:
    """``line N`` or ``lines N-M``: where ``text``, at offset ``start``, lies in ``content``."""
    first = content.count("\n", 0, start) + 1
    body = text[:-1] if text.endswith("\n") else text
    last = first + body.count("\n")
    return f"line {first}" if last == first else f"lines {first}-{last}"


class FileTools(ToolLimits):
    """Reading, writing, editing and listing files inside the workspace."""

    def _read_file(self, args: ReadFileInput, workspace: str) -> ToolOutput:
        with confined(workspace, args.path) as (root, rel):
            try:
                fd, st = open_to_read(root, rel, args.path)
            except FileNotFoundError as err:
                raise ToolError(f"file not found: {args.path}") from err
            except NotRegularError as err:
                raise ToolError(f"{args.path} is not a regular file") from err
        if stat.S_ISDIR(st.st_mode):
            os.close(fd)
            raise ToolError(f"{args.path} is a folder, not a file; use list_dir")
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise ToolError(f"{args.path} is not a regular file")
        pieces: list[str] = []
        size = 0
        shown = 0
        total = 0
        truncated = False
        with open(fd, encoding="utf-8", errors="replace", newline="") as handle:
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

    def _write_file(self, args: WriteFileInput, workspace: str, judged: str = "") -> ToolOutput:
        """``judged``: the real path the gatekeeper judged this write to land on ("" when
        none was judged); the write lands there or nowhere."""
        data = args.content.encode("utf-8")
        with confined(workspace, args.path) as (root, rel):
            _replace_file(root, rel, args.path, data, make_parents=True,
                          only=_relative(judged, workspace))
        return ToolOutput(f"wrote {len(data)} bytes to {args.path}")

    def _edit_file(self, args: EditFileInput, workspace: str, judged: str = "") -> ToolOutput:
        """``judged`` as for :meth:`_write_file`."""
        with confined(workspace, args.path) as (root, rel):
            return self._edit_beneath(args, root, rel, _relative(judged, workspace))

    @staticmethod
    def _edit_beneath(args: EditFileInput, root: Root, rel: str,
                      only: str | None = None) -> ToolOutput:
        """The edit of regular file ``rel`` beneath the root: read through one descriptor,
        written back by replacement (:func:`_replace_file`)."""
        raw, before = _read_regular(root, rel, args.path)
        if not args.old_text:
            raise ToolError(
                "old_text is empty; give the exact text to replace (write_file replaces "
                "a whole file)"
            )
        if args.old_text == args.new_text:
            raise ToolError("old_text and new_text are the same; there is nothing to change")
        try:
            content = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ToolError(
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
            raise ToolError(
                f"old_text was not found in {args.path}; it must match the file exactly, "
                f"whitespace and indentation included (read the file again and copy the "
                f"text).{hint}"
            )
        if len(offsets) > 1 and not args.replace_all:
            where = ", ".join(_span(content, o, args.old_text) for o in offsets[:20])
            more = f" and {len(offsets) - 20} more" if len(offsets) > 20 else ""
            raise ToolError(
                f"old_text occurs {len(offsets)} times in {args.path} ({where}{more}); "
                f"include more surrounding lines to make it unique, or set replace_all to "
                f"replace every occurrence"
            )
        updated = content.replace(args.old_text, args.new_text)
        _replace_file(
            root, rel, args.path, updated.encode("utf-8"), make_parents=False, expect=before,
            only=only,
        )
        growth = len(args.new_text) - len(args.old_text)
        changes = [
            f"{_span(content, o, args.old_text)} -> {_span(updated, o + i * growth, args.new_text)}"
            for i, o in enumerate(offsets[:20])
        ]
        if len(offsets) > 20:
            changes.append(f"and {len(offsets) - 20} more")
        summary = plural(len(offsets), "replacement")
        return ToolOutput(f"edited {args.path}: {summary}: {'; '.join(changes)}")

    def _list_dir(self, args: ListDirInput, workspace: str) -> ToolOutput:
        with confined(workspace, args.path) as (root, rel):
            try:
                fd, st = open_to_read(root, rel, args.path)
            except (FileNotFoundError, NotRegularError) as err:
                if isinstance(err, FileNotFoundError):
                    raise ToolError(f"folder not found: {args.path}") from err
                raise ToolError(f"{args.path} is a file, not a folder; use read_file") from err
            with closing_fd(fd):
                if not stat.S_ISDIR(st.st_mode):
                    raise ToolError(f"{args.path} is a file, not a folder; use read_file")
                entries = listdir_fd(fd)
            names = [_listed(root, rel, name, kind) for name, kind in entries]
        if not names:
            return ToolOutput(f"{args.path} is empty")
        return ToolOutput("\n".join(sorted(names)))


def _listed(root: Root, folder: str, name: str, kind: str) -> str:
    """How ``list_dir`` shows one entry: folders end in ``/``; a symlink is shown as what it
    leads to beneath the workspace, or marked when it leads out (never followed out)."""
    if kind == "dir":
        return name + "/"
    if kind != "link":
        return name
    try:
        st = stat_beneath(root, posixpath.join(folder, name))
    except EscapeError:
        return f"{name}@ (symlink leading outside the workspace)"
    except OSError:
        return name  # dangling, or a loop
    return name + "/" if stat.S_ISDIR(st.st_mode) else name
