"""What a chat is told about each kind of session event."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from tether.events.messages import TextBlock, ToolUseBlock, Usage
from tether.events.session import Session
from tether.projections.notices import ARG_PREVIEW, ENDINGS, Planned, notice_for, plan_notices

ENVELOPE = ("originator_id", "originator_version", "timestamp", "originator_topic")


def relayed(session: Session) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of the session's pending events, as the relay publishes them."""
    out = []
    for e in session.collect_events():
        data = {k: v for k, v in vars(e).items() if k not in ENVELOPE}
        out.append((type(e).__name__, msgspec.to_builtins(data)))
    return out


def one(session: Session) -> tuple[str, dict[str, Any]]:
    events = relayed(session)
    return events[-1]


@pytest.fixture
def session() -> Session:
    s = Session(session_id="s1", name="n", workspace="/ws", model="m", channel="c")
    s.collect_events()
    return s


def test_created_and_user_message_are_silent(session: Session) -> None:
    fresh = Session(session_id="s2", name="n", workspace="/ws", model="m", channel="c")
    fresh.receive_user_message(text="hi", channel="c", user="u")
    for name, data in relayed(fresh):
        assert notice_for(name, data) is None


def test_assistant_reply_joins_text_blocks(session: Session) -> None:
    session.append_assistant_message(
        content=[TextBlock("Hello "), ToolUseBlock("t", "shell", {}), TextBlock("world")],
        stop_reason="end_turn", usage=Usage(1, 1), generation=1,
    )
    assert notice_for(*one(session)) == ("reply", "Hello world")


def test_assistant_message_with_only_tools_is_silent(session: Session) -> None:
    session.append_assistant_message(
        content=[TextBlock("  \n"), ToolUseBlock("t", "shell", {"cmd": "ls"})],
        stop_reason="tool_use", usage=Usage(1, 1), generation=1,
    )
    assert notice_for(*one(session)) is None


def test_tool_proposed_shows_tool_and_arguments(session: Session) -> None:
    session.propose_tool_call(call_id="c", tool="shell", tool_input={"cmd": "ls -la", "n": 3},
                              action_hash="h")
    assert notice_for(*one(session)) == ("tool", "→ shell(cmd=ls -la, n=3)")


def test_long_tool_arguments_are_cut(session: Session) -> None:
    session.propose_tool_call(call_id="c", tool="write_file",
                              tool_input={"path": "a.py", "content": "x" * 500}, action_hash="h")
    kind, text = notice_for(*one(session)) or ("", "")
    assert kind == "tool"
    assert text.startswith("→ write_file(path=a.py, content=xxx")
    inner = text[len("→ write_file(") : -1]
    assert len(inner) == ARG_PREVIEW and inner.endswith("…")


def test_denied_decision_says_tier_and_reason(session: Session) -> None:
    session.decide_tool_call(call_id="c", decision="deny", reason="destructive command",
                             tier="policy")
    assert notice_for(*one(session)) == ("tool", "✗ denied (policy): destructive command")


def test_allowed_decision_is_silent(session: Session) -> None:
    session.decide_tool_call(call_id="c", decision="allow", reason="ok", tier="policy")
    assert notice_for(*one(session)) is None


def test_tool_executed_shows_first_output_line(session: Session) -> None:
    session.record_tool_result(call_id="c", tool="shell", output="\n a.py\nb.py\n",
                               is_error=False)
    assert notice_for(*one(session)) == ("tool", "✓ shell: a.py")
    session.record_tool_result(call_id="c", tool="shell", output="no such file", is_error=True)
    assert notice_for(*one(session)) == ("tool", "✗ shell: no such file")
    session.record_tool_result(call_id="c", tool="shell", output="", is_error=False)
    assert notice_for(*one(session)) == ("tool", "✓ shell: ")


def test_refused_tool_is_silent(session: Session) -> None:
    session.refuse_tool_call(call_id="c", reason="denied")
    assert notice_for(*one(session)) is None


def test_ttsr_interruption_names_the_rules(session: Session) -> None:
    session.record_ttsr_interruption(rules=["no-rm", "no-sudo"], reminder="r", generation=1,
                                     partial_text="p", source="text", context_mode="discard")
    assert notice_for(*one(session)) == (
        "interrupted", "rule no-rm, no-sudo interrupted the reply; retrying"
    )


