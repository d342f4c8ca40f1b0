"""Compaction in the loop: at 70% of the context budget the older part of the history is
summarized by one model call, its durable facts go to MEMORY.md by another, and the next
call sends the summary first; everything is recorded, so a replay needs no model."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import Engine
from tests.helpers import say, wait_until
from tether.actors.model.compaction import MEMORY_PROMPT, SUMMARY_PREFIX, SUMMARY_PROMPT

# A 6,000-token window leaves the budget's floor, 4,096 tokens (seed 001): compaction
# starts at 2,867. Each message below is about 1,000 tokens, so the third turn crosses the
# line and the last message (within 30% of the budget) is kept.
WINDOW = 6_000
BIG = "alpha beta gamma delta " * 175  # 4,025 characters, about 1,000 tokens


def turn(word: str) -> str:
    return f"{word}: {BIG}"


def script(memory: str, summary: str = "The user sent two long notes; I acknowledged.") -> str:
    return f"""
responses:
  - match: "first"
    blocks: [{{text: "Noted one."}}]
  - match: "second"
    blocks: [{{text: "Noted two."}}]
  - match: "<conversation>"
    blocks: [{{text: {json.dumps(memory)}}}]
  - match: "<conversation>"
    blocks: [{{text: {json.dumps(summary)}}}]
  - match: "third"
    blocks: [{{text: "Noted three."}}]
"""


def three_turns(host: Any, channel: Any) -> str:
    """Three long messages, each answered; the third crosses the trigger. Returns the
    session's id."""
    sid = say(host, turn("first"))
    channel.wait_for("completed")
    say(host, turn("second"), sid)
    channel.wait_for("completed")
    assert "HistoryCompacted" not in names(host, sid)  # 2,000 tokens: under the trigger
    say(host, turn("third"), sid)
    channel.wait_for("completed")
    return sid


def names(host: Any, sid: str) -> list[str]:
    return [type(e).__name__ for e in host.app.session_events(sid)]


def test_a_full_history_is_summarized_and_its_facts_flushed_to_memory(
    engine: Callable[..., Engine], workspace: Path, watch_channel: Callable[..., Any],
) -> None:
    host, _, llm = engine(script("- The user prefers tabs.\n- Deploys run on Fridays."),
                              context_window=WINDOW)
    sid = three_turns(host, watch_channel(host, "test"))

    memory_call, summary_call, answered = llm.requests[2:5]
    assert memory_call["system"] == MEMORY_PROMPT and summary_call["system"] == SUMMARY_PROMPT
    transcript = memory_call["messages"][0]["content"][0]["text"]
    assert "User: first:" in transcript and "Assistant: Noted two." in transcript
    assert "third" not in transcript  # the recent part is not summarized

    sent = answered["messages"]  # the summary, coalesced with the message it precedes
    assert sent[0]["content"][0]["text"].startswith(
        f"{SUMMARY_PREFIX}The user sent two long notes; I acknowledged.]\n\nthird: ")
    assert len(sent) == 1 and "first:" not in str(sent)

    memory = (workspace / "MEMORY.md").read_text()
    assert memory == ("## 2026-01-01\n\n- The user prefers tabs.\n- Deploys run on Fridays.\n")

    events = host.app.session_events(sid)
    flushed = next(e for e in events if type(e).__name__ == "MemoryFlushed")
    assert flushed.facts == ["The user prefers tabs.", "Deploys run on Fridays."]
    assert flushed.heading == "## 2026-01-01"
    compacted = next(e for e in events if type(e).__name__ == "HistoryCompacted")
    assert compacted.replaced == 4 and compacted.budget == 4096
    assert compacted.tokens_before >= 2867 > compacted.tokens_after
    assert names(host, sid).index("MemoryFlushed") < names(host, sid).index(
        "HistoryCompacted")

    # A replay knows the context without calling the model: the stored session holds it.
    stored = host.app.session(sid)
    assert stored is not None and stored.compactions == 1
    assert [t.role for t in stored.history] == ["user", "user", "assistant"]
    assert stored.history[0].content[0].text.startswith(SUMMARY_PREFIX)  # type: ignore[union-attr]
    assert stored.cost_usd > 0
    assert len(llm.requests) == 5


