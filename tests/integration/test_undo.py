"""Files a session's tool calls change are snapshotted first; `tether undo` puts them back,
through the session's actor while an engine runs (for its owner only), by itself when none
does."""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tether.actors.runtime import ask
from tether.adapters.fake_llm import FakeLLM
from tether.adapters.host import Host
from tether.events.inbox import RefusedMessage
from tether.events.messages import Accepted, UserMessage
from tether.events.session import Session

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
  - match: "carry on"
    blocks: [{text: "Carrying on."}]
"""


def undoer(host: Host, workspace: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run `tether undo` as the OS user, at another terminal, against ``host``'s state."""
    env = {**os.environ, "TETHER_STATE_DIR": host.settings.state_dir,
           "TETHER_NAMESPACE": host.settings.namespace, "TETHER_WORKSPACE": str(workspace),
           "TETHER_NATS_URL": host.settings.nats_url,
           "TETHER_DATABASE_URL": host.settings.database_url}

    def undo(sid: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tether.adapters.cli", "undo", sid, *args],
                              env=env, capture_output=True, text=True, timeout=60)

    return undo


def run_the_calls(host: Host, workspace: Path, channel: Any, user: str) -> str:
    (workspace / "notes.txt").write_text("first version")
    (workspace / "old.txt").write_text("keep me")
    sid = ask(host.bus, host.subjects.inbox,
              UserMessage(text="write the notes", channel="test", user=user),
              Accepted).session_id
    channel.wait_for("completed")
    assert (workspace / "notes.txt").read_text() == "second version"
    assert not (workspace / "old.txt").exists() and (workspace / "made.txt").exists()
    return sid


def restores(host: Host, sid: str) -> int:
    return sum(isinstance(e, Session.FilesRestored) for e in host.app.session_events(sid))


def test_undo_through_the_engine_restores_what_the_calls_changed(
    workspace: Path, fake_llm: Callable[[str], FakeLLM], make_host: Callable[..., Host],
    watch_channel: Callable[..., Any],
) -> None:
    host = make_host(fake_llm(SCRIPT))
    channel = watch_channel(host, "test")
    sid = run_the_calls(host, workspace, channel, getpass.getuser())  # the CLI's own
    snapshots = [e for e in host.app.session_events(sid)
                 if isinstance(e, Session.FilesSnapshotted)]
    assert [sorted(os.path.basename(p) for p in e.paths) for e in snapshots] == [
        ["notes.txt"], ["made.txt", "old.txt"]]
    first = snapshots[0].originator_version
    undo = undoer(host, workspace)

    out = undo(sid)  # the last change only: the shell command's
    assert out.returncode == 0, out.stderr
    assert (workspace / "old.txt").read_text() == "keep me"
    assert not (workspace / "made.txt").exists()
    # What it did, in its words: a file the call created is removed, not "restored".
    lines = sorted(out.stdout.splitlines())
    assert lines[0].startswith(f"removed {workspace / 'made.txt'} (it did not exist before")
    assert lines[1].startswith(f"restored {workspace / 'old.txt'} (as before event")
    assert (workspace / "notes.txt").read_text() == "second version"
    assert undo(sid, "--to", str(first - 1)).returncode == 0  # everything after the first
    assert (workspace / "notes.txt").read_text() == "first version"
    assert "nothing to undo" in undo(sid).stdout
    assert restores(host, sid) == 2

    # The actor wrote the undo itself, so the session goes on from it without a conflict.
    ask(host.bus, host.subjects.inbox, UserMessage(text="carry on", channel="test",
                                                   session_id=sid, user=getpass.getuser()),
        Accepted)
    channel.wait_for("completed")
    stored = host.app.session(sid)
    assert stored is not None and stored.history[-1].content[0].text == "Carrying on."


def test_only_the_owner_may_undo_while_the_engine_runs(
    workspace: Path, fake_llm: Callable[[str], FakeLLM], make_host: Callable[..., Host],
    watch_channel: Callable[..., Any],
) -> None:
    host = make_host(fake_llm(SCRIPT))
    channel = watch_channel(host, "test")
    sid = run_the_calls(host, workspace, channel, "ana")  # not the OS user running the CLI

    out = undoer(host, workspace)(sid)

    assert out.returncode == 1 and "not_allowed" in out.stderr
    assert "may not undo the file changes of" in out.stderr
    assert (workspace / "made.txt").exists() and not (workspace / "old.txt").exists()
    assert restores(host, sid) == 0
    refused = [n for n in host.app.recorder.select_notifications(start=1, limit=10_000)
               if n.topic.startswith(RefusedMessage.__module__)]
    assert refused and b"undo the file changes" in refused[-1].state  # and recorded


def test_undo_with_no_engine_running_writes_the_session_itself_for_its_owner(
    workspace: Path, fake_llm: Callable[[str], FakeLLM], make_host: Callable[..., Host],
    watch_channel: Callable[..., Any],
) -> None:
    host = make_host(fake_llm(SCRIPT + SCRIPT.replace("responses:\n", "")))
    channel = watch_channel(host, "test")
    theirs = run_the_calls(host, workspace, channel, "ana")
    made_by_ana = (workspace / "made.txt").read_text()
    mine = run_the_calls(host, workspace, channel, getpass.getuser())
    undo = undoer(host, workspace)
    host.stop()  # no engine: the command is the session's only writer

    refused = undo(theirs)  # another user's session: not without its engine either
    assert refused.returncode == 2 and "may not undo the file changes of" in refused.stderr
    assert (workspace / "made.txt").read_text() == made_by_ana

    out = undo(mine)
    assert out.returncode == 0, out.stderr
    assert (workspace / "old.txt").read_text() == "keep me"  # as before my call
    assert f"restored {workspace / 'made.txt'}" in out.stdout  # it was there before mine