def test_turn_completed_summarises_usage_and_cost(session: Session) -> None:
    session.complete_turn(rounds=3, usage=Usage(1200, 340), cost_usd=0.01234, stop="end_turn")
    assert notice_for(*one(session)) == (
        "completed", "done: 3 round(s), 1200 in / 340 out tokens, $0.0123"
    )
    session.complete_turn(rounds=10, usage=Usage(5, 6), cost_usd=0.0, stop="round_limit")
    assert notice_for(*one(session)) == (
        "completed", "done: 10 round(s), 5 in / 6 out tokens, $0.0000; stopped at the round "
        "limit (10 rounds) while the model still wanted tools: send a message to let it go on"
    )


def test_turn_failed(session: Session) -> None:
    session.fail_turn(error="provider timed out")
    assert notice_for(*one(session)) == ("failed", "the turn failed: provider timed out")


def test_status_killed_is_announced_other_statuses_are_not(session: Session) -> None:
    session.change_status(status="killed", reason="killed by user")
    assert notice_for(*one(session)) == ("status", "session killed: killed by user")
    for status in ("running", "waiting", "completed", "failed"):
        session.change_status(status=status, reason="x")
        assert notice_for(*one(session)) is None


def test_actor_failure_is_silent(session: Session) -> None:
    session.record_actor_failure(error="boom")
    assert notice_for(*one(session)) is None


def test_unknown_event_is_silent() -> None:
    assert notice_for("SomethingNew", {}) is None


# --- plan_notices: who gets each notice ---------------------------------------------------


def test_endings_are_the_turn_and_session_enders() -> None:
    assert frozenset({"completed", "failed", "budget"}) == ENDINGS


def test_assistant_text_goes_to_watchers_as_a_reply(session: Session) -> None:
    session.append_assistant_message(
        content=[TextBlock("Hello "), ToolUseBlock("t", "shell", {}), TextBlock("world")],
        stop_reason="end_turn", usage=Usage(1, 1), generation=1,
    )
    assert plan_notices(*one(session)) == [Planned("reply", "Hello world", "watchers")]


def test_assistant_message_without_text_plans_nothing(session: Session) -> None:
    session.append_assistant_message(
        content=[TextBlock(" "), ToolUseBlock("t", "shell", {"cmd": "ls"})],
        stop_reason="tool_use", usage=Usage(1, 1), generation=1,
    )
    assert plan_notices(*one(session)) == []


def test_tool_proposal_goes_to_watchers(session: Session) -> None:
    session.propose_tool_call(call_id="c", tool="shell", tool_input={"cmd": "ls"},
                              action_hash="h")
    assert plan_notices(*one(session)) == [Planned("tool", "→ shell(cmd=ls)", "watchers")]


def test_play_by_play_tool_notices_go_to_watchers(session: Session) -> None:
    session.decide_tool_call(call_id="c", decision="deny", reason="no", tier="policy")
    assert plan_notices(*one(session)) == [
        Planned("tool", "✗ denied (policy): no", "watchers")
    ]
    session.record_tool_result(call_id="c", tool="shell", output="ok", is_error=False)
    assert plan_notices(*one(session)) == [Planned("tool", "✓ shell: ok", "watchers")]
    session.record_ttsr_interruption(rules=["r"], reminder="m", generation=1,
                                     partial_text="p", source="text", context_mode="discard")
    assert plan_notices(*one(session)) == [
        Planned("interrupted", "rule r interrupted the reply; retrying", "watchers")
    ]


def test_turn_completed_goes_to_everyone(session: Session) -> None:
    session.complete_turn(rounds=2, usage=Usage(10, 20), cost_usd=0.5, stop="end_turn")
    assert plan_notices(*one(session)) == [
        Planned("completed", "done: 2 round(s), 10 in / 20 out tokens, $0.5000", "everyone")
    ]


def test_turn_failed_goes_to_everyone(session: Session) -> None:
    session.fail_turn(error="boom", cost_usd=0.1)
    assert plan_notices(*one(session)) == [
        Planned("failed", "the turn failed: boom", "everyone")
    ]


