"""Chat commands are handled before the model, recorded, and answered on the channel."""

from __future__ import annotations

import json
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
  - match: "what number"
    blocks: [{text: "I do not know any number."}]
"""


def test_commands(
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
    say("/status", sid)
    status = channel.wait_for("status").text
    assert "mode default" in status and str(workspace) in status and "2 messages" in status
    say("/dir sub", sid)
    assert channel.wait_for("status").text == f"working directory is now {workspace / 'sub'}"
    say("/dir /etc", sid)
    assert "not a folder inside" in channel.wait_for("status").text
    say("/plan", sid)
    assert channel.wait_for("status").text.startswith("mode is now plan; the plan goes to")
    say("/edit", sid)
    assert channel.wait_for("status").text == (
        "mode is now auto; auto-approved: write_file, edit_file")
    say("/status", sid)
    status = channel.wait_for("status").text
    assert "mode auto" in status and "auto-approvals: write_file" in status
    say("/default", sid)
    assert channel.wait_for("status").text == "mode is now default"
    say("/frobnicate", sid)
    unknown = channel.wait_for("status").text
    assert unknown.startswith("unknown command /frobnicate") and "/clear" in unknown
    say("/clear", sid)
    assert "context cleared" in channel.wait_for("status").text
    say("what number did I say?", sid)
    channel.wait_for("completed")

    # The model never saw a command, and after /clear only the new message.
    assert len(llm.requests) == 2
    assert json.dumps(llm.requests[-1]["messages"]).count('"role": "user"') == 1
    assert "42" not in json.dumps(llm.requests[-1]["messages"])
    session = host.app.session(sid)
    assert session is not None and session.workspace == str(workspace / "sub")
    names = [type(e).__name__ for e in host.app.session_events(sid)]
    assert names.count("CommandRun") == 9 and names.count("UserMessageReceived") == 2
    modes = [(e.mode, e.auto_approve) for e in host.app.session_events(sid)
             if type(e).__name__ == "ModeChanged"]
    assert modes == [("plan", []), ("auto", ["write_file", "edit_file"]), ("default", [])]
    assert "ContextCleared" in names and "WorkspaceChanged" in names
