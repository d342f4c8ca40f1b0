"""Copy-on-write snapshots of files a tool call is about to change, and their restore.

Before an allowed call runs, the session takes a snapshot of every path the gatekeeper
found it writes or deletes: a copy of each file (or folder) that exists, and a note of
each that does not. ``tether undo`` restores them: copies come back, paths that did not
exist are removed. Snapshots live under ``<state_dir>/snapshots/<session>/<id>/`` (0700).

Both ways, every path is resolved from the workspace opened once
(:mod:`adapters.tools.beneath`): nothing is copied from, written to or removed in a place
a link leads to outside the workspace.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import msgspec

from tether.actors.ports import Snapshot, SnapshotEntry
from tether.adapters.tools.beneath import (
    closing_fd,
    mkdirs_beneath,
    open_beneath,
    open_root,
    split_beneath,
)

MANIFEST = "manifest.json"
_FOLDER = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY


class SnapshotStore:
    """Snapshots on the local file system."""

    def __init__(self, root: str) -> None:
        self.root = Path(root)

    def take(self, session_id: str, snapshot_id: str, paths: list[str],
             root: str) -> Snapshot:
        """Copy every existing path (files and folders; symlinks as links) and note the
        missing ones. Paths are absolute and inside the folder ``root`` (the workspace),
        read from ``root`` opened once, a step at a time: a folder swapped for a link
        leading out of it since the call was judged raises ``OSError``
        (:class:`~adapters.tools.beneath.EscapeError`), and nothing outside is copied."""
        folder = self.root / session_id / snapshot_id
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        for private in (self.root / session_id, folder):  # copies of the user's files
            private.mkdir(mode=0o700, exist_ok=True)
        entries: list[SnapshotEntry] = []
        with open_root(root) as base:
            for index, path in enumerate(dict.fromkeys(paths)):
                blob = f"{index:04d}"
                parent, name = split_beneath(base.relative(path))
                try:
                    dir_fd = open_beneath(base, parent, _FOLDER)
                except FileNotFoundError:  # its folder is not there yet: nor is it
                    kind = "absent"
                else:
                    with closing_fd(dir_fd):
                        kind = _copy_from(name, dir_fd, folder / blob)
                entries.append(SnapshotEntry(path=path, kind=kind,
                                             blob="" if kind == "absent" else blob))
        snapshot = Snapshot(id=snapshot_id, folder=str(folder), entries=entries)
        (folder / MANIFEST).write_bytes(msgspec.json.encode(snapshot))
        return snapshot

    def read(self, folder: str) -> Snapshot:
        """The snapshot taken into ``folder`` (its manifest); ``OSError`` when it cannot
        be read, ``ValueError`` when it is not a snapshot's."""
        with open(os.path.join(folder, MANIFEST), "rb") as fh:
            data = fh.read()
        try:
            return msgspec.json.decode(data, type=Snapshot)
        except msgspec.DecodeError as exc:
            raise ValueError(f"{os.path.join(folder, MANIFEST)}: {exc}") from None

    def check(self, snapshot: Snapshot, root: str) -> None:
        """Raise ``OSError`` (an :class:`~adapters.tools.beneath.EscapeError`) if a path of
        the snapshot lies outside ``root``, or a folder on its way there, as it stands now,
        leads out of it (a symlink swapped in); nothing is changed."""
        with open_root(root) as base:
            for entry in snapshot.entries:
                parent, _ = split_beneath(base.relative(entry.path))
                steps = [part for part in parent.split("/") if part not in ("", ".")]
                for depth in range(len(steps), 0, -1):  # the deepest folder there now
                    try:
                        os.close(open_beneath(base, "/".join(steps[:depth]), _FOLDER))
                        break
                    except FileNotFoundError:
                        continue

    def restore(self, snapshot: Snapshot, root: str) -> list[str]:
        """Put every path back as it was when the snapshot was taken, beneath the folder
        ``root`` (the workspace): each path is resolved from ``root`` opened once, a step at
        a time, so a folder swapped for a symlink leading out of it is refused
        (:class:`~adapters.tools.beneath.EscapeError`), never followed. Returns the paths."""
        folder = Path(snapshot.folder)
        restored = []
        with open_root(root) as base:
            for entry in snapshot.entries:
                parent, name = split_beneath(base.relative(entry.path))
                with closing_fd(mkdirs_beneath(base, parent)) as dir_fd:
                    _remove_at(name, dir_fd)
                    blob = folder / entry.blob
                    if entry.kind == "file":
                        _copy_file_at(blob, name, dir_fd)
                    elif entry.kind == "dir":
                        _copy_tree_at(blob, name, dir_fd)
                    elif entry.kind == "symlink":
                        os.symlink(os.readlink(blob), name, dir_fd=dir_fd)
                restored.append(entry.path)
        return restored


def _copy_from(name: str, dir_fd: int, target: Path) -> str:
    """Copy ``name`` of the folder ``dir_fd`` to ``target`` (a symlink as a link, never
    followed); its kind (``absent`` when there is nothing there)."""
    try:
        info = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return "absent"
    if stat.S_ISLNK(info.st_mode):
        os.symlink(os.readlink(name, dir_fd=dir_fd), target)
        return "symlink"
    if stat.S_ISDIR(info.st_mode):
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=dir_fd)
        with closing_fd(fd):
            target.mkdir(mode=0o700)
            for entry in os.scandir(fd):
                _copy_from(entry.name, fd, target / entry.name)
        return "dir"
    if not stat.S_ISREG(info.st_mode):
        raise OSError(f"{name} is not a file, a folder or a link: it cannot be snapshotted")
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                 dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as data, open(target, "xb") as out:
        shutil.copyfileobj(data, out)
        os.fchmod(out.fileno(), stat.S_IMODE(info.st_mode))
    return "file"


def _remove_at(name: str, dir_fd: int) -> None:
    """Remove ``name`` in the folder ``dir_fd`` (a folder with all it holds); nothing if
    it is not there. A symlink is removed itself, never followed."""
    try:
        info = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)


def _copy_file_at(source: Path, name: str, dir_fd: int) -> None:
    """Copy the file ``source`` (a regular file, opened without following a link) to a
    new file ``name`` in the folder ``dir_fd``, with its mode and times (created
    exclusively: never written through a link)."""
    src = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(src, "rb") as data:
        info = os.fstat(data.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{source} is not a copy the snapshot made")
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(data, out)
            os.fchmod(out.fileno(), stat.S_IMODE(info.st_mode))
            os.utime(out.fileno(), ns=(info.st_atime_ns, info.st_mtime_ns))


def _copy_tree_at(source: Path, name: str, dir_fd: int) -> None:
    """Copy the folder ``source`` (symlinks as links) to a new folder ``name`` in the
    folder ``dir_fd``, every step taken from the folder made before it."""
    if source.is_symlink() or not source.is_dir():
        raise OSError(f"{source} is not a copy the snapshot made")
    os.mkdir(name, 0o700, dir_fd=dir_fd)
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                 dir_fd=dir_fd)
    with closing_fd(fd):
        for entry in os.scandir(source):
            if entry.is_symlink():
                os.symlink(os.readlink(entry.path), entry.name, dir_fd=fd)
            elif entry.is_dir():
                _copy_tree_at(Path(entry.path), entry.name, fd)
            else:
                _copy_file_at(Path(entry.path), entry.name, fd)
        os.fchmod(fd, stat.S_IMODE(source.stat().st_mode))