FAILING_COMPACTION = """
responses:
  - match: "first"
    blocks: [{text: "Noted one."}]
  - match: "second"
    blocks: [{text: "Noted two."}]
  - error: {status: 400, type: invalid_request_error, message: "too long"}
"""
"""Two answers, then an error for the memory call of the compaction the third needs."""


def test_a_failed_compaction_is_recorded_and_the_turn_goes_on(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any],
) -> None:
    host, _, llm = engine(FAILING_COMPACTION + """
  - match: "third"
    blocks: [{text: "Noted three."}]
""", context_window=WINDOW)
    sid = three_turns(host, watch_channel(host, "test"))
    failed = next(e for e in host.app.session_events(sid)
                  if type(e).__name__ == "CompactionFailed")
    assert "too long" in failed.error
    assert "HistoryCompacted" not in names(host, sid)
    assert "first:" in str(llm.requests[-1]["messages"])  # the whole history was sent


def test_a_compacted_session_replays_and_goes_on_after_a_restart_without_the_model(
    engine: Callable[..., Engine], workspace: Path, watch_channel: Callable[..., Any],
) -> None:
    """What the model was sent after a compaction is what the stored events replay to;
    a new engine on the same store goes on from the summary with no compaction call."""
    from tether.actors.model.context import shape_messages

    host, _, llm = engine(script("- The user prefers tabs."), context_window=WINDOW)
    sid = three_turns(host, watch_channel(host, "test"))
    answered = llm.requests[4]
    stored = host.app.session(sid)
    assert stored is not None
    assert shape_messages(stored.history[:-1]) == answered["messages"]
    host.stop()

    again, _, llm2 = engine("""
responses:
  - match: "fourth"
    blocks: [{text: "Noted four."}]
""", context_window=WINDOW)
    channel = watch_channel(again, "test")
    assert say(again, "fourth note", sid) == sid
    channel.wait_for("completed")
    assert len(llm2.requests) == 1  # the answer alone: the summary came from the store
    sent = llm2.requests[0]["messages"]
    assert sent[0]["content"][0]["text"].startswith(
        f"{SUMMARY_PREFIX}The user sent two long notes; I acknowledged.]")
    assert "first:" not in str(sent) and "fourth note" in str(sent[-1])
    assert names(again, sid).count("HistoryCompacted") == 1
    assert (workspace / "MEMORY.md").read_text().count("- The user prefers tabs.") == 1


def test_a_fork_from_a_compacted_path_keeps_the_rules_that_fired_before_the_summary(
    engine: Callable[..., Engine], watch_channel: Callable[..., Any], tmp_path: Path,
) -> None:
    """A rule's reminder summarized away by a compaction still fired: a fork at a node
    whose path starts from that summary keeps it as fired (``once`` stays once)."""
    from tether.actors.runtime import ask
    from tether.events.messages import Accepted, ForkSession, TreeQuery, TreeView

    rules = tmp_path / "rules"
    rules.mkdir(exist_ok=True)
    (rules / "no-todo.md").write_text('---\nname: "no-todo"\ntrigger: "TODO"\n---\n'
                                      "Finish the work.\n")
    host, _, _ = engine(f"""
responses:
  - match: "first"
    blocks: [{{text: "A TODO for later"}}]
  - match: "Finish the work"
    blocks: [{{text: "Noted one."}}]
  - match: "second"
    blocks: [{{text: "Noted two."}}]
  - match: "<conversation>"
    blocks: [{{text: "NONE"}}]
  - match: "<conversation>"
    blocks: [{{text: {json.dumps("The user sent notes; a TODO was refused.")}}}]
  - match: "third"
    blocks: [{{text: "Noted three."}}]
""", context_window=WINDOW)
    sid = three_turns(host, watch_channel(host, "test"))
    assert "HistoryCompacted" in names(host, sid) and "TtsrInterrupted" in names(host, sid)
    nodes = ask(host.bus, host.subjects.manager, TreeQuery(session_id=sid), TreeView).nodes
    last = next(n for n in nodes if n.text == "Noted three.")
    fork = ask(host.bus, host.subjects.manager, ForkSession(
        session_id=sid, at_node=last.node_id), Accepted).session_id
    wait_until(lambda: host.app.session(fork) is not None, "the fork stored")
    forked = host.app.session(fork)
    assert forked is not None and forked.fired_rules == ["no-todo"]
    assert forked.history[0].content[0].text.startswith(SUMMARY_PREFIX)  # type: ignore[union-attr]