def test_kill_goes_to_everyone_as_status(session: Session) -> None:
    session.change_status(status="killed", reason="killed by user")
    assert plan_notices(*one(session)) == [
        Planned("status", "session killed: killed by user", "everyone")
    ]


@pytest.mark.parametrize("status", ["running", "waiting", "completed", "failed", "idle"])
def test_other_status_changes_plan_nothing(session: Session, status: str) -> None:
    session.change_status(status=status, reason="x")
    assert plan_notices(*one(session)) == []


def test_budget_exhausted_goes_to_everyone_with_both_amounts(session: Session) -> None:
    session.exhaust_budget(cost_usd=1.23456, budget_usd=1.0)
    name, data = one(session)
    assert name == "BudgetExhausted"
    assert plan_notices(name, data) == [
        Planned("budget", "budget exhausted: $1.2346 spent of $1.00; the session failed",
                "everyone")
    ]


def test_waiting_for_input_goes_to_the_background_with_the_reason(session: Session) -> None:
    session.signal_waiting(reason="turn ended")
    name, data = one(session)
    assert name == "WaitingForInput"
    assert plan_notices(name, data) == [
        Planned("waiting", "waiting for input (turn ended)", "background")
    ]


def test_silent_events_plan_nothing(session: Session) -> None:
    session.decide_tool_call(call_id="c", decision="allow", reason="ok", tier="policy")
    session.decide_tool_call(call_id="c", decision="escalate", reason="?", tier="policy")
    session.refuse_tool_call(call_id="c", reason="denied")
    session.record_actor_failure(error="boom")
    events = relayed(session)
    assert len(events) == 4
    for name, data in events:
        assert plan_notices(name, data) == []
    assert plan_notices("SomethingNew", {}) == []


def test_plan_matches_notice_for_on_every_notice(session: Session) -> None:
    session.append_assistant_message(content=[TextBlock("hi")], stop_reason="end_turn",
                                     usage=Usage(1, 1), generation=1)
    session.propose_tool_call(call_id="c", tool="t", tool_input={}, action_hash="h")
    session.complete_turn(rounds=1, usage=Usage(1, 1), cost_usd=0.0, stop="end_turn")
    session.fail_turn(error="e")
    session.change_status(status="killed", reason="r")
    for name, data in relayed(session):
        notice = notice_for(name, data)
        assert notice is not None
        [planned] = plan_notices(name, data)
        assert (planned.kind, planned.text) == notice


MALFORMED: list[tuple[str, Any, type[Exception]]] = [
    ("AssistantMessageAppended", {}, KeyError),
    ("AssistantMessageAppended", {"content": None}, TypeError),
    ("AssistantMessageAppended", {"content": ["text"]}, AttributeError),
    ("ToolCallProposed", {"tool": "t"}, KeyError),
    ("ToolCallProposed", {"tool": "t", "tool_input": None}, AttributeError),
    ("TurnCompleted", {"rounds": 1}, KeyError),
    ("TurnCompleted", {"rounds": 1, "usage": None, "cost_usd": 0, "stop": "x"}, TypeError),
    ("TurnFailed", {}, KeyError),
    ("StatusChanged", {}, KeyError),
    ("StatusChanged", {"status": "killed"}, KeyError),
    ("ToolCallDecided", {}, KeyError),
    ("ToolCallExecuted", {"output": 3, "is_error": False, "tool": "t"}, AttributeError),
]


@pytest.mark.parametrize(("event", "data", "error"), MALFORMED)
def test_malformed_data_raises_like_notice_for(event: str, data: Any,
                                               error: type[Exception]) -> None:
    with pytest.raises(error):
        notice_for(event, data)
    with pytest.raises(error):
        plan_notices(event, data)


@pytest.mark.parametrize(("event", "data", "error"), [
    ("BudgetExhausted", {}, KeyError),
    ("BudgetExhausted", {"cost_usd": 1.0}, KeyError),
    ("BudgetExhausted", {"cost_usd": "1", "budget_usd": 2.0}, ValueError),
    ("WaitingForInput", {}, KeyError),
    ("WaitingForInput", None, TypeError),
])
def test_malformed_budget_or_waiting_data_raises(event: str, data: Any,
                                                 error: type[Exception]) -> None:
    with pytest.raises(error):
        plan_notices(event, data)
