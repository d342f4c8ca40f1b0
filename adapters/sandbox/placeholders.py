"""Placeholders: transient stand-ins for protected files that do not exist yet.

A bind mount needs something to mount on, so a protected file that is absent (no SOUL.md
in this workspace) is held by creating an empty, read-only placeholder where it would be
(and the folders on the way), which the sandbox then mounts read-only: a command can
neither write it nor remove it nor create the real file there. Once the last call using a
placeholder ends, it is removed again, if it is still the empty file (or empty folder) that
was made. A ledger file lists what stands on disk, so placeholders left by an engine that
died mid-call are removed at the next start (:meth:`Placeholders.sweep`).

Calls that run at once share placeholders by reference count: removing one while another
sandbox holds it would detach that sandbox's mount.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import threading
from collections.abc import Iterator

from adapters.sandbox.protected import UnholdablePath


class Placeholders:
    """Creates, shares and removes placeholders; ``ledger`` (a file path, or "" for none)
    records the ones on disk across a crash."""

    def __init__(self, ledger: str = "") -> None:
        self._ledger = ledger
        self._lock = threading.Lock()
        # path -> (is_dir, device, inode, users)
        self._held: dict[str, tuple[bool, int, int, int]] = {}

    @contextlib.contextmanager
    def holding(self, paths: list[tuple[str, bool]]) -> Iterator[list[str]]:
        """Placeholders for ``paths`` (``(path, is_dir)``) for the ``with`` block: yields
        every path it made or shares, folders on the way included, outermost first. A
        path that exists and is not a placeholder is left alone (not yielded)."""
        made: list[str] = []
        try:
            with self._lock:
                for path, is_dir in paths:
                    made.extend(self._acquire(path, is_dir))
                self._save()
            yield made
        finally:
            with self._lock:
                for path in reversed(made):
                    self._release(path)
                self._save()

    def _acquire(self, path: str, is_dir: bool) -> list[str]:
        """Hold ``path`` and the missing folders on its way (caller holds the lock)."""
        out: list[str] = []
        parent = os.path.dirname(path)
        if not os.path.lexists(parent):
            out.extend(self._acquire(parent, True))
        elif not os.path.isdir(parent) or os.path.islink(parent):
            raise UnholdablePath(f"{parent} is not a folder")
        entry = self._held.get(path)
        if entry is not None:
            self._held[path] = (*entry[:3], entry[3] + 1)
            return [*out, path]
        try:
            if is_dir:
                os.mkdir(path, 0o755)  # read-only by its mount, not its mode
                info = os.lstat(path)
            else:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o444)
                info = os.fstat(fd)
                os.close(fd)
        except FileExistsError:
            return out  # someone made it meanwhile: it is an existing file now
        self._held[path] = (is_dir, info.st_dev, info.st_ino, 1)
        return [*out, path]

    def _release(self, path: str) -> None:
        entry = self._held.get(path)
        if entry is None:
            return
        is_dir, dev, ino, users = entry
        if users > 1:
            self._held[path] = (is_dir, dev, ino, users - 1)
            return
        del self._held[path]
        _remove_if_same(path, is_dir, dev, ino)

    def _save(self) -> None:
        if not self._ledger:
            return
        data = {p: [d, dev, ino] for p, (d, dev, ino, _) in self._held.items()}
        os.makedirs(os.path.dirname(self._ledger) or ".", exist_ok=True)
        tmp = f"{self._ledger}.tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
        os.replace(tmp, self._ledger)

    def sweep(self) -> list[str]:
        """Remove the placeholders an earlier process left (it died mid-call); returns the
        paths removed. Call it once at start, before any call runs."""
        if not self._ledger:
            return []
        try:
            with open(self._ledger, encoding="utf-8") as handle:
                data = json.load(handle)
        except (FileNotFoundError, ValueError):
            return []
        removed = [
            path
            for path, (is_dir, dev, ino) in sorted(data.items(), key=lambda i: -len(i[0]))
            if _remove_if_same(path, bool(is_dir), int(dev), int(ino))
        ]
        with self._lock:
            self._save()
        return removed


def _remove_if_same(path: str, is_dir: bool, dev: int, ino: int) -> bool:
    """Remove ``path`` if it is still the empty placeholder (device, inode) made."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    if (info.st_dev, info.st_ino) != (dev, ino):
        return False
    try:
        if is_dir and stat.S_ISDIR(info.st_mode):
            os.rmdir(path)  # fails, and stays, when something was put in it
        elif not is_dir and stat.S_ISREG(info.st_mode) and info.st_size == 0:
            os.unlink(path)
        else:
            return False
    except OSError:
        return False
    return True
