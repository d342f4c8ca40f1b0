"""How turns end (completed, failed, stopped, killed), what time does (retries after a
backoff, the idle timeout, the safety net), the background title, and a restart."""

from __future__ import annotations

import datetime as dt

from tether.actors.model.pricing import cost_usd
from tether.actors.model.titles import clean_title, exchange_messages, title_request, wants_title
from tether.actors.session import intake
from tether.actors.session import turn as turns
from tether.actors.session.effects import AskTitle, CancelModel, StopTool
from tether.actors.session.inputs import ModelFailed, TitleDone
from tether.actors.session.state import WAITING, Phase
from tether.actors.session.step import Step, log
from tether.actors.session.tree import publish_placed
from tether.events.forest import ForestState
from tether.events.lifecycle import FINISHED
from tether.events.messages import (
    CancelInteractions,
    ErrorKind,
    GenerationDone,
    GenerationError,
    Reminder,
    Usage,
)


def keep_reminders(step: Step, later: list[Reminder]) -> None:
    """Hold reminders of non-aborting rules until the turn ends (each once)."""
    for reminder in later:
        if reminder not in step.turn.reminders:
            step.turn.reminders.append(reminder)


def _add_reminders(step: Step) -> None:
    """Reminders of rules that did not abort the stream join the history now."""
    for reminder in step.turn.reminders:
        step.session.add_ttsr_reminder(rules=reminder.rules, reminder=reminder.text)
    step.turn.reminders = []


def complete_turn(step: Step, stop: str, take_queued: bool = True) -> None:
    """The turn is done: recorded with what it used, named once it can be, and the next
    queued message taken up (unless the caller starts the next turn itself)."""
    turn = step.turn
    _add_reminders(step)
    step.session.complete_turn(rounds=turn.rounds, usage=turn.turn_usage,
                               cost_usd=step.turn_cost(), stop=stop)
    _turn_ended(step, "the turn is done", "completed")
    _maybe_title(step)
    publish_placed(step)
    step.emit(GenerationDone, nodes=list(turn.turn_nodes), stop=stop)
    turn.gen = None
    if take_queued:
        _idle(step)
    else:
        turn.phase = Phase.IDLE
        turn.tool_queue.clear()


def record_failure(step: Step, error: str, finish: bool = False,
                   kind: ErrorKind = "failed") -> None:
    """The turn failed with ``error`` of ``kind``; ``finish``: so does the session."""
    turn = step.turn
    _cancel_interactions(step, error)
    step.effects.append(CancelModel())
    _add_reminders(step)
    step.session.fail_turn(error=error, cost_usd=step.turn_cost(), kind=kind)
    turn.turn_usage = Usage()
    if finish:
        step.set_status("failed", error)
    else:
        _turn_ended(step, f"the turn failed: {error}", "failed")
    _maybe_title(step)
    publish_placed(step)
    step.emit(GenerationError, kind=kind, message=error)
    turn.gen = None
    _idle(step)


def stop_turn(step: Step, why: str) -> None:
    """Stop the running turn only: nothing more is asked of the model, no further tool
    runs, every call without a result gets one; the session stays."""
    refuse_pending(step, f"not run: {why}")
    step.turn.tool_queue.clear()
    step.turn.generation = -1  # what is still on its way (deltas, a result) is dropped
    record_failure(step, why, kind="aborted")


def _maybe_title(step: Step) -> None:
    """Once the session has enough messages and no title, ask for one (background)."""
    session = step.session
    if step.turn.titling or not step.config.titles or not wants_title(
            exchange_messages(session.history), session.title):
        return
    step.turn.titling = True
    step.effects.append(AskTitle(title_request(session.history, model=step.config.model)))


def on_title(step: Step, done: TitleDone) -> None:
    """Record the title the model gave, unless the session has one already."""
    step.turn.titling = False
    title = clean_title(step.env.redactor.text(done.text))
    if done.error or not title:
        log.info("session %s: no title (%s)", step.session_id, done.error or "empty")
        return
    if not step.session.title:
        step.session.set_title(title=title, cost_usd=cost_usd(step.config.model, done.usage))


def _turn_ended(step: Step, why: str, single_turn_status: str) -> None:
    """A multi-turn session stays running and waits for input; a single-turn session is
    finished."""
    step.turn.last_input = step.now
    step.turn.safety_fired = False
    if step.session.multi_turn:
        step.session.signal_waiting(reason=why)
    else:
        step.set_status(single_turn_status, why)


