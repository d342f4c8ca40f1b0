"""The session core's turns, decided on plain values: a message starts a turn, another
waits its turn, the reply is stored only once the rule monitor vouched for it."""

from __future__ import annotations

from tests.actors.session.driver import Core, calls_model
from tether.actors.model.prompt import WorkspaceTexts
from tether.actors.ports import TextDelta
from tether.actors.runtime import AskResult
from tether.actors.session import Phase, SessionConfig
from tether.actors.session.effects import CallModel, CancelModel, ReadWorkspace
from tether.actors.session.inputs import ModelDelta
from tether.events.messages import (
    Accepted,
    GenerationDone,
    GenerationError,
    Interrupt,
    Reminder,
    StreamDelta,
    TextBlock,
)
from tether.events.session import Session


def test_a_message_is_stored_then_the_workspace_read_then_the_model_called() -> None:
    core = Core(texts=WorkspaceTexts(identity="You are terse."))
    fed = core.say("hello")
    assert fed.names() == ["UserMessageReceived", "StatusChanged", "SystemPromptSet"]
    # The message joins the tree with the reply to it, under the prompt it is sent with.
    assert core.session.conversation.tree.nodes == {}
    assert [type(e) for e in fed.effects if type(e) in (ReadWorkspace, CallModel)] == [
        ReadWorkspace, CallModel]
    assert fed.sent(Accepted)
    request = fed.of(CallModel)[0].request
    assert "You are terse." in request.system
    assert request.messages[-1]["content"][0]["text"] == "hello"
    assert core.phase is Phase.STREAMING


def test_the_reply_is_published_stored_and_the_turn_completed() -> None:
    core = Core()
    core.say("hello")
    fed = core.answer("hi there")
    assert "".join(d.text for d in fed.sent(StreamDelta) if d.kind == "text") == "hi there"
    # The session's record; the conversation tree is derived from it, not recorded.
    assert fed.names() == ["AssistantMessageAppended", "TurnCompleted", "WaitingForInput"]
    assert [d.stop for d in fed.sent(GenerationDone)] == ["end_turn"]
    assert core.session.history[-1].content == [TextBlock("hi there")]
    assert core.phase is Phase.IDLE


def test_a_message_during_a_turn_waits_and_starts_when_it_ends() -> None:
    core = Core()
    core.say("first")
    fed = core.say("second")
    assert fed.names() == ["UserMessageQueued"]
    assert fed.sent(Accepted) and not calls_model(fed)
    ended = core.answer("one")
    assert "UserMessageReceived" in ended.names()
    assert calls_model(ended)
    assert ended.of(CallModel)[0].request.messages[-1]["content"][0]["text"] == "second"
    assert not core.session.queued


def test_deltas_of_an_aborted_call_are_dropped() -> None:
    core = Core()
    core.say("hello")
    stale = core.feed(ModelDelta(core.generation - 1, TextDelta(0, "old")))
    assert stale.effects == [] and stale.events == []


def test_a_secret_streamed_in_pieces_never_goes_out_whole() -> None:
    core = Core()
    core.say("hello")
    key = "sk-ant-api03-" + "A" * 93 + "AA"
    out = []
    for piece in ("the key is ", key[:20], key[20:], " done"):
        fed = core.feed(ModelDelta(core.generation, TextDelta(0, piece)))
        out += [d.text for d in fed.sent(StreamDelta)]
    out += [d.text for d in core.stream([TextBlock("")]).sent(StreamDelta)]
    assert key not in "".join(out) and key[20:] not in "".join(out)


def test_no_answer_from_the_monitor_fails_the_turn_before_storing_anything() -> None:
    core = Core()
    core.say("hello")
    core.stream([TextBlock("reply")])
    fed = core.feed(AskResult(f"barrier:{core.generation}", error="timeout"))
    assert "AssistantMessageAppended" not in fed.names()
    assert "TurnFailed" in fed.names()
    assert fed.sent(GenerationError)[0].kind == "failed"
    assert core.phase is Phase.IDLE


