"""The core is a function of its inputs: the same inputs give the same events, byte for
byte, stamped with the time given; and deciding opens no file, folder or socket."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from tests.actors.session.driver import SID, Core, eager, read_call
from tether.actors.ports import ToolOutput
from tether.actors.session import SessionConfig
from tether.actors.session.effects import Ask, Reply, Send
from tether.actors.session.inputs import SessionTick, ToolFinished
from tether.events.application import TetherApplication
from tether.events.messages import InteractionSettled, KillSession, ToolUseBlock

_guard = threading.local()


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if getattr(_guard, "on", False) and event.split(".")[0] in (
            "open", "os", "socket", "subprocess", "shutil", "glob", "urllib", "http"):
        raise AssertionError(f"the core touched the world: {event} {args[:2]!r}")


sys.addaudithook(_audit)


def script(core: Core) -> None:
    """A session's life: a turn with an approved tool call, a command, a tick, a kill."""
    core.say("read my notes")
    call = read_call()
    core.call_tools(call)
    core.verdict(call, "escalate")
    core.feed(InteractionSettled(session_id=SID, call_id="c1", interaction_id="i1",
                                 kind="approval", outcome="approved", by="alice"))
    core.feed(ToolFinished(core.generation, "c1", "read_file", ToolOutput("tea, not coffee")))
    core.answer("You like tea.")
    core.say("/status")
    core.advance(30)
    core.feed(SessionTick())
    core.feed(KillSession(session_id=SID, reason="done"))


def stored(core_log: list[Any]) -> list[tuple[str, bytes]]:
    mapper = TetherApplication(env={"PERSISTENCE_MODULE": "eventsourcing.popo"}).mapper
    return [(s.topic, s.state) for s in map(mapper.to_stored_event, core_log)]


def effects(run: Callable[[Core], None]) -> tuple[Core, list[tuple[str, bytes]]]:
    core = eager()
    sent: list[tuple[str, bytes]] = []
    feed = core.feed

    def recording(message: Any) -> Any:
        fed = feed(message)
        for effect in fed.effects:
            payload = effect.message if isinstance(effect, Send | Reply | Ask) else None
            sent.append((type(effect).__name__, msgspec.json.encode(payload)))
        return fed

    core.feed = recording  # type: ignore[method-assign]
    run(core)
    return core, sent


def test_the_same_inputs_give_the_same_events_and_effects_byte_for_byte() -> None:
    first, first_sent = effects(script)
    second, second_sent = effects(script)
    assert len(first.log) >= 14 and first.session.status == "killed"
    assert stored(first.log) == stored(second.log)
    assert first_sent == second_sent


def test_events_carry_the_time_the_decision_was_given() -> None:
    core = Core()
    core.advance(3600)
    fed = core.say("hello")
    assert {e.timestamp for e in fed.events} == {core.now}


def test_deciding_opens_no_file_folder_or_socket() -> None:
    core = eager()
    real = core.feed

    def guarded(message: Any) -> Any:
        _guard.on = True
        try:
            return real(message)
        finally:
            _guard.on = False

    core.feed = guarded  # type: ignore[method-assign]
    script(core)
    assert core.session.status == "killed"


def test_the_guard_itself_catches_a_file_read() -> None:
    _guard.on = True
    try:
        with pytest.raises(AssertionError, match="touched the world"):
            open("/etc/hostname").close()
    finally:
        _guard.on = False


def test_a_tool_call_is_decided_the_same_whatever_the_workspace_holds(tmp_path: Any) -> None:
    # The core never looks: a workspace that does not exist decides like any other.
    core = Core(SessionConfig(model="m", lazy_tools=False), workspace=str(tmp_path / "gone"))
    core.say("go")
    call = ToolUseBlock(id="c1", name="write_file", input={"path": "a", "content": "b"})
    assert core.call_tools(call).names()[0] == "AssistantMessageAppended"
