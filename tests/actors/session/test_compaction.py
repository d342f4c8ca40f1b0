"""Compaction in the loop decided on plain values: at 70% of the context budget the older
part of the history goes to the memory call and the summary call, the facts are written
to MEMORY.md first, and the next call sends the summary first; everything is recorded.

(MEMORY.md's writing is the shell's: tests/actors/test_prompt.py, and end to end with a
restart in tests/integration/test_compaction.py.)
"""

from __future__ import annotations

from typing import Any

from tests.actors.session.driver import NOW, Core
from tether.actors.model.compaction import MEMORY_PROMPT, SUMMARY_PREFIX, SUMMARY_PROMPT
from tether.actors.session import SessionConfig
from tether.actors.session.effects import CallModel, Compact, WriteMemory
from tether.actors.session.inputs import CompactionDone, MemoryWritten
from tether.events.messages import Usage
from tether.events.session import Session

# A 6,000-token window leaves the budget's floor, 4,096 tokens (seed 001): compaction
# starts at 2,867. Each message below is about 1,000 tokens, so the third turn crosses the
# line and the last message (within 30% of the budget) is kept.
WINDOW = 6_000
BIG = "alpha beta gamma delta " * 175  # 4,025 characters, about 1,000 tokens
FACTS = "- The user prefers tabs.\n- Deploys run on Fridays."
SUMMARY = "The user sent two long notes; I acknowledged."


def turn(word: str) -> str:
    return f"{word}: {BIG}"


def names(core: Core) -> list[str]:
    return [type(e).__name__ for e in core.log]


def three_turns(core: Core) -> tuple[list[CallModel], Compact]:
    """Two long messages answered, then the third, which crosses the trigger: the model
    calls so far and the compaction asked for."""
    calls = core.say(turn("first")).of(CallModel)
    core.answer("Noted one.")
    calls += core.say(turn("second")).of(CallModel)
    core.answer("Noted two.")
    assert "HistoryCompacted" not in names(core)  # 2,000 tokens: under the trigger
    third = core.say(turn("third"))
    (compact,) = third.of(Compact)
    return calls + third.of(CallModel), compact


def compacting() -> Core:
    return Core(SessionConfig(model="claude-sonnet-4-5", context_window=WINDOW))


def logged(core: Core, kind: type) -> Any:
    (event,) = [e for e in core.log if isinstance(e, kind)]
    return event


def test_a_full_history_is_summarized_and_its_facts_flushed_to_memory() -> None:
    core = compacting()
    calls, compact = three_turns(core)
    assert compact.memory.system == MEMORY_PROMPT and compact.summary.system == SUMMARY_PROMPT
    transcript = compact.memory.messages[0]["content"][0]["text"]
    assert "User: first:" in transcript and "Assistant: Noted two." in transcript
    assert "third" not in transcript  # the recent part is not summarized

    answered = core.feed(CompactionDone(compact.generation, memory=FACTS, summary=SUMMARY,
                                        usage=Usage(3000, 100)))
    (write,) = answered.of(WriteMemory)
    assert write.facts == ["The user prefers tabs.", "Deploys run on Fridays."]
    assert write.today == NOW.date()  # the heading MEMORY.md gets: the decision's day
    flushed = core.feed(MemoryWritten("/work/ws/MEMORY.md", "## 2026-11-28", write.facts))
    calls += flushed.of(CallModel)
    sent = calls[-1].request.messages  # the summary, coalesced with the message it precedes
    assert sent[0]["content"][0]["text"].startswith(f"{SUMMARY_PREFIX}{SUMMARY}]\n\nthird: ")
    assert len(sent) == 1 and "first:" not in str(sent)

    memory = logged(core, Session.MemoryFlushed)
    assert memory.facts == ["The user prefers tabs.", "Deploys run on Fridays."]
    assert memory.heading == "## 2026-11-28"
    compacted = logged(core, Session.HistoryCompacted)
    assert compacted.replaced == 4 and compacted.budget == 4096
    assert compacted.tokens_before >= 2867 > compacted.tokens_after
    assert names(core).index("MemoryFlushed") < names(core).index("HistoryCompacted")

    core.answer("Noted three.")
    # A replay knows the context without calling the model: the session holds it.
    assert core.session.compactions == 1
    assert [t.role for t in core.session.history] == ["user", "user", "assistant"]
    assert core.session.history[0].content[0].text.startswith(SUMMARY_PREFIX)  # type: ignore[union-attr]
    assert core.session.cost_usd > 0
    assert len(calls) + 2 == 5  # three answers, and the compaction's two calls


def test_a_failed_compaction_is_recorded_and_the_turn_goes_on() -> None:
    core = compacting()
    _, compact = three_turns(core)
    fed = core.feed(CompactionDone(compact.generation, error=(
        "ProviderError: model API error 400 (invalid_request_error): too long")))
    assert "too long" in logged(core, Session.CompactionFailed).error
    assert "HistoryCompacted" not in names(core)
    (call,) = fed.of(CallModel)
    assert "first:" in str(call.request.messages)  # the whole history was sent
