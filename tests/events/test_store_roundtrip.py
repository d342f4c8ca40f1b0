"""The typed mapper through a real store: what is saved comes back the same, typed."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import msgspec
import pytest
from eventsourcing.domain import Aggregate, event
from eventsourcing.persistence import StoredEvent

from tether.events.application import TetherApplication
from tether.events.forest import SetBookmark
from tether.events.messages import TextBlock, ToolResultBlock, ToolUseBlock, Usage
from tether.events.sandbox import SandboxLimits, SandboxProfile
from tether.events.session import Session, Turn, interrupted_result, session_uuid


def full_session(sid: str = "abc123") -> Session:
    """A session that has recorded every kind of Session event once (or more)."""
    s = Session(session_id=sid, name="fix-login-bug", workspace="/ws", model="claude-sonnet-4",
                channel="terminal")
    s.run_command(name="status", args="", user="ana", channel="web", result="ok")
    s.clear_context()
    s.compact_history(summary="[Previous conversation summary: a login fix.]", replaced=0,
                      tokens_before=9000, tokens_after=3000, budget=12000, cost_usd=0.0)
    s.move_to(node_id="n1", history=[], reason="branched by ana")
    s.change_workspace(path="/ws")
    s.change_mode(mode="plan", auto_approve=[], reason="/plan")
    s.propose_plan(plan="1. read a.py", source="file", call_id="", plan_file="/ws/p.md")
    s.review_plan(choice="proceed", feedback="", by="ana")
    s.change_mode(mode="auto", auto_approve=["write_file"], reason="plan approved by ana")
    s.fork_from(source_id="zz9", at_version=3, history=[], fired_rules=[])
    s.set_system_prompt(text="You are a coding agent.")
    s.load_tools(groups=["files"], reason="load_tools")
    s.record_provider_retry(attempt=1, error="model API error 529", delay=1.0)
    s.set_title(title="Fix the login bug", cost_usd=0.0)
    s.change_status(status="running", reason="user message")
    s.receive_user_message(text="fix the login bug", channel="web", user="ana")
    s.append_assistant_message(
        content=[
            TextBlock("Looking."),
            ToolUseBlock(id="tu_1", name="read_file", input={"path": "a.py", "lines": [1, 2]}),
            ToolUseBlock(id="tu_2", name="shell", input={"cmd": "rm -rf /"}),
            ToolUseBlock(id="tu_3", name="run_shell", input={"command": "make"}),
        ],
        stop_reason="tool_use",
        usage=Usage(input_tokens=120, output_tokens=30),
        generation=1,
    )
    s.propose_tool_call(call_id="tu_1", tool="read_file", tool_input={"path": "a.py"},
                        action_hash="h1")
    s.decide_tool_call(call_id="tu_1", decision="allow", reason="read only", tier="policy")
    s.record_snapshot(call_id="tu_1", snapshot_id="1-tu_1", folder="/state/snapshots/x",
                      paths=["/ws/a.py"])
    s.start_tool_call(call_id="tu_1", tool="read_file", sandbox=None)
    s.record_tool_result(call_id="tu_1", tool="read_file", output="print('hi')", is_error=False)
    s.record_restore(snapshot_ids=["1-tu_1"], to_version=3, paths=["/ws/a.py"])
    s.propose_tool_call(call_id="tu_2", tool="shell", tool_input={"cmd": "rm -rf /"},
                        action_hash="h2")
    s.decide_tool_call(call_id="tu_2", decision="deny", reason="destructive", tier="policy")
    s.refuse_tool_call(call_id="tu_2", reason="destructive")
    s.start_tool_call(call_id="tu_3", tool="run_shell", sandbox=SandboxProfile(
        kind="bubblewrap", network=True, granted=["/ws/AGENTS.md"],
        limits=SandboxLimits(cpu_seconds=9), wall_seconds=30.0))
    s.interrupt_tool_call(call_id="tu_3", tool="run_shell", reason="the engine stopped")
    s.record_ttsr_interruption(rules=["no-rm"], reminder="Never delete the root.", generation=2,
                               partial_text="I will now", source="text", context_mode="discard")
    s.append_assistant_message(content=[TextBlock("Fixed.")], stop_reason="end_turn",
                               usage=Usage(input_tokens=200, output_tokens=15), generation=3)
    s.complete_turn(rounds=2, usage=Usage(input_tokens=320, output_tokens=45), cost_usd=0.0123,
                    stop="end_turn")
    done = s.conversation.cursor
    s.alter_tree(operation="bookmark", node_id=done, result_id=done,
                 changes=[SetBookmark("fixed", done)])
    s.import_tree(tree=s.conversation.tree)
    s.queue_user_message(text="and the logout", channel="web", user="ana")
    s.add_ttsr_reminder(rules=["no-rm"], reminder="Remember: never delete the root.")
    s.fail_turn(error="provider timed out", kind="provider")
    s.flush_memory(path="/ws/MEMORY.md", facts=["Logins use OAuth."], heading="## 2026-01-01")
    s.fail_compaction(error="overloaded", cost_usd=0.0)
    s.start_generation(n=2, tools=False, max_tool_iterations=5, user="ana")
    s.add_alternative(content=[TextBlock("Another fix.")], stop_reason="end_turn",
                      usage=Usage(input_tokens=0, output_tokens=0), node_id="n3")
    s.drop_alternative(rules=["no-rm"])
    s.record_unchecked_stream(attempt=1)
    s.signal_waiting(reason="the turn failed")
    s.exhaust_budget(cost_usd=1.5, budget_usd=1.0)
    s.record_actor_failure(error="boom")
    s.change_status(status="completed", reason="done")
    return s


SESSION_EVENT_NAMES = {
    "Created", "UserMessageReceived", "AssistantMessageAppended", "ToolCallProposed",
    "ToolCallDecided", "ToolCallExecuted", "ToolCallRefused", "TtsrInterrupted",
    "StatusChanged", "TurnCompleted", "TurnFailed", "ActorFailed", "UserMessageQueued",
    "TtsrReminderAdded", "FilesSnapshotted", "FilesRestored", "CommandRun", "ContextCleared",
    "WorkspaceChanged", "ModeChanged", "PlanProposed", "PlanReviewed", "WaitingForInput",
    "BudgetExhausted", "Forked", "SystemPromptSet", "ToolsLoaded",
    "ProviderRetried", "TitleSet", "HistoryCompacted", "MemoryFlushed", "CompactionFailed",
    "MovedTo", "GenerationStarted", "AlternativeGenerated", "AlternativeDropped",
    "StreamUnchecked", "ToolCallStarted", "ToolCallInterrupted", "TreeAltered", "TreeImported",
}


def test_fixture_session_covers_every_session_event() -> None:
    declared = {
        name for name, value in vars(Session).items()
        if isinstance(value, type) and issubclass(value, Session.Event)
        and name not in ("Event", "Created", "Snapshot")
    } | {"Created"}
    recorded = {type(e).__name__ for e in full_session().collect_events()}
    assert declared <= SESSION_EVENT_NAMES
    assert recorded == SESSION_EVENT_NAMES


def test_session_reloaded_from_store_equals_original(app: TetherApplication) -> None:
    original = full_session()
    app.save(original)

    loaded = app.session("abc123")

    assert loaded is not None
    assert loaded == original
    assert loaded.version == 47
    assert loaded.status == "completed"
    assert (loaded.turns, loaded.input_tokens, loaded.output_tokens) == (2, 320, 45)
    assert loaded.cost_usd == pytest.approx(0.0123)
    assert loaded.failures == 1
    assert loaded.fired_rules == ["no-rm"]
    assert loaded.channel == "web"
    assert (loaded.mode, loaded.auto_approve, loaded.plan) == ("auto", ["write_file"],
                                                              "1. read a.py")
    assert [q.text for q in loaded.queued] == ["and the logout"]
    assert loaded.history == [
        Turn("user", [TextBlock("fix the login bug")]),
        Turn("assistant", [
            TextBlock("Looking."),
            ToolUseBlock(id="tu_1", name="read_file", input={"path": "a.py", "lines": [1, 2]}),
            ToolUseBlock(id="tu_2", name="shell", input={"cmd": "rm -rf /"}),
            ToolUseBlock(id="tu_3", name="run_shell", input={"command": "make"}),
        ]),
        Turn("user", [
            ToolResultBlock("tu_1", "print('hi')", False),
            ToolResultBlock("tu_2", "refused: destructive", True),
            ToolResultBlock("tu_3", interrupted_result("the engine stopped"), True),
        ]),
        Turn("user", [TextBlock("Never delete the root.")]),
        Turn("assistant", [TextBlock("Fixed.")]),
        Turn("user", [TextBlock("Remember: never delete the root.")]),
    ]
    assert loaded.pending_tool_calls() == []
    assert loaded.running_call == ""


def test_events_come_back_typed(app: TetherApplication) -> None:
    app.save(full_session())

    events = app.session_events("abc123")

    assert [e.originator_version for e in events] == list(range(1, 48))
    for e in events:
        assert isinstance(e.originator_id, uuid.UUID)
        assert e.originator_id == session_uuid("abc123")
        assert isinstance(e.timestamp, dt.datetime)
        assert e.timestamp.tzinfo is not None
    appended = next(e for e in events if type(e).__name__ == "AssistantMessageAppended")
    assert isinstance(appended.usage, Usage)
    assert [type(b) for b in appended.content] == [TextBlock, *[ToolUseBlock] * 3]
    assert appended.content[1].input == {"path": "a.py", "lines": [1, 2]}
    started = [e for e in events if type(e).__name__ == "ToolCallStarted"]
    assert started[0].sandbox is None
    assert isinstance(started[1].sandbox, SandboxProfile)
    assert started[1].sandbox.limits == SandboxLimits(cpu_seconds=9)
    completed = next(e for e in events if type(e).__name__ == "TurnCompleted")
    assert completed.usage == Usage(input_tokens=320, output_tokens=45)


def test_stored_state_is_json(app: TetherApplication) -> None:
    app.save(full_session())

    stored = app.recorder.select_events(session_uuid("abc123"))

    assert len(stored) == 47
    states = [(s.topic.rsplit(".", 1)[-1], json.loads(s.state)) for s in stored]
    by_topic: dict[str, Any] = {}
    for name, state in states:
        by_topic.setdefault(name, state)  # the first of each kind
    assert by_topic["Created"]["session_id"] == "abc123"
    assert by_topic["AssistantMessageAppended"]["content"][1] == {
        "type": "tool_use", "id": "tu_1", "name": "read_file",
        "input": {"path": "a.py", "lines": [1, 2]},
    }
    assert by_topic["AssistantMessageAppended"]["usage"] == {
        "input_tokens": 120, "output_tokens": 30,
    }
    # the envelope lives in the record's columns, not repeated in the JSON
    assert "originator_id" not in by_topic["Created"]
    dt.datetime.fromisoformat(by_topic["Created"]["timestamp"])


def test_session_at_version_is_a_replay(app: TetherApplication) -> None:
    original = full_session()
    app.save(original)

    first = app.session("abc123", version=1)
    third = app.session("abc123", version=17)
    fourth = app.session("abc123", version=18)

    assert first is not None and third is not None and fourth is not None
    assert (first.version, first.status, first.history) == (1, "starting", [])
    assert third.status == "running"
    assert third.history == [Turn("user", [TextBlock("fix the login bug")])]
    assert third.input_tokens == 0
    assert fourth.input_tokens == 120
    assert [b.id for b in fourth.pending_tool_calls()] == ["tu_1", "tu_2", "tu_3"]
    assert app.session("abc123") == original
    assert app.session("nope") is None


def test_one_save_takes_aggregates_events_alone_and_none(app: TetherApplication) -> None:
    """What the actors hand a save: aggregates (their pending events collected), events
    collected before, and None; all are recorded in one save, in the order given."""
    first = Session(session_id="s1", name="n", workspace="/ws", model="m", channel="c")
    second = Session(session_id="s2", name="n", workspace="/ws", model="m", channel="c")
    second.change_status(status="running", reason="r")
    collected = second.collect_events()

    recordings = app.save(None, first, *collected, first)

    assert [type(r.domain_event).__name__ for r in recordings] == [
        "Created", "Created", "StatusChanged"]
    assert [r.domain_event.originator_id for r in recordings] == [
        session_uuid("s1"), session_uuid("s2"), session_uuid("s2")]
    assert first.collect_events() == []  # collected by the save, recorded once
    assert app.session("s1") == first
    loaded = app.session("s2")
    assert loaded is not None and loaded.status == "running"


def test_listeners_receive_max_notification_id_after_each_save(
    app: TetherApplication,
) -> None:
    seen: list[int] = []
    remove = app.add_listener(seen.append)

    s = Session(session_id="s1", name="n", workspace="/ws", model="m", channel="c")
    app.save(s)
    after_first = app.max_notification_id()
    s.change_status(status="running", reason="r")
    s.receive_user_message(text="hi", channel="c", user="u")
    app.save(s)
    after_second = app.max_notification_id()
    remove()
    s.fail_turn(error="x")
    app.save(s)

    assert after_first >= 1
    assert after_second > after_first
    assert seen == [after_first, after_second]


# --- schema evolution -------------------------------------------------------------------


class Note(Aggregate):
    """A small aggregate whose event later gained a field with a default."""

    @event("Created")
    def __init__(self, title: str):
        self.title = title
        self.speed = 0

    class Moved(Aggregate.Event):
        place: str
        speed: int = 1  # added after records without it were stored

        def apply(self, aggregate: Any) -> None:
            aggregate.place = self.place
            aggregate.speed = self.speed

    def move(self, place: str, speed: int = 1) -> None:
        self.trigger_event(self.Moved, place=place, speed=speed)


def _store_without(app: TetherApplication, note: Note, field: str) -> None:
    """Store ``note``'s pending events as records written before ``field`` existed."""
    records = []
    for domain_event in note.collect_events():
        stored = app.mapper.to_stored_event(domain_event)
        state = json.loads(stored.state)
        state.pop(field, None)
        records.append(StoredEvent(stored.originator_id, stored.originator_version,
                                   stored.topic, json.dumps(state).encode()))
    app.recorder.insert_events(records)


def test_records_with_unknown_extra_fields_still_decode(app: TetherApplication) -> None:
    note = Note(title="t")
    note.move(place="home", speed=3)
    app.save(note)

    loaded = app.repository.get(note.id)

    assert (loaded.title, loaded.place, loaded.speed) == ("t", "home", 3)


def test_old_records_decode_after_event_gains_defaulted_field(app: TetherApplication) -> None:
    note = Note(title="t")
    note.move(place="home", speed=5)
    _store_without(app, note, "speed")

    loaded = app.repository.get(note.id)

    assert (loaded.title, loaded.place, loaded.speed) == ("t", "home", 1)


def test_state_round_trip_through_msgspec_is_stable(app: TetherApplication) -> None:
    # a second save of the reloaded aggregate appends after the replayed version
    app.save(full_session("s2"))
    loaded = app.session("s2")
    assert loaded is not None
    loaded.receive_user_message(text="again", channel="web", user="ana")
    app.save(loaded)

    again = app.session("s2")
    assert again is not None
    assert again.version == 48
    assert again.history[-1] == Turn("user", [TextBlock("again")])
    assert msgspec.json.encode(again.history) == msgspec.json.encode(loaded.history)
