"""Copy-on-write snapshots of files a tool call is about to change, and their restore.

Before an allowed call runs, the session takes a snapshot of every path the gatekeeper
found it writes or deletes: a copy of each file (or folder) that exists, and a note of
each that does not. ``tether undo`` restores them: copies come back, paths that did not
exist are removed. Snapshots live under ``<state_dir>/snapshots/<session>/<id>/``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import msgspec

from actors.ports import Snapshot, SnapshotEntry

MANIFEST = "manifest.json"


class SnapshotStore:
    """Snapshots on the local file system."""

    def __init__(self, root: str) -> None:
        self.root = Path(root)

    def take(self, session_id: str, snapshot_id: str, paths: list[str]) -> Snapshot:
        """Copy every existing path (files and folders; symlinks as links) and note the
        missing ones. Paths are absolute."""
        folder = self.root / session_id / snapshot_id
        folder.mkdir(parents=True, exist_ok=True)
        entries: list[SnapshotEntry] = []
        for index, path in enumerate(dict.fromkeys(paths)):
            blob = f"{index:04d}"
            source = Path(path)
            if source.is_symlink():
                os.symlink(os.readlink(source), folder / blob)
                kind = "symlink"
            elif source.is_dir():
                shutil.copytree(source, folder / blob, symlinks=True)
                kind = "dir"
            elif source.exists():
                shutil.copy2(source, folder / blob)
                kind = "file"
            else:
                kind = "absent"
                blob = ""
            entries.append(SnapshotEntry(path=path, kind=kind, blob=blob))
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

    def restore(self, snapshot: Snapshot) -> list[str]:
        """Put every path back as it was when the snapshot was taken; returns the paths."""
        folder = Path(snapshot.folder)
        restored = []
        for entry in snapshot.entries:
            target = Path(entry.path)
            _remove(target)
            if entry.kind == "file":
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(folder / entry.blob, target)
            elif entry.kind == "dir":
                shutil.copytree(folder / entry.blob, target, symlinks=True)
            elif entry.kind == "symlink":
                os.symlink(os.readlink(folder / entry.blob), target)
            restored.append(entry.path)
        return restored


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
