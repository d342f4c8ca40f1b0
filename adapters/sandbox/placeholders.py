"""Placeholders: transient stand-ins for protected files that do not exist yet.

A bind mount needs something to mount on, so a protected file that is absent (no SOUL.md
in this workspace) is held by creating an empty, read-only placeholder where it would be
(and the folders on the way), which the sandbox then mounts read-only: a command can
neither write it nor remove it nor create the real file there. Once the last call using a
placeholder ends, it is removed again, if it is still the empty file (or empty folder) that
was made. A ledger file lists what stands on disk, so placeholders left by an engine that
died mid-call are removed at the next start (:meth:`Placeholders.sweep`).

Where this process may (root, on a file system that has the flag: ext4, xfs, btrfs,
tmpfs), each placeholder is also made *immutable* (``FS_IMMUTABLE_FL``): then no process
without ``CAP_LINUX_IMMUTABLE`` (none in the sandbox) can write, remove, rename or replace
it, or create anything in a placeholder folder, and it needs no mount of its own
(:meth:`Placeholders.sealed`). The flag is cleared before a placeholder is removed, by the
sweep too.

Calls that run at once share placeholders by reference count: removing one while another
sandbox holds it would detach that sandbox's mount.
"""

from __future__ import annotations

import array
import collections
import contextlib
import fcntl
import json
import os
import stat
import threading
from collections.abc import Iterator

from tether.adapters.sandbox.protected import UnholdablePath, remove_created

#: The ledger's kind for a watched path (placeholders are 0, a file, or 1, a folder).
_WATCHED = -1

# linux/fs.h: the inode flags ioctls and the immutable flag.
_GETFLAGS, _SETFLAGS, _IMMUTABLE = 0x80086601, 0x40086602, 0x10


def _flags(path: str, is_dir: bool, immutable: bool | None = None) -> int | None:
    """``path``'s inode flags (None where they cannot be read: a link, no such file, a
    file system without them); with ``immutable`` given, its immutable flag is set or
    cleared first (None where that fails)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
                     | (os.O_DIRECTORY if is_dir else 0))
    except OSError:
        return None
    try:
        flags = array.array("i", [0])
        fcntl.ioctl(fd, _GETFLAGS, flags, True)
        if immutable is not None:
            flags[0] = flags[0] | _IMMUTABLE if immutable else flags[0] & ~_IMMUTABLE
            fcntl.ioctl(fd, _SETFLAGS, flags, True)
        return flags[0]
    except OSError:
        return None
    finally:
        os.close(fd)


def _immutable(path: str) -> bool:
    """Whether the folder ``path`` carries the immutable flag."""
    return bool((_flags(path, True) or 0) & _IMMUTABLE)


def _set_immutable(path: str, is_dir: bool, on: bool) -> bool:
    """Set or clear ``path``'s immutable flag; whether it is done (not a link)."""
    return _flags(path, is_dir, on) is not None