def on_model_failed(step: Step, failed: ModelFailed) -> None:
    """A transient error is retried after a backoff (recorded); any other, or one retried
    too often, ends the turn with the error."""
    turn = step.turn
    if failed.generation != turn.generation or turn.phase is not Phase.STREAMING:
        return
    if not failed.transient or turn.retries >= step.config.provider_retries:
        tried = f" (after {turn.retries} retries)" if turn.retries else ""
        record_failure(step, f"{failed.error}{tried}", kind="provider")
        return
    turn.retries += 1
    delay = float(2 ** (turn.retries - 1))
    # The backoff counts from the failure, read before the retry is recorded: whoever sees
    # the record and moves the clock cannot move the retry along with it.
    turn.retry_at = step.now + dt.timedelta(seconds=delay)
    step.effects.append(CancelModel())
    step.session.record_provider_retry(attempt=turn.retries, error=failed.error, delay=delay)
    turn.phase = Phase.RETRYING


def on_tick(step: Step) -> None:
    """A due retry is made; the idle timeout kills a multi-turn session nobody talks to;
    the safety net says a turn waits when nothing has happened for a while (once a turn)."""
    turn, session, config, now = step.turn, step.session, step.config, step.now
    if turn.phase is Phase.RETRYING and turn.retry_at is not None and now >= turn.retry_at:
        turn.retry_at = None
        turns.call_model(step)
        return
    idle_for = (now - turn.last_input).total_seconds()
    quiet_for = (now - turn.last_activity).total_seconds()
    if turn.phase is Phase.IDLE:
        limit = config.idle_timeout
        if (limit and session.status == "running" and session.multi_turn
                and not session.queued and idle_for >= limit):
            kill(step, f"idle for {limit / 60:g} minutes")
    elif turn.phase is not Phase.COMPACTING and config.safety_net and not (
            turn.safety_fired) and quiet_for >= config.safety_net:
        turn.safety_fired = True
        session.signal_waiting(reason=f"nothing has happened for {config.safety_net:g} s")


def _idle(step: Step) -> None:
    step.turn.phase = Phase.IDLE
    step.turn.tool_queue.clear()
    if step.session.queued and step.session.status not in FINISHED:
        intake.start_queued(step)


def refuse_pending(step: Step, reason: str, *, running: str = "") -> None:
    """Give every tool call of the last assistant message a result: the one running is
    stopped and recorded as interrupted (``running`` saying why, else ``reason``), the
    others as refused."""
    session = step.session
    for call in session.pending_tool_calls():
        if call.id == session.running_call:
            step.effects.append(StopTool())
            session.interrupt_tool_call(call_id=call.id, tool=call.name,
                                        reason=running or reason)
        else:
            session.refuse_tool_call(call_id=call.id, reason=reason)


def _cancel_interactions(step: Step, reason: str) -> None:
    if step.turn.phase in WAITING:
        step.send(step.subjects.interactions,
                  CancelInteractions(session_id=step.session_id, reason=reason))


def kill(step: Step, reason: str) -> None:
    """Kill the session: the running turn ends (recorded as killed), whatever runs is
    stopped, and every call without a result gets one. Reminders the turn held join the
    history, as when a turn fails: their rules' injections are recorded, so a rule that
    fires once would otherwise never be seen by the model."""
    turn, session = step.turn, step.session
    in_turn = turn.phase is not Phase.IDLE
    _cancel_interactions(step, reason)
    step.effects.append(CancelModel())
    refuse_pending(step, "the session was killed before this call ran",
                   running="the session was killed while this call ran; its processes were "
                           "stopped")
    _add_reminders(step)
    turn.tool_queue.clear()
    if in_turn:
        # The turn ends here: recorded (kind "killed", whose notice the kill's own says),
        # so it counts, what it spent counts, and a resumed session's next turn is another
        # turn, with a number of its own.
        session.fail_turn(error=f"killed: {reason}", cost_usd=step.turn_cost(), kind="killed")
        turn.turn_usage = Usage()
    if session.status != "killed":
        step.set_status("killed", reason)
    publish_placed(step)
    if in_turn:
        step.emit(GenerationError, kind="aborted", message=f"killed: {reason}")
    turn.gen = None
    turn.phase = Phase.IDLE
    turn.generation = -1


def restarting(step: Step) -> None:
    """Let go of what the last life of the actor left waiting or running."""
    _cancel_interactions(step, "the session restarted")
    step.effects.append(CancelModel())


def recovered(step: Step, stored_tree: ForestState | None) -> None:
    """The process (or this actor) stopped mid-turn: the turn is lost. Answer every tool
    call left without a result, so the history stays valid for the model, say what
    happened, and take up any queued message. A message stored whose turn had not
    started is taken up. A session stored before sessions kept their own tree imports
    ``stored_tree`` first (once: from then on its events keep it)."""
    session = step.session
    if stored_tree is not None:
        session.import_tree(tree=stored_tree)
        step.conversation.take_placed()  # placed long ago, not by this decision
    if session.in_turn and session.status not in FINISHED:
        refuse_pending(step, "the turn was interrupted by a restart before this call ran",
                       running="the engine stopped while this call ran")
        record_failure(step, "the turn was interrupted by a restart")
    elif session.queued and session.status not in FINISHED:
        intake.start_queued(step)
