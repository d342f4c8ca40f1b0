"""How turns end and what a restart finds, decided on plain values: a kill stops what
runs, a restart mid-turn answers every call left open, compaction writes MEMORY.md first."""

from __future__ import annotations

import dataclasses

import pytest

from tests.actors.session.driver import (
    SID,
    Core,
    Fed,
    approved_run,
    eager,
    generation_events,
    read_call,
    runs,
)
from tether.actors.ports import Snapshot, TextDelta, ToolOutput
from tether.actors.session import Phase, SessionConfig, State, decide
from tether.actors.session.effects import (
    AskTitle,
    CallModel,
    CancelModel,
    Compact,
    Continue,
    StopTool,
    WriteMemory,
)
from tether.actors.session.inputs import (
    CompactionDone,
    Continued,
    MemoryWritten,
    ModelDelta,
    Recovered,
    TitleDone,
    ToolFinished,
)
from tether.events.messages import (
    GenerationError,
    InteractionSettled,
    Killed,
    KillSession,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from tether.events.session import Session


def test_a_kill_mid_call_stops_its_processes_and_answers_the_call() -> None:
    core = eager()
    core.say("go")
    call = read_call()
    core.call_tools(call)
    assert runs(core.verdict(call))
    fed = core.feed(KillSession(session_id=SID, reason="enough"))
    assert fed.of(StopTool) and fed.of(CancelModel)
    assert fed.recorded(Session.ToolCallInterrupted)
    assert fed.recorded(Session.TurnFailed)[0].kind == "killed"
    assert core.session.status == "killed" and core.phase is Phase.IDLE
    assert fed.sent(Killed) and fed.sent(GenerationError)[0].kind == "aborted"
    late = core.feed(ToolFinished(core.generation, "c1", "read_file", ToolOutput("late")))
    assert late.events == []  # what was on its way is dropped


def test_a_kill_mid_stream_ends_the_generation_with_one_aborted_error() -> None:
    core = Core()
    started = core.say("tell me a long story")
    core.feed(ModelDelta(core.generation, TextDelta(0, "Once upon a time")))
    killed = core.feed(KillSession(session_id=SID))
    assert killed.sent(Killed) and killed.of(CancelModel)
    late = core.stream([TextBlock("Once upon a time there was a long story.")])
    events = generation_events(started, killed, late)
    assert [type(e).__name__ for e in events] == ["ProviderRequest", "GenerationError"]
    assert events[-1].kind == "aborted" and events[-1].message.startswith("killed")
    assert len(started.of(CallModel)) == 1 and late.effects == []
    # The killed turn is recorded as ended; nothing of the reply is stored.
    failed = [e for e in core.log if isinstance(e, Session.TurnFailed)]
    assert [(e.kind, e.error.startswith("killed")) for e in failed] == [("killed", True)]
    names = [type(e).__name__ for e in core.log]
    assert "AssistantMessageAppended" not in names and "TurnCompleted" not in names
    assert names[-1] == "StatusChanged" and core.session.status == "killed"


def test_a_restart_mid_turn_answers_every_open_call_and_fails_the_turn() -> None:
    core = eager()
    call = read_call()
    approved_run(core, call)
    # The process stops here; a new one loads the session and recovers it.
    fresh = eager()
    fresh.state.session = core.session
    fed = fresh.feed(Recovered())
    (interrupted,) = fed.recorded(Session.ToolCallInterrupted)
    assert "the engine stopped while this call ran" in interrupted.reason
    assert fed.recorded(Session.TurnFailed)
    assert not any(c for c in core.session.pending_tool_calls())


def test_a_message_stored_before_a_restart_is_taken_up() -> None:
    core = Core()
    core.session.queue_user_message(text="waiting", channel="term", user="alice")
    core.session.collect_events()
    fed = core.feed(Recovered())
    assert fed.recorded(Session.UserMessageReceived) and fed.of(CallModel)


def compacting(core: Core) -> Compact:
    """Long turns until the history fills 70% of the budget: the compaction asked for."""
    for n in range(20):
        fed = core.say(f"question {n} " + "lorem ipsum " * 600)
        if fed.of(Compact):
            assert not fed.of(CallModel) and core.phase is Phase.COMPACTING
            return fed.of(Compact)[0]
        core.answer(f"answer {n} " + "dolor sit " * 600)
    raise AssertionError("the history never needed compacting")


def test_compaction_writes_memory_first_then_replaces_the_history() -> None:
    core = Core(SessionConfig(model="m", context_window=20_000))
    compact = compacting(core)
    answered = core.feed(CompactionDone(compact.generation, memory="- The user likes tea.",
                                        summary="They talked about lorem ipsum.",
                                        usage=Usage(1000, 100)))
    (write,) = answered.of(WriteMemory)
    assert write.facts == ["The user likes tea."] and write.today == core.now.date()
    assert not answered.recorded(Session.HistoryCompacted)  # the memory comes first
    done = core.feed(MemoryWritten("/work/ws/MEMORY.md", "## 2026-11-28",
                                   ["The user likes tea."]))
    assert done.names()[:2] == ["MemoryFlushed", "HistoryCompacted"]
    assert done.of(CallModel)
    assert "They talked about lorem ipsum." in str(core.session.history[0].content)


def test_a_failed_compaction_is_recorded_and_the_call_made_uncompacted() -> None:
    core = Core(SessionConfig(model="m", context_window=20_000))
    compact = compacting(core)
    fed = core.feed(CompactionDone(compact.generation, error="overloaded"))
    assert fed.recorded(Session.CompactionFailed) and fed.of(CallModel)
    assert not fed.of(WriteMemory)


def test_results_of_a_killed_turn_are_never_sent_to_the_model() -> None:
    core = eager()
    core.say("go")
    call = read_call()
    core.call_tools(call)
    core.feed(KillSession(session_id=SID))
    results = [b for t in core.session.history for b in t.content
               if isinstance(b, ToolResultBlock)]
    assert [r.tool_use_id for r in results] == ["c1"] and results[0].is_error


class BrokenCatalog:
    """A tool catalogue that fails when asked what the model may call."""

    def definitions(self, groups: object = None) -> list[dict[str, object]]:
        raise RuntimeError("tool registry unavailable")

    def groups(self) -> dict[str, str]:
        return {}

    def group_of(self, tool: str) -> str | None:
        return None

    def sandbox_profile(self, name: str, grant: object) -> None:
        return None


def test_a_decision_that_raises_leaves_no_event_to_be_saved_by_the_next() -> None:
    core = Core()
    core.state.env = dataclasses.replace(core.state.env, tools=BrokenCatalog())
    with pytest.raises(RuntimeError, match="tool registry unavailable"):
        core.say("hello")  # the message is decided; the turn's first call fails
    assert core.session.pending_events == []


def test_a_failure_after_a_call_ran_keeps_its_result_and_snapshot() -> None:
    core = eager()
    call = read_call()
    approved_run(core, call)
    core.state.env = dataclasses.replace(core.state.env, tools=BrokenCatalog())
    snapshot = Snapshot(id="snap", folder="/state/snap", entries=[])
    with pytest.raises(RuntimeError, match="tool registry unavailable"):
        # The result is decided and saved; going on (the next model call) fails.
        core.feed(ToolFinished(core.generation, "c1", "read_file", ToolOutput("x"), snapshot))
    names = [type(e).__name__ for e in core.log]
    assert names[-2:] == ["FilesSnapshotted", "ToolCallExecuted"]


def test_a_person_s_approval_is_saved_before_the_call_is_prepared_to_run() -> None:
    core = eager()
    core.say("go")
    call = read_call()
    core.call_tools(call)
    core.verdict(call, "escalate")
    outcome = decide(core.state, InteractionSettled(
        session_id=SID, call_id="c1", interaction_id="i1", kind="approval",
        outcome="approved", by="alice"), core.now)
    assert [type(e).__name__ for e in outcome.events] == ["ToolCallDecided"]
    assert outcome.effects == [Continue("execute")]  # the run is decided after the save
    for aggregate in outcome.aggregates:
        aggregate.collect_events()
    assert runs(core.feed(Continued("execute")))


def test_a_session_is_named_in_the_background_after_six_messages() -> None:
    core = Core()
    asked = []
    for n in range(3):
        core.say(f"question {n} about the parser")
        asked += core.answer(f"answer {n}").of(AskTitle)
    (ask,) = asked
    assert ask.request.messages  # the exchange so far goes to the title call
    fed = core.feed(TitleDone("Parser questions", Usage(50, 5)))
    (title,) = fed.recorded(Session.TitleSet)
    assert title.title == "Parser questions" and core.session.title == "Parser questions"
    assert core.feed(TitleDone("Another name")).events == []  # named once


def test_compaction_without_facts_leaves_memory_alone() -> None:
    core = Core(SessionConfig(model="m", context_window=20_000))
    compact = compacting(core)
    fed = core.feed(CompactionDone(compact.generation, memory="NONE",
                                   summary="They talked.", usage=Usage(10, 1)))
    assert not fed.of(WriteMemory) and not fed.recorded(Session.MemoryFlushed)
    assert fed.recorded(Session.HistoryCompacted) and fed.of(CallModel)


def test_a_failed_compaction_is_not_tried_again_in_the_same_turn() -> None:
    core = eager(context_window=20_000)
    compact = compacting(core)
    core.feed(CompactionDone(compact.generation, error="overloaded"))
    again = run_list_dir(core)
    assert again.of(CallModel) and not again.of(Compact)  # still over, not compacted
    core.answer("done")
    assert compacting_next(core)  # the next turn tries again


def run_list_dir(core: Core) -> Fed:
    call = ToolUseBlock(id="l1", name="list_dir", input={"path": "."})
    core.call_tools(call)
    core.verdict(call)
    return core.feed(ToolFinished(core.generation, "l1", "list_dir", ToolOutput("a")))


def compacting_next(core: Core) -> bool:
    return bool(core.say("and now?").of(Compact))


def test_a_killed_session_resumes_on_its_next_message_with_a_history_the_model_accepts() -> None:
    """A call killed while it runs is answered as of unknown outcome; the session's next
    message resumes it, and the model gets every call with its result."""
    core = eager()
    call = ToolUseBlock(id="c1", name="run_shell", input={"command": "sleep 8"})
    approved_run(core, call)
    core.feed(KillSession(session_id=SID))
    (result,) = [b for t in core.session.history for b in t.content
                 if isinstance(b, ToolResultBlock)]
    assert result.is_error and "killed" in result.content
    assert "outcome is unknown" in result.content
    fed = core.say("continue please")
    statuses = [(e.status, e.reason) for e in core.log if isinstance(e, Session.StatusChanged)]
    assert statuses[-2:] == [("killed", "killed by user"), ("running", "resumed")]
    (resumed,) = fed.of(CallModel)
    messages = resumed.request.messages
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert [b["type"] for b in messages[-1]["content"]] == ["tool_result", "text"]
    assert messages[-1]["content"][0]["tool_use_id"] == "c1"
    assert core.answer("Picking up after the kill.").recorded(Session.TurnCompleted)


def test_a_turn_cut_short_by_a_restart_counts_what_it_spent() -> None:
    """What the cut-short turn spent is not stored yet when the actor restarts (the shell
    carries it over to the reloaded state): the turn's failure counts it, and the budget
    sees it."""
    core = eager(model="claude-sonnet-4-5")
    approved_run(core, read_call())
    spent = core.state.turn.turn_usage
    assert spent.input_tokens > 0  # the model call that asked for the call
    fresh = eager(model="claude-sonnet-4-5")
    fresh.state.session = core.session
    fresh.state.turn.turn_usage = spent
    fed = fresh.feed(Recovered())
    (failed,) = fed.recorded(Session.TurnFailed)
    assert failed.cost_usd > 0
    assert fresh.session.cost_usd == pytest.approx(failed.cost_usd)


def test_a_message_stored_before_a_restart_is_answered_before_one_sent_after() -> None:
    """The process died between storing a message and starting its turn: the recovered
    session answers it first, and a message sent meanwhile waits its turn."""
    core = Core()
    core.session.queue_user_message(text="the first question", channel="term", user="alice")
    core.session.collect_events()
    (first,) = core.feed(Recovered()).of(CallModel)
    assert "the first question" in str(first.request.messages[-1])
    waits = core.say("the second question")
    assert waits.names() == ["UserMessageQueued"] and not waits.of(CallModel)
    (second,) = core.answer("A slow first answer.").of(CallModel)
    assert "the second question" in str(second.request.messages[-1])
    core.answer("The second answer.")
    assert core.session.turns == 2 and core.session.queued == []
    replies = [b.text for t in core.session.history if t.role == "assistant"
               for b in t.content if isinstance(b, TextBlock)]
    assert replies == ["A slow first answer.", "The second answer."]


def test_a_turn_cut_short_by_a_dead_process_counts_what_its_stored_replies_spent() -> None:
    """A process that dies mid-turn carries nothing over: the state loaded from the store
    brings the usage of the turn's stored model replies, so the turn's failure counts
    their cost against the budget."""
    core = eager(model="claude-sonnet-4-5")
    approved_run(core, read_call())
    stored = core.session.turn_usage
    assert stored.input_tokens > 0  # stored with the reply that asked for the call
    reloaded = eager(model="claude-sonnet-4-5")
    reloaded.state = State.of(reloaded.state.env, core.session, reloaded.now)
    fed = reloaded.feed(Recovered())
    (failed,) = fed.recorded(Session.TurnFailed)
    assert failed.cost_usd > 0
    assert reloaded.session.cost_usd == pytest.approx(failed.cost_usd)
