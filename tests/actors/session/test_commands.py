"""Chat commands decided on plain values: handled before the model, recorded, and answered
on the channel; the model never sees one.

(The folder /dir names is found by the shell: tests/actors/test_commands.py, and end to
end in tests/integration/test_commands.py.)
"""

from __future__ import annotations

import json

from tests.actors.session.driver import Core, Fed
from tether.actors.session.effects import CallModel, ResolveDir
from tether.actors.session.inputs import DirResolved
from tether.events.messages import ChannelMessage
from tether.events.session import Session


def status(fed: Fed) -> str:
    (message,) = [m for m in fed.sent(ChannelMessage) if m.kind == "status"]
    return str(message.text)


def test_commands() -> None:
    core = Core()
    calls = core.say("remember the number 42").of(CallModel)
    core.answer("Noted.")

    shown = status(core.say("/status"))
    assert "mode default" in shown and "/work/ws" in shown and "2 messages" in shown

    (resolve,) = core.say("/dir sub").of(ResolveDir)
    moved = core.feed(DirResolved(resolve.requested, "/work/ws/sub", "alice", "term"))
    assert status(moved) == "working directory is now /work/ws/sub"
    core.say("/dir /etc")
    outside = core.feed(DirResolved("/etc", None, "alice", "term"))  # the shell found none
    assert "not a folder inside" in status(outside)
    assert status(core.say("/plan")).startswith("mode is now plan; the plan goes to")
    assert status(core.say("/edit")) == "mode is now auto; auto-approved: write_file, edit_file"
    shown = status(core.say("/status"))
    assert "mode auto" in shown and "auto-approvals: write_file" in shown
    assert status(core.say("/default")) == "mode is now default"
    unknown = status(core.say("/frobnicate"))
    assert unknown.startswith("unknown command /frobnicate") and "/clear" in unknown
    assert "context cleared" in status(core.say("/clear"))
    calls += core.say("what number did I say?").of(CallModel)
    core.answer("I do not know any number.")

    # The model never saw a command, and after /clear only the new message.
    assert len(calls) == 2
    sent = json.dumps(calls[-1].request.messages)
    assert sent.count('"role": "user"') == 1 and "42" not in sent
    assert core.session.workspace == "/work/ws/sub"
    names = [type(e).__name__ for e in core.log]
    assert names.count("CommandRun") == 9 and names.count("UserMessageReceived") == 2
    modes = [(e.mode, e.auto_approve) for e in core.log if isinstance(e, Session.ModeChanged)]
    assert modes == [("plan", []), ("auto", ["write_file", "edit_file"]), ("default", [])]
    assert "ContextCleared" in names and "WorkspaceChanged" in names
