"""`tether serve` killed with SIGKILL after a turn was stored, then started again.

The test starts its own NATS server (a fault test never touches the shared one) and
stops only the processes it started.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ChannelWatcher
from tests.helpers import TETHER, Serve
from tether.actors.runtime import ask
from tether.adapters.fake_llm import FakeLLM, parse_script
from tether.adapters.nats_bus import NatsBus
from tether.adapters.nats_server import EmbeddedNats
from tether.events.messages import Accepted, UserMessage
from tether.events.subjects import Subjects

SCRIPT = """
responses:
  - match: "first"
    blocks:
      - text: "Listing the workspace."
      - tool_use: {name: list_dir, input: {path: "."}}
  - match: "notes.txt"
    blocks:
      - text: "There is one file, notes.txt."
  - match: "again"
    blocks:
      - text: "Still here after the restart."
"""

@pytest.fixture
def own_nats(tmp_path: Path) -> Iterator[EmbeddedNats]:
    server = EmbeddedNats(tmp_path / "nats").start()
    try:
        yield server
    finally:
        server.stop()



def test_serve_survives_sigkill(tmp_path: Path, own_nats: EmbeddedNats) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("remember the milk\n")
    namespace = "killtest"
    with FakeLLM(parse_script(SCRIPT)) as llm:
        env = {
            **os.environ,
            "TETHER_NATS_URL": own_nats.url,
            "TETHER_STATE_DIR": str(tmp_path / "state"),
            "TETHER_NAMESPACE": namespace,
            "TETHER_WORKSPACE": str(workspace),
            "TETHER_RULES_DIR": str(tmp_path / "rules"),
            "ANTHROPIC_BASE_URL": llm.base_url,
        }
        env.pop("ANTHROPIC_API_KEY", None)
        env.pop("TETHER_DATABASE_URL", None)
        subjects = Subjects(namespace)
        bus = NatsBus(own_nats.url)
        watcher = ChannelWatcher(bus, subjects.channel_out("cli"))
        serve = Serve(env, tmp_path / "serve.log")
        try:
            sid = ask(bus, subjects.inbox, UserMessage(text="first look", channel="cli"),
                      Accepted, timeout=15).session_id
            first = watcher.wait_for("completed", timeout=30)
            serve.kill()  # after the turn's events were stored

            listing = subprocess.run([*TETHER, "sessions"], env=env, capture_output=True,
                                     text=True, timeout=60, check=True).stdout
            assert sid in listing and "running" in listing

            serve = Serve(env, tmp_path / "serve.log")
            ask(bus, subjects.inbox,
                UserMessage(text="are you there again?", channel="cli", session_id=sid),
                Accepted, timeout=15)
            done = watcher.wait_for("completed", timeout=30)
            while done.seq <= first.seq:  # sent again: killed before it was recorded
                done = watcher.wait_for("completed", timeout=30)
            assert done.session_id == sid
            replies = [m.text for m in watcher.seen if m.kind == "reply"]
            assert replies[-1] == "Still here after the restart."

            timeline = subprocess.run([*TETHER, "events", sid], env=env, capture_output=True,
                                      text=True, timeout=60, check=True).stdout
            assert timeline.count("UserMessageReceived") == 2
            assert timeline.count("TurnCompleted") == 2
            assert "ToolCallExecuted" in timeline
            # The follow-up carried the whole history to the model.
            history = str(llm.requests[-1]["messages"])
            assert "first look" in history and "notes.txt" in history
        finally:
            assert serve.stop() in (0, -signal.SIGKILL)
            watcher.close()
            bus.close()