class Placeholders:
    """Creates, shares and removes placeholders; ``ledger`` (a file path, or "" for none)
    records the ones on disk across a crash."""

    def __init__(self, ledger: str = "", *, seal: bool = True) -> None:
        self._ledger = ledger
        self._lock = threading.Lock()
        # path -> (is_dir, device, inode, users)
        self._held: dict[str, tuple[bool, int, int, int]] = {}
        self._sealed: set[str] = set()
        self._watched: collections.Counter[str] = collections.Counter()
        self._seal = seal and os.geteuid() == 0
        self._fd = -1
        self._size = 0

    @contextlib.contextmanager
    def holding(self, paths: list[tuple[str, bool]]) -> Iterator[list[str]]:
        """Placeholders for ``paths`` (``(path, is_dir)``) for the ``with`` block: yields
        every path it made or shares, folders on the way included, outermost first. A
        path that exists and is not a placeholder is left alone (not yielded)."""
        made: list[str] = []
        try:
            with self._lock:
                fresh: list[str] = []
                for path, is_dir in paths:
                    held = self._acquire(path, is_dir)
                    made.extend(held)
                    fresh += [p for p in held if self._held[p][3] == 1]
                if self._seal:  # innermost first: a sealed folder takes no new entry
                    for path in reversed(fresh):
                        if _set_immutable(path, self._held[path][0], True):
                            self._sealed.add(path)
                self._save()
            yield made
        finally:
            with self._lock:
                # Unseal what goes before removing anything: a sealed folder lets nothing
                # in it be removed.
                count = collections.Counter(made)
                for path, times in count.items():
                    if path in self._sealed and self._held[path][3] == times:
                        _set_immutable(path, self._held[path][0], False)
                        self._sealed.discard(path)
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
        except PermissionError:
            if parent in self._sealed or _immutable(parent):
                return out  # a sealed placeholder folder (ours, or another engine's) holds it
            raise
        self._held[path] = (is_dir, info.st_dev, info.st_ino, 1)
        return [*out, path]

    @contextlib.contextmanager
    def watching(self, paths: list[str]) -> Iterator[None]:
        """Record ``paths`` (absent files a call must not leave behind, such as a git
        ``commondir``) in the ledger for the ``with`` block: if this process dies meanwhile,
        the next :meth:`sweep` removes whichever of them exists."""
        if not paths:
            yield
            return
        with self._lock:
            self._watched.update(paths)
            self._save()
        try:
            yield
        finally:
            with self._lock:
                self._watched.subtract(paths)
                self._watched = +self._watched  # drop the counts at zero
                self._save()

    def sealed(self, paths: list[str]) -> set[str]:
        """Those of the held ``paths`` that are immutable (they need no mount)."""
        with self._lock:
            return {p for p in paths if p in self._sealed}

    def _release(self, path: str) -> None:
        entry = self._held.get(path)
        if entry is None:
            return
        is_dir, dev, ino, users = entry
        if users > 1:
            self._held[path] = (is_dir, dev, ino, users - 1)
            return
        del self._held[path]
        self._sealed.discard(path)
        _remove_if_same(path, is_dir, dev, ino)

    def _save(self) -> None:
        """Rewrite the ledger in place (caller holds the lock) with one write on a file kept
        open: shorter content is padded with spaces (still JSON), so the file holds a whole
        ledger whenever this process dies."""
        if not self._ledger:
            return
        entries = {p: [int(d), dev, ino] for p, (d, dev, ino, _) in self._held.items()}
        entries.update({p: [_WATCHED, 0, 0] for p in self._watched})
        data = json.dumps(entries)
        if self._fd < 0:
            os.makedirs(os.path.dirname(self._ledger) or ".", exist_ok=True)
            self._fd = os.open(self._ledger, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._size = os.fstat(self._fd).st_size
        encoded = data.encode()
        os.pwrite(self._fd, encoded.ljust(self._size), 0)
        if len(encoded) < self._size // 2:
            os.ftruncate(self._fd, len(encoded))  # after the write: the padding stays valid
            self._size = len(encoded)
        self._size = max(self._size, len(encoded))

    def close(self) -> None:
        """Close the ledger (placeholders held still stand)."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def sweep(self) -> list[str]:
        """Remove the placeholders an earlier process left (it died mid-call), and the
        watched files its calls made; returns the paths removed. Call it once at start,
        before any call runs."""
        if not self._ledger:
            return []
        try:
            with open(self._ledger, encoding="utf-8") as handle:
                data = json.load(handle)
        except (FileNotFoundError, ValueError):
            return []
        watched = [path for path, (kind, _, _) in data.items() if kind == _WATCHED]
        removed = remove_created(watched)
        entries = sorted(((p, e) for p, e in data.items() if e[0] != _WATCHED),
                         key=lambda i: -len(i[0]))
        for path, (is_dir, dev, ino) in reversed(entries):  # unsealed outermost first
            if _same(path, int(dev), int(ino)):
                _set_immutable(path, bool(is_dir), False)
        removed += [path for path, (is_dir, dev, ino) in entries
                    if _remove_if_same(path, bool(is_dir), int(dev), int(ino))]
        with self._lock:
            self._save()
        return removed


def _same(path: str, dev: int, ino: int) -> bool:
    """Whether ``path`` is still the file (device, inode) made."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (info.st_dev, info.st_ino) == (dev, ino) and not stat.S_ISLNK(info.st_mode)


def _remove_if_same(path: str, is_dir: bool, dev: int, ino: int) -> bool:
    """Remove ``path`` if it is still the empty placeholder (device, inode) made."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    if (info.st_dev, info.st_ino) != (dev, ino):
        return False
    if not stat.S_ISLNK(info.st_mode):
        _set_immutable(path, stat.S_ISDIR(info.st_mode), False)  # if it was set
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
