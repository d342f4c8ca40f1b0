"""`tether undo` puts files back beneath the workspace only, and only as the store recorded
them: a folder swapped for a symlink, or a snapshot's manifest edited on disk, stops the
undo before anything is touched. Real snapshots on disk, a real Session aggregate."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tether.actors.undo import UndoError, undo_files
from tether.adapters.snapshots import MANIFEST, SnapshotStore
from tether.events.session import Session


class Case:
    """A workspace, a victim folder outside it, and a session whose one call changed
    ``paths`` (snapshotted first, as the session does)."""

    def __init__(self, tmp_path: Path, *relative: str) -> None:
        self.ws = tmp_path / "ws"
        self.victim = tmp_path / "victim"
        self.ws.mkdir()
        self.victim.mkdir()
        self.store = SnapshotStore(str(tmp_path / "state" / "snapshots"))
        self.session = Session(session_id="s1", name="s1", workspace=str(self.ws), model="m",
                               channel="c")
        self.paths = [str(self.ws / r) for r in relative]
        taken = self.store.take("s1", "1-call", self.paths, str(self.ws))
        self.folder = taken.folder
        self.session.record_snapshot(call_id="call", snapshot_id="1-call",
                                     folder=taken.folder, paths=self.paths)
        self.saved: list[Session] = []

    def undo(self) -> list[Any]:
        events = list(self.session.collect_events())
        return undo_files(self.session, events, None, self.store, self.saved.append,
                          str(self.ws))

    def edit_manifest(self, change: Any) -> None:
        manifest = Path(self.folder) / MANIFEST
        data = json.loads(manifest.read_text())
        change(data)
        manifest.write_text(json.dumps(data))


def test_files_folders_links_and_new_files_come_back(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("before")
    (ws / "dir").mkdir()
    (ws / "dir" / "inner.txt").write_text("inner")
    os.symlink("a.txt", ws / "link")
    store = SnapshotStore(str(tmp_path / "snapshots"))
    paths = [str(ws / "a.txt"), str(ws / "dir"), str(ws / "link"), str(ws / "new.txt")]
    taken = store.take("s1", "1-call", paths, str(ws))
    (ws / "a.txt").write_text("after")
    (ws / "dir" / "inner.txt").unlink()
    os.unlink(ws / "link")
    (ws / "new.txt").write_text("made by the call")
    session = Session(session_id="s1", name="s1", workspace=str(ws), model="m", channel="c")
    session.record_snapshot(call_id="call", snapshot_id="1-call", folder=taken.folder,
                            paths=paths)

    restored = undo_files(session, list(session.collect_events()), None, store,
                          lambda s: None, str(ws))

    assert (ws / "a.txt").read_text() == "before"
    assert (ws / "dir" / "inner.txt").read_text() == "inner"
    assert os.readlink(ws / "link") == "a.txt"
    assert not (ws / "new.txt").exists()
    assert [(r.path.rsplit("/", 1)[1], r.removed) for r in restored] == [
        ("a.txt", False), ("dir", False), ("link", False), ("new.txt", True)]


def test_a_folder_swapped_for_a_link_out_stops_the_undo(tmp_path: Path) -> None:
    case = Case(tmp_path, "sub/.bashrc")
    (case.victim / ".bashrc").write_text("the victim's own")
    (case.ws / "sub").mkdir(exist_ok=True)
    os.rename(case.ws / "sub", tmp_path / "moved")
    os.symlink(case.victim, case.ws / "sub")  # sub now leads to the victim's home

    with pytest.raises(UndoError, match="outside the workspace"):
        case.undo()

    assert (case.victim / ".bashrc").read_text() == "the victim's own"
    assert case.saved == []  # nothing recorded either


def test_a_file_the_call_made_cannot_take_a_folder_outside_with_it(tmp_path: Path) -> None:
    case = Case(tmp_path, "data/cache")  # absent when snapshotted: undo would remove it
    (case.victim / "cache").mkdir()
    (case.victim / "cache" / "precious").write_text("keep")
    os.symlink(case.victim, case.ws / "data")

    with pytest.raises(UndoError):
        case.undo()

    assert (case.victim / "cache" / "precious").read_text() == "keep"


@pytest.mark.parametrize("tamper", ["path outside", "path not recorded", "blob out",
                                    "folder elsewhere"])
def test_a_manifest_edited_on_disk_is_refused_or_ignored(tmp_path: Path, tamper: str) -> None:
    case = Case(tmp_path, "notes.txt")
    (case.ws / "notes.txt").write_text("changed by the call")
    (case.victim / "secret").write_text("the victim's secret")
    target = str(case.victim / "planted")
    if tamper == "path outside":
        case.edit_manifest(lambda m: m["entries"][0].update(path=target))
    elif tamper == "path not recorded":
        case.edit_manifest(lambda m: m["entries"][0].update(path=str(case.ws / "other")))
    elif tamper == "blob out":
        case.edit_manifest(lambda m: m["entries"][0].update(
            kind="file", blob=str(case.victim / "secret")))
    else:  # the manifest names another folder: the event's is used
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        (elsewhere / "0000").write_text("planted content")
        case.edit_manifest(lambda m: m.update(folder=str(elsewhere)))
        case.undo()
        assert not (case.ws / "notes.txt").exists()  # absent before the call: removed
        return

    with pytest.raises(UndoError, match="nothing was restored"):
        case.undo()

    assert (case.ws / "notes.txt").read_text() == "changed by the call"
    assert not Path(target).exists() and not (case.ws / "other").exists()
    assert case.saved == []


def test_snapshot_folders_are_private(tmp_path: Path) -> None:
    case = Case(tmp_path, "notes.txt")
    for folder in (Path(case.folder), Path(case.folder).parent):
        assert folder.stat().st_mode & 0o077 == 0, folder


def test_a_snapshot_never_copies_from_outside_the_workspace(tmp_path: Path) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (outside / "precious").write_text("VICTIM DATA")
    os.symlink(outside, ws / "sub")  # swapped in after the call was judged
    store = SnapshotStore(str(tmp_path / "snapshots"))
    with pytest.raises(OSError):
        store.take("s1", "1-call", [str(ws / "sub" / "precious")], str(ws))
    copies = list((tmp_path / "snapshots").rglob("*"))
    assert not any(p.is_file() and p.read_text() == "VICTIM DATA" for p in copies)

    (ws / "dir").mkdir()
    os.symlink(outside / "precious", ws / "dir" / "link")  # a link inside a copied folder
    taken = store.take("s1", "2-call", [str(ws / "dir")], str(ws))
    copied = Path(taken.folder) / taken.entries[0].blob / "link"
    assert copied.is_symlink() and os.readlink(copied) == str(outside / "precious")
