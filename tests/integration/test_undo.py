"""Files a session's tool calls change are snapshotted first; `tether undo` puts them back."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from actors.runtime import ask
from adapters.fake_llm import FakeLLM
from adapters.host import Host
from events.messages import Accepted, UserMessage

SCRIPT = """
responses:
  - match: "write"
    blocks:
      - tool_use: {name: write_file, input: {path: notes.txt, content: "second version"}}
  - match: "wrote"
    blocks:
      - tool_use: {name: run_shell, input: {command: "rm old.txt && echo new > made.txt"}}
  - match: "exit code"
    blocks: [{text: "Done."}]
"""


def test_undo_restores_what_the_calls_changed(
    tmp_path: Path, workspace: Path, fake_llm: Callable[[str], FakeLLM],
    make_host: Callable[..., Host], watch_channel: Callable[..., Any],
) -> None:
    (workspace / "notes.txt").write_text("first version")
    (workspace / "old.txt").write_text("keep me")
    host = make_host(fake_llm(SCRIPT))
    channel = watch_channel(host, "test")
    sid = ask(host.bus, host.subjects.inbox,
              UserMessage(text="write the notes", channel="test"), Accepted).session_id
    channel.wait_for("completed")
    assert (workspace / "notes.txt").read_text() == "second version"
    assert not (workspace / "old.txt").exists() and (workspace / "made.txt").exists()
    snapshots = [e for e in host.app.session_events(sid)
                 if type(e).__name__ == "FilesSnapshotted"]
    assert [sorted(os.path.basename(p) for p in e.paths) for e in snapshots] == [
        ["notes.txt"], ["made.txt", "old.txt"]]
    first = snapshots[0].originator_version

    env = {**os.environ, "TETHER_STATE_DIR": host.settings.state_dir,
           "TETHER_NAMESPACE": host.settings.namespace, "TETHER_WORKSPACE": str(workspace)}
    env.pop("TETHER_DATABASE_URL", None)

    def undo(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "adapters.cli", "undo", sid, *args],
                              env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    out = undo()  # the last change only: the shell command's
    assert "old.txt" in out and (workspace / "old.txt").read_text() == "keep me"
    assert not (workspace / "made.txt").exists()
    # What it did, in its words: a file the call created is removed, not "restored".
    lines = sorted(out.splitlines())
    assert lines[0].startswith(f"removed {workspace / 'made.txt'} (it did not exist before")
    assert lines[1].startswith(f"restored {workspace / 'old.txt'} (as before event")
    assert (workspace / "notes.txt").read_text() == "second version"
    undo("--to", str(first - 1))  # everything after the first snapshot was taken
    assert (workspace / "notes.txt").read_text() == "first version"
    assert "nothing to undo" in undo()
    names = [type(e).__name__ for e in host.app.session_events(sid)]
    assert names.count("FilesRestored") == 2
