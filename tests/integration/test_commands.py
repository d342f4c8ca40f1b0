"""Chat commands end to end: /dir finds its folder in the real workspace. What the session
decides of every command (handled before the model, recorded, answered on the channel)
is tested on plain values in tests/actors/session/test_commands.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tether.actors.middleware import MiddlewareSettings
from tether.actors.runtime import ask
from tether.adapters.fake_llm import FakeLLM
from tether.adapters.host import Host
from tether.events.messages import Accepted, UserMessage

SCRIPT = """
responses:
  - match: "remember the number 42"
    blocks: [{text: "Noted."}]
"""


def test_dir_moves_to_a_folder_of_the_workspace_and_refuses_one_outside(
    workspace: Path, fake_llm: Callable[[str], FakeLLM], make_host: Callable[..., Host],
    watch_channel: Callable[..., Any],
) -> None:
    (workspace / "sub").mkdir()
    llm = fake_llm(SCRIPT)
    host = make_host(llm, middleware=MiddlewareSettings(burst=50))
    channel = watch_channel(host, "test")

    def say(text: str, sid: str = "") -> str:
        return ask(host.bus, host.subjects.inbox,
                   UserMessage(text=text, channel="test", session_id=sid), Accepted).session_id

    sid = say("remember the number 42")
    channel.wait_for("completed")
    say("/dir sub", sid)
    assert channel.wait_for("status").text == f"working directory is now {workspace / 'sub'}"
    say("/dir /etc", sid)
    assert "not a folder inside" in channel.wait_for("status").text
    session = host.app.session(sid)
    assert session is not None and session.workspace == str(workspace / "sub")
