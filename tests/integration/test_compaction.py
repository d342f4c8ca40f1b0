"""Compaction end to end: its facts reach MEMORY.md, and a compacted session goes on after
a restart, or from a fork, with what the store holds and no model call. What the session
decides (when to compact, the two calls, the order of the records, a failure) is tested
on plain values in tests/actors/session/test_compaction.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import Engine
from tests.helpers import say, wait_until
from tether.actors.model.compaction import SUMMARY_PREFIX

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
