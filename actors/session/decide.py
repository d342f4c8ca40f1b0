"""The session's pure core: ``decide(state, input, now)`` records what the input changes
on the state's aggregates and lists the effects for the shell to perform.

No clock, randomness, file or network is read here: time comes in as ``now`` (the events
are stamped with it), and what the world holds comes in as inputs answering the shell's
reads. The same state and inputs give the same events, byte for byte.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from tether.actors.runtime import AskResult
from tether.actors.session import compaction, endings, intake, review, tools, tree
from tether.actors.session import turn as turns
from tether.actors.session.effects import Outcome
from tether.actors.session.inputs import (
    CompactionDone,
    Continued,
    DirResolved,
    MemoryWritten,
    ModelDelta,
    ModelFailed,
    PlanRead,
    Recovered,
    Restarting,
    SessionTick,
    SkillsRead,
    TitleDone,
    ToolFinished,
    WorkspaceRead,
)
from tether.actors.session.state import Phase, State
from tether.actors.session.step import Step, log
from tether.events.messages import (
    BookmarkNode,
    BranchTo,
    DeleteNode,
    EditNode,
    Generate,
    InteractionSettled,
    Interrupt,
    Killed,
    KillSession,
    SplitNode,
    TreeQuery,
    UndoFiles,
    UserMessage,
)
from tether.events.stamping import stamped


def decide(state: State, message: Any, now: dt.datetime) -> Outcome:
    """What ``message`` changes at ``now``: ``state`` is changed in place (its aggregates
    hold the new events until the shell saves them) and the effects are returned. A
    decision that raises leaves no event pending (the state is then stale: the shell
    reloads it)."""
    step = Step(state, now)
    try:
        with stamped(now):
            _dispatch(step, message)
    except BaseException:
        # A decision that fails records nothing: no half of it may be saved by the next.
        for aggregate in (state.session, *step.recorded):
            aggregate.collect_events()
        raise
    return Outcome(step.aggregates(), step.effects)


def _dispatch(step: Step, message: Any) -> None:
    turn = step.turn
    match message:
        case UserMessage():
            intake.on_user_message(step, message)
        case ModelDelta():
            turns.on_model_delta(step, message)
        case ModelFailed():
            endings.on_model_failed(step, message)
        case Interrupt():
            if (message.generation == turn.generation
                    and turn.phase in (Phase.STREAMING, Phase.BARRIER)):
                endings.keep_reminders(step, message.later)
                turns.interrupt(step, message.rules, message.reminder, message.source,
                                message.context_mode)
        case AskResult():
            kind, _, key = message.tag.partition(":")
            if kind == "barrier":
                turns.on_barrier(step, key, message)
            elif kind == "verdict":
                tools.on_verdict(step, key, message)
            elif kind == "opened":
                review.on_opened(step, key, message)
        case ToolFinished():
            tools.on_tool_finished(step, message)
        case InteractionSettled():
            review.on_settled(step, message)
        case SessionTick():
            endings.on_tick(step)
        case TitleDone():
            endings.on_title(step, message)
        case CompactionDone():
            compaction.on_compacted(step, message)
        case Continued(then="call_model"):
            compaction.on_continued(step)
        case Continued():
            tools.on_continued(step, message.then)
        case MemoryWritten():
            compaction.on_memory_written(step, message)
        case WorkspaceRead():
            turns.on_workspace_read(step, message)
        case PlanRead():
            review.on_plan_read(step, message)
        case DirResolved():
            intake.on_dir_resolved(step, message)
        case SkillsRead():
            tools.on_skills_read(step, message)
        case TreeQuery():
            tree.tree_page(step, message)
        case BranchTo() | EditNode():
            tree.move(step, message)
        case SplitNode() | DeleteNode() | BookmarkNode():
            tree.change_tree(step, message)
        case UndoFiles():
            tree.undo(step, message)
        case Generate():
            intake.on_generate(step, message)
        case KillSession():
            endings.kill(step, message.reason)
            step.reply(Killed(session_id=step.session_id, found=True))
        case Restarting():
            endings.restarting(step)
        case Recovered():
            endings.recovered(step, message.stored_tree)
        case _:
            log.warning("session %s ignored %r", step.session_id, message)
