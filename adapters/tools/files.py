"""The file tools: ``read_file``, ``write_file``, ``edit_file`` and ``list_dir``."""

from __future__ import annotations

import os

from actors.gatekeeper_policy import resolve_in_workspace
from actors.ports import ToolOutput
from adapters.tools.base import ToolError, ToolLimits, plural
from adapters.tools.schemas import EditFileInput, ListDirInput, ReadFileInput, WriteFileInput


def _span(content: str, start: int, text: str) -> str:
    """``line N`` or ``lines N-M``: where ``text``, at offset ``start``, lies in ``content``."""
    first = content.count("\n", 0, start) + 1
    body = text[:-1] if text.endswith("\n") else text
    last = first + body.count("\n")
    return f"line {first}" if last == first else f"lines {first}-{last}"



class FileTools(ToolLimits):
    """Reading, writing, editing and listing files inside the workspace."""

    def _read_file(self, args: ReadFileInput, workspace: str) -> ToolOutput:
        target = self._confine(args.path, workspace)
        if not os.path.exists(target):
            raise ToolError(f"file not found: {args.path}")
        if os.path.isdir(target):
            raise ToolError(f"{args.path} is a folder, not a file; use list_dir")
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
            raise ToolError(f"{args.path} is a folder; give a file path")
        parent = os.path.dirname(target)
        os.makedirs(parent, exist_ok=True)
        # Folders just created cannot be symlinks, but check the result once more.
        if resolve_in_workspace(parent, workspace) is None:
            raise ToolError(f"refused: path {args.path} is outside the workspace {workspace}")
        data = args.content.encode("utf-8")
        with open(target, "wb") as handle:
            handle.write(data)
        return ToolOutput(f"wrote {len(data)} bytes to {args.path}")

    def _edit_file(self, args: EditFileInput, workspace: str) -> ToolOutput:
        target = self._confine(args.path, workspace)
        if not os.path.exists(target):
            raise ToolError(f"file not found: {args.path}; use write_file to create a file")
        if not os.path.isfile(target):
            raise ToolError(f"{args.path} is not a regular file")
        if not args.old_text:
            raise ToolError(
                "old_text is empty; give the exact text to replace (write_file replaces "
                "a whole file)"
            )
        if args.old_text == args.new_text:
            raise ToolError("old_text and new_text are the same; there is nothing to change")
        with open(target, "rb") as handle:
            raw = handle.read()
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
        with open(target, "wb") as handle:
            handle.write(updated.encode("utf-8"))
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
        target = self._confine(args.path, workspace)
        if not os.path.exists(target):
            raise ToolError(f"folder not found: {args.path}")
        if not os.path.isdir(target):
            raise ToolError(f"{args.path} is a file, not a folder; use read_file")
        with os.scandir(target) as entries:
            names = sorted(e.name + ("/" if e.is_dir() else "") for e in entries)
        if not names:
            return ToolOutput(f"{args.path} is empty")
        return ToolOutput("\n".join(names))
