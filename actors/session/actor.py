"""The session actor: the shell around the session's pure core.

It feeds each message to :func:`actors.session.decide` with the time. The reads whose
answers are decided at once (the workspace's files, a plan, skills) are made and decided
before any other message; the events of that chain of decisions are saved in one save,
then the chain's effects are performed in order: messages sent and replies, tool runs on
helper threads. A model call (on the bus's I/O loop) starts before the save, so the
model's round trip overlaps the disk's: it changes nothing in the world, and what comes
back is decided after the save. What a call sends back is dropped once the call is
cancelled or replaced (the core also drops what is not of its running generation). A
write to the workspace (MEMORY.md, an undo) and a decision's ``Continue`` wait for the
events decided before them to be stored.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import threading
import uuid
from collections import deque
from concurrent.futures import Future
from typing import Any

import msgspec
import pykka
from eventsourcing.persistence import Recording

from tether.actors.commands import resolve_dir
from tether.actors.model.prompt import MEMORY_FILE, append_memory, load_skills, read_workspace
from tether.actors.model.redact import Redactor
from tether.actors.ports import (
    Clock,
    Grant,
    Provider,
    Snapshot,
    Snapshots,
    SystemClock,
    ToolExecutor,
    ToolOutput,
)
from tether.actors.runtime import ActorSystem, Envelope, TetherActor
from tether.actors.session.config import NewSession, SessionConfig
from tether.actors.session.decide import decide
from tether.actors.session.effects import (
    Ask,
    AskTitle,
    CallModel,
    CancelModel,
    Compact,
    Continue,
    Effect,
    ReadPlan,
    ReadSkills,
    ReadWorkspace,
    Reply,
    ResolveDir,
    RestoreFiles,
    RunTool,
    Send,
    StopTool,
    WriteMemory,
)
from tether.actors.session.inputs import (
    Continued,
    DirResolved,
    MemoryWritten,
    PlanRead,
    Recovered,
    Restarting,
    SkillsRead,
    ToolFinished,
    WorkspaceRead,
)
from tether.actors.session.pumps import pump_compaction, pump_model, pump_title
from tether.actors.session.state import Env, State
from tether.actors.undo import UndoError, undo_files
from tether.events.application import TetherApplication
from tether.events.codec import without_lone_surrogates
from tether.events.messages import ErrorReply, NoticesPlanned, TreeQuery, Undone
from tether.events.session import Session
from tether.events.stamping import stamped
from tether.projections.outbox import planned_notices

log = logging.getLogger("tether.actors.session")

PLAN_READ_LIMIT = 200_000
"""Characters of the plan file read for a plan review."""

BEFORE_SAVE = (ReadWorkspace, ResolveDir, ReadSkills, ReadPlan, CallModel, Compact, CancelModel)
"""Effects performed as they are decided, before the chain's events are saved: reads whose
answers are decided next, and starting or cancelling a model call."""

AFTER_STORED = (Continue, WriteMemory, RestoreFiles)
"""The events decided so far are saved (and their effects performed) first: writes to the
workspace, and ``Continue``, which a decision ends with once it recorded a fact the world
already holds, so that a failure further on cannot take the record with it."""


class FromCall(msgspec.Struct, frozen=True):
    """What a model call sent back, with the shell's number of that call."""

    call: int
    message: Any


class _CallInbox:
    """The actor's inbox as one model call sees it: what it tells is tagged with its
    number."""

    def __init__(self, ref: pykka.ActorRef[Any], call: int) -> None:
        self.ref = ref
        self.call = call

    def tell(self, message: Any) -> None:
        self.ref.tell(FromCall(self.call, message))


