"""What a chat is told about each kind of session event."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from actors.notices import ARG_PREVIEW, notice_for
from events.messages import TextBlock, ToolUseBlock, Usage
from events.session import Session

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
        "completed", "done: 10 round(s), 5 in / 6 out tokens, $0.0000 (round limit reached)"
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
