"""Compaction's answer: the durable facts go to MEMORY.md first (written by the shell),
then the older part of the history is replaced by its summary (both recorded), then the
model call that waited is made."""

from __future__ import annotations

from tether.actors.model.compaction import parse_facts, summary_text
from tether.actors.model.context import estimate_history_tokens
from tether.actors.model.pricing import cost_usd
from tether.actors.model.stale_results import summarize_stale_results
from tether.actors.session import turn as turns
from tether.actors.session.effects import Continue, WriteMemory
from tether.actors.session.inputs import CompactionDone, MemoryWritten
from tether.actors.session.state import Phase
from tether.actors.session.step import Step, log
from tether.events.messages import TextBlock
from tether.events.session import Turn


def on_compacted(step: Step, done: CompactionDone) -> None:
    """Have the facts written to MEMORY.md (then :func:`on_memory_written`), else replace
    the history at once; a failed compaction is recorded and the turn goes on
    uncompacted."""
    turn, session = step.turn, step.session
    plan = turn.compaction
    if (done.generation != turn.generation or turn.phase is not Phase.COMPACTING
            or plan is None or turn.summary is not None):
        return
    cost = cost_usd(step.config.model, done.usage)
    summary = step.env.redactor.text(done.summary.strip())
    error = done.error or ("" if summary else "the summary call answered nothing")
    if error:
        log.warning("session %s: compaction failed: %s", step.session_id, error)
        session.fail_compaction(error=error, cost_usd=cost)
        turn.compaction, turn.compaction_off = None, True
        step.effects.append(Continue("call_model"))  # what it cost is saved first
        return
    turn.compaction_off = plan.replaced >= len(session.history)
    turn.summary, turn.summary_cost = summary, cost
    facts = parse_facts(step.env.redactor.text(done.memory))
    if facts:
        step.effects.append(WriteMemory(session.workspace, facts, step.now.date()))
    else:
        _replace_history(step)


def on_memory_written(step: Step, written: MemoryWritten) -> None:
    """Record the facts MEMORY.md gained (none new, or a file that could not be used
    safely, records nothing), then replace the history."""
    if step.turn.phase is not Phase.COMPACTING or step.turn.summary is None:
        return
    if written.added:
        step.session.flush_memory(path=written.path, facts=written.added,
                                  heading=written.heading)
    _replace_history(step)


def on_continued(step: Step) -> None:
    """The compaction's record is saved: make the model call that waited for it."""
    if step.turn.phase is Phase.COMPACTING and step.turn.compaction is None:
        turns.call_model(step)


def _replace_history(step: Step) -> None:
    turn, session = step.turn, step.session
    plan, summary = turn.compaction, turn.summary
    assert plan is not None and summary is not None
    text = summary_text(summary)
    after = estimate_history_tokens(summarize_stale_results(
        [Turn("user", [TextBlock(text)]), *session.history[plan.replaced:]]))
    session.compact_history(summary=text, replaced=plan.replaced, tokens_before=plan.tokens,
                            tokens_after=after, budget=plan.budget, cost_usd=turn.summary_cost)
    turn.compaction, turn.summary = None, None
    step.effects.append(Continue("call_model"))  # MEMORY.md is written: record it first