class SessionActor(TetherActor):
    """The agent loop of one session."""

    def __init__(
        self,
        system: ActorSystem,
        *,
        session_id: str,
        app: TetherApplication,
        provider: Provider,
        tools: ToolExecutor,
        config: SessionConfig,
        new: NewSession | None = None,
        redactor: Redactor | None = None,
        snapshots: Snapshots | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(system)
        self.session_id = session_id
        self.clock = clock or SystemClock()
        self.app = app
        self.provider = provider
        self.tools = tools
        self.config = config
        self.new = new
        self.snapshot_store = snapshots
        self.env = Env(session_id=session_id, config=config, subjects=self.subjects,
                       redactor=redactor or Redactor(), tools=tools,
                       snapshots=snapshots is not None)
        self.state: State | None = None
        self.task: Future[None] | None = None
        """The model call (or compaction) running on the bus loop."""
        self.running: tuple[int, str, Grant] | None = None
        """The call running now (its generation and id) and its grant: setting ``cancel``
        kills its processes."""
        self.told_through = -1
        """The position of the last notice told of to the router (-1: none in this life)."""
        self.calls = 0
        """The number of the model call (or compaction) whose answers are taken: each call
        started or cancelled counts one more."""

    # --- lifecycle ----------------------------------------------------------------------

    def recover(self) -> None:
        self.told_through = -1  # a failure may have come between a save and its tell
        last = self.state
        if last is not None:  # a restart: let go of what the last life left
            for effect in decide(last, Restarting(), self.clock.now()).effects:
                self._perform(effect, None)
        session = self.app.session(self.session_id)
        if session is None:
            with stamped(self.clock.now()):
                session = self._create()
        self.state = State.of(self.env, session, self.clock.now())
        if last is not None:
            # What the cut-short turn spent and the reminders it held are not in the store
            # yet: the turn's failure records them.
            self.state.turn.turn_usage = last.turn.turn_usage
            self.state.turn.reminders = last.turn.reminders
        stored_tree = None if session.keeps_tree else self.app.stored_tree(self.session_id)
        self._decide(Recovered(stored_tree=stored_tree), None)

    def _create(self) -> Session:
        """Record the session the manager asked for (as configured, or as a fork)."""
        new = self.new
        if new is None:
            raise LookupError(f"session {self.session_id} does not exist")
        session = Session(session_id=self.session_id, name=new.name, workspace=new.workspace,
                          model=self.config.model, channel=new.channel,
                          multi_turn=new.multi_turn, budget_usd=new.budget_usd,
                          origin=new.origin, owner=new.owner)
        if new.fork is not None:
            fork = new.fork
            session.fork_from(source_id=fork.source_id, at_version=fork.at_version,
                              history=fork.history, fired_rules=fork.fired_rules)
        if self.config.mode != "default":
            session.change_mode(mode=self.config.mode,
                                auto_approve=self.config.auto_list(self.config.mode),
                                reason="the configured starting mode")
        self.app.save(session)
        return session

    def on_stop(self) -> None:
        self._cancel_model()
        self._stop_tool()  # nothing it started may outlive the engine's record of it

    def on_failure_recorded(self, error: str) -> None:
        session = self.app.session(self.session_id)
        if session is not None:
            with stamped(self.clock.now()):
                session.record_actor_failure(error=error)
            self.app.save(session)

    # --- the loop -----------------------------------------------------------------------

    def handle(self, message: Any, envelope: Envelope | None) -> None:
        # Everything that changes a session comes from the engine's own actors (the
        # manager, the monitor, the coordinator), in process: from the bus only a
        # question about its tree is answered.
        if not isinstance(message, TreeQuery) and self.refused_from_the_bus(message, envelope):
            return
        if isinstance(message, FromCall):
            if message.call != self.calls:
                return  # a call cancelled or replaced since (or before a restart)
            message = message.message
        if isinstance(message, ToolFinished) and self.running is not None and (
                self.running[:2] == (message.generation, message.call_id)):
            self.running = None  # that run is over (a late one of a stopped run is not)
        self._decide(message, envelope)

    def _decide(self, message: Any, envelope: Envelope | None) -> None:
        """Decide ``message`` and the answers of the shell's own reads, save the events of
        the chain in one save, then perform the rest of its effects in order. A decision
        that raises records nothing, but what the chain decided before it is stored."""
        assert self.state is not None
        inputs: deque[Any] = deque([message])
        events: list[Any] = []
        aggregates: list[Any] = []
        after: list[Effect] = []
        while inputs:
            try:
                outcome = decide(self.state, inputs.popleft(), self.clock.now())
            except Exception:
                for aggregate in aggregates:
                    aggregate.collect_events()  # the failing decision's: dropped
                # The aggregates go with the events for their snapshots only: a snapshot
                # is loaded from the store (TetherApplication.take_snapshot), never taken
                # of these, half changed by the failing decision.
                self._store(events, aggregates, after, envelope)
                raise
            for aggregate in outcome.aggregates:
                events += aggregate.collect_events()
                if not any(aggregate is seen for seen in aggregates):
                    aggregates.append(aggregate)
            for effect in outcome.effects:
                if isinstance(effect, AFTER_STORED):
                    self._store(events, aggregates, after, envelope)
                    events, aggregates, after = [], [], []
                elif not isinstance(effect, BEFORE_SAVE):
                    after.append(effect)
                    continue
                answer = self._perform(effect, envelope)
                if answer is not None:
                    inputs.append(answer)
        self._store(events, aggregates, after, envelope)

    def _store(self, events: list[Any], aggregates: list[Any], effects: list[Effect],
               envelope: Envelope | None) -> None:
        """Save ``events`` in one save (``aggregates``: theirs, for their snapshots), tell
        the router the notices they make, then perform ``effects`` (none is answered)."""
        if events:
            self._tell_notices(self.app.save(*events, *aggregates))
        for effect in effects:
            self._perform(effect, envelope)

    def _tell_notices(self, recordings: list[Recording[uuid.UUID]]) -> None:
        """Tell the router the notices the events just saved make, so a chat hears of them
        before the notice outbox has read them from the store (it plans the same ones,
        and the router sends each once)."""
        notices = [notice for recording in recordings
                   if isinstance(recording.domain_event, Session.Event)
                   for notice in planned_notices(recording.domain_event,
                                                 recording.notification.id, self.session_id)]
        if notices:
            self.send(self.subjects.notices,
                      NoticesPlanned(session_id=self.session_id, notices=notices,
                                     after=self.told_through))
            self.told_through = notices[-1].position

    def _perform(self, effect: Effect, envelope: Envelope | None) -> Any:
        """Do ``effect``; returns the input that answers it, if any."""
        match effect:
            case Send():
                self.send(effect.subject, effect.message)
            case Reply():
                self.reply(envelope, effect.message)
            case Ask():
                self.ask_async(effect.subject, effect.message, effect.reply_type,
                               tag=effect.tag, timeout=effect.timeout, here_only=True)
            case CallModel():
                request, generation = effect.request, effect.generation
                inbox, provider = self._next_call(), self.provider
                self.task = self.bus.spawn(
                    lambda: pump_model(provider, request, generation, inbox))
            case Compact():
                memory, summary, generation = effect.memory, effect.summary, effect.generation
                inbox, provider = self._next_call(), self.provider
                self.task = self.bus.spawn(
                    lambda: pump_compaction(provider, memory, summary, generation, inbox))
            case AskTitle():
                title, ref, provider = effect.request, self.actor_ref, self.provider
                self.bus.spawn(lambda: pump_title(provider, title, ref))
            case CancelModel():
                self._cancel_model()
            case RunTool():
                self._run_tool(effect)
            case StopTool():
                self._stop_tool()
            case Continue():
                return Continued(effect.then)
            case ReadWorkspace():
                return WorkspaceRead(read_workspace(effect.workspace))
            case ResolveDir():
                return DirResolved(effect.requested,
                                   resolve_dir(effect.current, effect.requested, effect.root),
                                   effect.user, effect.channel)
            case ReadSkills():
                return SkillsRead(effect.call_id,
                                  load_skills(effect.texts, effect.names, effect.workspace))
            case ReadPlan():
                return PlanRead(_read_text(effect.path))
            case WriteMemory():
                return self._write_memory(effect)
            case RestoreFiles():
                self.reply(envelope, self._restore(effect))
        return None

    # --- effects that touch the world ---------------------------------------------------

    def _run_tool(self, effect: RunTool) -> None:
        """Run an allowed call on a helper thread: snapshot what it changes, then run it."""
        call, grant, generation = effect.call, effect.grant, effect.generation
        ref, tools, workspace = self.actor_ref, self.tools, effect.workspace
        store, session_id, writes = self.snapshot_store, self.session_id, list(grant.writes)
        root = os.path.realpath(effect.root)
        wrote_plan = bool(effect.plan_file) and os.path.realpath(effect.plan_file) in writes
        self.running = (generation, call.id, grant)

        def run() -> None:
            snapshot: Snapshot | None = None
            try:
                if store is not None and writes:
                    # Copy what the call is about to change, so `tether undo` can put it back.
                    snapshot = store.take(session_id, f"{generation}-{call.id}", writes, root)
                output = tools.execute(call.name, call.input, workspace, grant)
                # A file name that is not UTF-8 reaches Python as lone surrogates, which
                # no message can hold: the output would be neither stored nor sent.
                output = ToolOutput(without_lone_surrogates(output.content), output.is_error)
            except OSError as exc:
                output = ToolOutput(f"not run: could not snapshot the files it changes: {exc}",
                                    True)
            except Exception as exc:  # executors should not raise; never lose the turn
                output = ToolOutput(f"tool failed: {type(exc).__name__}: {exc}", True)
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell(ToolFinished(generation, call.id, call.name, output, snapshot,
                                      wrote_plan))

        threading.Thread(target=contextvars.copy_context().run, args=(run,),
                         name=f"tool-{call.id}", daemon=True).start()

    def _write_memory(self, effect: WriteMemory) -> MemoryWritten:
        """Append the facts to MEMORY.md; a file that cannot be used safely (see
        :func:`append_memory`) is left alone with a warning."""
        path = os.path.join(effect.workspace, MEMORY_FILE)
        heading = f"## {effect.today.isoformat()}"
        try:
            added = append_memory(effect.workspace, effect.facts, effect.today)
        except OSError as exc:
            log.warning("session %s: memory not flushed: %s", self.session_id, exc)
            return MemoryWritten(path, heading, error=str(exc))
        return MemoryWritten(path, heading, added)

    def _restore(self, effect: RestoreFiles) -> Undone | ErrorReply:
        """``tether undo``: put files back and record it on the session."""
        assert self.state is not None and self.snapshot_store is not None
        try:
            with stamped(self.clock.now()):
                restored = undo_files(
                    self.state.session, self.app.session_events(self.session_id),
                    effect.to_version, self.snapshot_store, self.app.save,
                    os.path.realpath(effect.root))
        except UndoError as exc:
            return ErrorReply(error="undo", reason=str(exc))
        return Undone(session_id=self.session_id, restored=restored)

    def _next_call(self) -> _CallInbox:
        """The inbox of a new model call: the answers of any call before it are dropped."""
        self.calls += 1
        return _CallInbox(self.actor_ref, self.calls)

    def _cancel_model(self) -> None:
        self.calls += 1
        task, self.task = self.task, None
        if task is not None:
            task.cancel()

    def _stop_tool(self) -> None:
        """Kill the processes of the call running now, if any."""
        running, self.running = self.running, None
        if running is not None:
            running[2].cancel.set()


def _read_text(path: str) -> str | None:
    """The text of ``path``, or None when it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(PLAN_READ_LIMIT)
    except OSError:
        return None
