"""What the user sends, decided on plain values: who may send, chat commands (never
stored as messages, never sent to the model), and requests to generate."""

from __future__ import annotations

from tests.actors.session.driver import SID, Core, branch_back, calls_model
from tether.actors.session import Phase, SessionConfig
from tether.actors.session.effects import CallModel, ResolveDir
from tether.actors.session.inputs import DirResolved
from tether.events.inbox import RefusedMessage
from tether.events.messages import (
    Accepted,
    ChannelMessage,
    ErrorReply,
    Generate,
    GenerationDone,
    TextBlock,
)
from tether.events.session import Session


def status(fed: object) -> list[str]:
    return [m.text for m in fed.sent(ChannelMessage) if m.kind == "status"]  # type: ignore[attr-defined]


def test_a_stranger_is_refused_and_nothing_of_the_message_is_stored() -> None:
    core = Core()
    fed = core.say("rm -rf /", user="mallory")
    assert [e.error for e in fed.sent(ErrorReply)] == ["not_allowed"]
    (refusal,) = fed.recorded(RefusedMessage.Refused)
    assert (refusal.user, refusal.kind) == ("mallory", "not_approver")
    assert [e for e in fed.events if e.originator_id == core.session.id] == []
    assert core.session.history == [] and not calls_model(fed)


def test_a_command_is_recorded_and_answered_never_sent_to_the_model() -> None:
    core = Core()
    fed = core.say("/plan")
    assert fed.names() == ["ModeChanged", "CommandRun"]
    assert core.session.mode == "plan" and core.session.history == []
    assert status(fed)[0].startswith("mode is now plan")
    assert fed.sent(Accepted) and not calls_model(fed)


def test_clear_waits_for_the_turn_to_end() -> None:
    core = Core()
    core.say("hello")
    busy = core.say("/clear")
    assert status(busy) == ["a turn is running; send /clear again when it is done"]
    core.answer("hi")
    cleared = core.say("/clear")
    assert cleared.recorded(Session.ContextCleared) and core.session.history == []


def test_dir_asks_the_shell_for_the_folder_then_moves_there() -> None:
    core = Core()
    fed = core.say("/dir src")
    (resolve,) = fed.of(ResolveDir)
    assert (resolve.requested, resolve.current) == ("src", "/work/ws")
    # Decided, and answered, once the folder is known: never Accepted before it is saved.
    assert not fed.recorded(Session.CommandRun) and not fed.sent(Accepted)
    moved = core.feed(DirResolved("src", "/work/ws/src", "alice", "term"))
    assert moved.names() == ["WorkspaceChanged", "CommandRun"] and moved.sent(Accepted)
    assert core.session.workspace == "/work/ws/src"
    refused = core.feed(DirResolved("../..", None, "alice", "term"))
    assert status(refused) == ["'../..' is not a folder inside /work/ws/src"]


def test_stop_ends_the_running_turn_and_the_session_stays() -> None:
    core = Core()
    core.say("hello")
    fed = core.say("/stop")
    assert fed.recorded(Session.TurnFailed)[0].kind == "aborted"
    assert core.phase is Phase.IDLE and core.session.status == "running"


def test_an_unknown_command_answers_with_the_help() -> None:
    core = Core()
    fed = core.say("/frobnicate")
    assert status(fed)[0].startswith("unknown command /frobnicate.")


def test_generate_answers_the_history_without_a_new_message() -> None:
    core = Core()
    core.say("hello")
    core.answer("hi")
    refused = core.feed(Generate(session_id=SID))
    assert refused.sent(ErrorReply)[0].error == "generate_refused"  # stands at the reply
    branch_back(core)
    fed = core.feed(Generate(session_id=SID))
    assert fed.recorded(Session.GenerationStarted) and calls_model(fed)


def test_n_completions_each_become_a_branch_and_done_names_them_all() -> None:
    core = Core(SessionConfig(model="m"))
    core.say("hello")
    core.answer("one")
    branch_back(core)
    started = core.feed(Generate(session_id=SID, n=2, tools=False))
    first = core.answer("first")
    # The second completion is of the very request the first answered.
    assert first.of(CallModel)[0].request is started.of(CallModel)[0].request
    second = core.answer("second")
    (done,) = second.sent(GenerationDone)
    assert len(done.nodes) == 2
    assert second.recorded(Session.AlternativeGenerated)
    assert core.session.history[-1].content == [TextBlock("first")]
