"""Undoing a session's file changes from the snapshots taken before its tool calls.

:func:`changes_to_undo` picks the snapshots (pure); :func:`undo_files` reads them, records
``FilesRestored`` on the session (saved before any file is touched, so a session that moved
on meanwhile stops the undo), then puts the files back. The session's actor runs it for
``tether undo`` while an engine runs; the command line runs it itself when none does, being
then the session's only writer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from tether.actors.paths import inside
from tether.actors.ports import Snapshot, Snapshots
from tether.events.messages import RestoredPath
from tether.events.session import Session

__all__ = ["UndoError", "changes_to_undo", "undo_files"]


class UndoError(Exception):
    """The undo cannot be done: a snapshot cannot be read, does not match what was
    recorded, or would be restored outside the workspace (nothing was restored), or the
    workspace changed during the restore (the message says so)."""


def changes_to_undo(events: Sequence[Any], to_version: int | None) -> list[Any]:
    """The ``FilesSnapshotted`` events not restored yet: the last one, or with
    ``to_version`` every one recorded after that event; oldest first."""
    restored = {i for e in events if isinstance(e, Session.FilesRestored)
                for i in e.snapshot_ids}
    taken = [e for e in events if isinstance(e, Session.FilesSnapshotted)
             and e.snapshot_id not in restored]
    if to_version is None:
        return taken[-1:]
    return [e for e in taken if e.originator_version > to_version]


BLOB = re.compile(r"\d{4}")
"""The name of a copy in a snapshot's folder."""


def checked(snapshot: Snapshot, event: Any, root: str) -> Snapshot:
    """The snapshot read from ``event``'s folder, as the store recorded it: its copies in
    that folder (whatever folder the manifest names), only the paths the event lists,
    each inside ``root``, each copy named as :class:`SnapshotStore` names them. Raises
    :class:`UndoError` naming what does not match (a manifest edited on disk)."""
    recorded = set(event.paths)
    for entry in snapshot.entries:
        if entry.path not in recorded or not inside(entry.path, root):
            raise UndoError(f"the snapshot in {event.folder} names {entry.path!r}, which "
                            "its call did not change; nothing was restored")
        named = entry.blob == "" if entry.kind == "absent" else (
            entry.kind in ("file", "dir", "symlink") and BLOB.fullmatch(entry.blob))
        if not named:
            raise UndoError(f"the snapshot in {event.folder} has an entry that is not a "
                            "copy it made; nothing was restored")
    return msgspec.structs.replace(snapshot, folder=event.folder)


def undo_files(session: Session, events: Sequence[Any], to_version: int | None,
               snapshots: Snapshots, save: Callable[[Session], object],
               root: str) -> list[RestoredPath]:
    """Undo as :func:`changes_to_undo` picks, on ``session`` (whose stored ``events`` they
    are), beneath the workspace ``root``; ``save`` stores the session. Returns what was
    put back, in the order it was; raises :class:`UndoError` before touching anything
    when a snapshot cannot be read or does not match what was recorded."""
    chosen = changes_to_undo(events, to_version)
    if not chosen:
        return []
    read: list[tuple[Any, Snapshot]] = []
    for event in reversed(chosen):  # newest first, so the oldest state wins
        try:
            snapshot = snapshots.read(event.folder)
        except (OSError, ValueError) as exc:
            raise UndoError(f"the snapshot in {event.folder} cannot be read ({exc}); "
                            "nothing was restored") from None
        snapshot = checked(snapshot, event, root)
        try:
            snapshots.check(snapshot, root)
        except OSError as exc:
            raise UndoError(f"the snapshot in {event.folder} would be restored outside the "
                            f"workspace {root} ({exc.strerror or exc}); nothing was "
                            "restored") from None
        read.append((event, snapshot))
    session.record_restore(
        snapshot_ids=[e.snapshot_id for e in chosen],
        to_version=to_version if to_version is not None else chosen[0].originator_version - 1,
        paths=list(dict.fromkeys(entry.path for _, s in read for entry in s.entries)),
    )
    save(session)
    restored: list[RestoredPath] = []
    for event, snapshot in read:
        try:
            snapshots.restore(snapshot, root)
        except OSError as exc:  # the workspace changed since the check: stop there
            raise UndoError(f"restoring {event.folder} stopped: {exc}; the undo is "
                            "recorded, but files after that one were not put back") from None
        restored += [RestoredPath(path=entry.path, removed=entry.kind == "absent",
                                  before=event.originator_version)
                     for entry in snapshot.entries]
    return restored