def test_an_unchecked_stream_is_asked_again_then_given_up() -> None:
    core = Core()
    core.say("hello")
    for attempt in (1, 2):
        core.stream([TextBlock("reply")])
        fed = core.barrier(clear=False, unchecked=True)
        assert fed.names() == ["StreamUnchecked"] and calls_model(fed), attempt
    core.stream([TextBlock("reply")])
    fed = core.barrier(clear=False, unchecked=True)
    assert "TurnFailed" in fed.names() and not calls_model(fed)


def test_a_rule_interrupts_the_stream_and_the_model_is_asked_again() -> None:
    core = Core()
    core.say("hello")
    core.feed(ModelDelta(core.generation, TextDelta(0, "use eval(")))
    fed = core.feed(Interrupt(session_id="s1", generation=core.generation, rules=["no-eval"],
                              reminder="Do not use eval.",
                              later=[Reminder(["style"], "Be brief.")]))
    assert fed.names() == ["TtsrInterrupted"]
    tree = core.session.conversation.tree  # the message and the reminder join the tree
    assert [n.text for n in tree.path(core.session.conversation.cursor)][1:] == [
        "hello", "Do not use eval."]
    assert fed.of(CancelModel) and calls_model(fed)
    assert core.session.history[-1].content == [TextBlock("Do not use eval.")]
    # Consecutive user messages are coalesced into one for the API.
    assert fed.of(CallModel)[0].request.messages[-1]["content"][-1]["text"] == (
        "hello\n\nDo not use eval.")
    done = core.answer("fine")
    assert "TtsrReminderAdded" in done.names()  # the non-aborting rule, after the turn


def test_a_transient_failure_is_retried_after_its_backoff_on_the_given_clock() -> None:
    from tether.actors.session.inputs import ModelFailed, SessionTick

    core = Core()
    core.say("hello")
    fed = core.feed(ModelFailed(core.generation, "overloaded", transient=True))
    assert fed.names() == ["ProviderRetried"] and core.phase is Phase.RETRYING
    core.advance(0.5)
    assert not calls_model(core.feed(SessionTick()))
    core.advance(0.5)
    assert calls_model(core.feed(SessionTick()))


def test_a_failure_that_is_not_transient_fails_the_turn() -> None:
    from tether.actors.session.inputs import ModelFailed

    core = Core()
    core.say("hello")
    fed = core.feed(ModelFailed(core.generation, "invalid request"))
    assert "TurnFailed" in fed.names()
    assert fed.sent(GenerationError)[0].kind == "provider"


def test_the_idle_timeout_and_the_safety_net_count_on_the_given_clock() -> None:
    from tether.actors.session.inputs import SessionTick

    core = Core(SessionConfig(model="m", idle_timeout=60, safety_net=15))
    core.say("hello")
    core.advance(14)
    assert core.feed(SessionTick()).events == []
    core.advance(1)
    assert core.feed(SessionTick()).names() == ["WaitingForInput"]
    core.advance(60)
    assert core.feed(SessionTick()).events == []  # once a turn
    core.answer("hi")
    core.advance(59)
    assert core.feed(SessionTick()).events == []
    core.advance(1)
    killed = core.feed(SessionTick())
    assert "StatusChanged" in killed.names() and core.session.status == "killed"


def test_a_budget_spent_fails_the_session() -> None:
    core = Core(budget_usd=0.0001)
    core.say("hello")
    fed = core.answer("expensive")
    assert "BudgetExhausted" in fed.names()
    assert core.session.status == "failed"
    assert fed.sent(GenerationError)[0].kind == "budget"


def test_a_secret_in_the_reply_is_masked_before_it_is_kept_or_sent() -> None:
    """The reply is stored and published masked, streamed or whole; the model's text is
    never kept as it came. (A secret split across deltas: the test above.)"""
    key = "sk-ant-api03-" + "Q" * 40
    core = Core()
    core.say("show me the config")
    fed = core.answer(f"The key is {key} as far as I remember.")
    assert fed.recorded(Session.TurnCompleted)
    assert all(key not in repr(effect) for effect in fed.effects)
    assert all(key not in repr(vars(event)) for event in core.log)
    streamed = "".join(d.text for d in fed.sent(StreamDelta) if d.kind == "text")
    assert streamed == "The key is [REDACTED] as far as I remember."
    (stored,) = fed.recorded(Session.AssistantMessageAppended)
    assert stored.content == [TextBlock("The key is [REDACTED] as far as I remember.")]
