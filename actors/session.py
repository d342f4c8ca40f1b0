"""The session actor: one agent conversation, driven by messages, never blocking.

A turn: the user message is stored first; the model is called on the bus's I/O loop and
each delta comes back to the actor as a :class:`ModelDelta` tagged with a generation (the
aggregate's version when the call started), so deltas of an aborted call are dropped.
Every delta is published on ``<ns>.session.<id>.stream``. When the model's message is
complete the actor asks the session's TTSR monitor for a barrier (has every delta been
checked, and is it clear?) before storing the message or running any tool. Tool calls go
to the gatekeeper one by one; an allowed call runs on a helper thread after its action
hash is checked again. The loop ends when the model asks for no tool or the round limit
is reached. A message arriving mid-turn waits its turn; nothing is dropped.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import logging
import os
import threading
from collections import deque
from concurrent.futures import Future
from typing import Any

import msgspec
import pykka

from actors import engine_tools
from actors.authority import may_decide, refusal_reason
from actors.commands import (
    MODE_COMMANDS,
    PLAN_COMMANDS,
    Command,
    help_text,
    parse_command,
    resolve_dir,
    status_text,
)
from actors.conversation import (
    TreeMirror,
    complete_messages,
    history_at,
    resolve_node,
    tree_nodes,
)
from actors.engine_tools import (
    ASK_USER_QUESTION,
    ENGINE_TOOLS,
    EXIT_PLAN_MODE,
    LOAD_SKILLS,
    LOAD_TOOLS,
)
from actors.gatekeeper.deny_lists import action_hash
from actors.model.context import (
    DEFAULT_SYSTEM_PROMPT,
    CompactionPlan,
    build_request,
    context_window,
    estimate_history_tokens,
    memory_request,
    parse_facts,
    plan_compaction,
    summarize_stale_results,
    summary_request,
    summary_text,
)
from actors.model.pricing import cost_usd
from actors.model.prompt import (
    MEMORY_FILE,
    WorkspaceTexts,
    append_memory,
    assemble_system_prompt,
    load_skills,
    load_skills_definition,
    parse_load_skills,
    read_workspace,
)
from actors.model.redact import Redactor, StreamRedactor
from actors.model.titles import clean_title, exchange_messages, title_request, wants_title
from actors.modes import plan_file_for
from actors.ports import (
    Clock,
    Grant,
    MessageDone,
    ModelEvent,
    ModelRequest,
    Provider,
    ProviderError,
    Snapshot,
    Snapshots,
    SystemClock,
    TextDelta,
    ThinkingDelta,
    ToolExecutor,
    ToolInputDelta,
    ToolOutput,
    ToolUseStart,
    answer_of,
)
from actors.runtime import ActorSystem, AskResult, Envelope, TetherActor
from actors.undo import UndoError, undo_files
from events.application import TetherApplication
from events.forest import Forest, ForestError
from events.inbox import RefusedMessage
from events.lifecycle import FINISHED, refusal
from events.messages import (
    TREE_PAGE_MAX,
    Accepted,
    ApprovalRequest,
    AssistantNode,
    BarrierCheck,
    BarrierResult,
    BookmarkNode,
    Branched,
    BranchTo,
    CancelInteractions,
    ChannelMessage,
    ChatText,
    ContentBlock,
    DeleteNode,
    EditNode,
    ErrorKind,
    ErrorReply,
    Generate,
    GenerationDone,
    GenerationError,
    GenerationEvent,
    InteractionAnswer,
    InteractionOpened,
    InteractionSettled,
    Interrupt,
    Killed,
    KillSession,
    Mode,
    PlanAnswer,
    PlanReviewRequest,
    ProviderRequest,
    ProviderResponse,
    QuestionRequest,
    Reminder,
    StreamDelta,
    TextBlock,
    ToolProposal,
    ToolResultBlock,
    ToolResultNode,
    ToolUseBlock,
    TreeChanged,
    TreeCommand,
    TreeQuery,
    TreeView,
    UndoFiles,
    Undone,
    Usage,
    UserMessage,
    Verdict,
)
from events.session import Session, Turn
from projections.notices import full_input

log = logging.getLogger(__name__)


WAITING = ("approval", "question", "review")
"""Phases in which the session waits for its chat (through the interaction coordinator)."""

PLAN_READ_LIMIT = 200_000
"""Characters of the plan file read for a plan review."""

MAX_UNCHECKED_RETRIES = 2
"""Model calls repeated because the rule monitor missed part of the stream, per turn."""


class SessionConfig(msgspec.Struct, kw_only=True):
    """How a session talks to the model."""

    model: str
    round_limit: int = 25
    max_tokens: int = 4096
    ask_timeout: float = 5.0
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    verdict_timeout: float = 0.0
    """How long to wait for the gatekeeper (0: ask_timeout); longer when tier 2 reviews."""
    workspace_root: str = ""
    """The folder ``/dir`` may not leave (the engine's workspace); empty: the session's."""
    mode: Mode = "default"
    """The mode a new session starts in: default, plan or auto."""
    auto_approve: list[str] = msgspec.field(
        default_factory=lambda: ["write_file", "edit_file"])
    """Tools whose policy escalations ``auto`` mode approves (``/edit``)."""
    idle_timeout: float = 1800.0
    """Seconds a multi-turn session may wait for input before it is killed (0: never)."""
    safety_net: float = 15.0
    """Seconds without any activity mid-turn before the session says it waits (0: never)."""
    provider_retries: int = 3
    """Times a transient provider error (rate limit, overload, server error) is retried
    in one turn, after 1, 2, 4... seconds; each retry is recorded."""
    titles: bool = True
    """Name the session in the background once it has enough messages."""
    lazy_tools: bool = True
    """A session starts with only the load_tools meta-tool; groups load on demand."""
    context_window: int = 0
    """Tokens the model's window holds (0: the model table's figure); compaction keeps the
    history under 70% of what it leaves."""
    approvers: dict[str, list[str]] = {}
    """Per channel (or ``"*"``), who besides the owner may change the session's mode."""


class ForkOf(msgspec.Struct, kw_only=True):
    """Where a forked session starts: a copy of ``source_id`` at event ``at_version``."""

    source_id: str
    at_version: int
    history: list[Turn]
    fired_rules: list[str]


class NewSession(msgspec.Struct, kw_only=True):
    """What to record if the session does not exist yet."""

    name: str
    workspace: str
    channel: str
    multi_turn: bool = True
    budget_usd: float = 0.0
    origin: str = ""
    owner: str = ""
    """The principal the session belongs to (:attr:`Session.owner`)."""
    fork: ForkOf | None = None


class SessionTick(msgspec.Struct):
    """Time passed (from the manager): check the idle timeout and the safety net."""


# --- in-process messages -------------------------------------------------------------------


class ModelDelta(msgspec.Struct):
    generation: int
    event: ModelEvent


class ModelFailed(msgspec.Struct):
    generation: int
    error: str
    transient: bool = False


class TitleDone(msgspec.Struct):
    """The background title call ended: its answer, or why not."""

    text: str = ""
    usage: Usage = msgspec.field(default_factory=Usage)
    error: str = ""


async def pump_title(provider: Provider, request: ModelRequest,
                     ref: pykka.ActorRef[Any]) -> None:
    """Ask for a title on the bus loop; the answer comes back as TitleDone."""
    try:
        text, usage = await answer_of(provider, request)
        result = TitleDone(text, usage)
    except Exception as exc:  # a title is a nicety: say why, never fail the session
        result = TitleDone(error=f"{type(exc).__name__}: {exc}")
    with contextlib.suppress(pykka.ActorDeadError):
        ref.tell(result)


class CompactionDone(msgspec.Struct):
    """The compaction's two model calls ended: the memory call's and the summary call's
    answers, what they used, or why they failed."""

    generation: int
    memory: str = ""
    summary: str = ""
    usage: Usage = msgspec.field(default_factory=Usage)
    error: str = ""


async def pump_compaction(provider: Provider, memory: ModelRequest, summary: ModelRequest,
                          generation: int, ref: pykka.ActorRef[Any]) -> None:
    """Make the memory call, then the summary call, on the bus loop; the answers come back
    as CompactionDone (a failure of either says why)."""
    usage = Usage()
    try:
        facts, used = await answer_of(provider, memory)
        usage = used
        text, used = await answer_of(provider, summary)
        usage = Usage(usage.input_tokens + used.input_tokens,
                      usage.output_tokens + used.output_tokens)
        result = CompactionDone(generation, facts, text, usage)
    except Exception as exc:  # the turn goes on uncompacted; say why
        result = CompactionDone(generation, usage=usage, error=f"{type(exc).__name__}: {exc}")
    with contextlib.suppress(pykka.ActorDeadError):
        ref.tell(result)


class ToolFinished(msgspec.Struct):
    generation: int
    call_id: str
    tool: str
    output: ToolOutput
    snapshot: Snapshot | None = None


async def pump_model(
    provider: Provider, request: ModelRequest, generation: int, ref: pykka.ActorRef[Any]
) -> None:
    """Stream one model call into the actor as messages (runs on the bus loop)."""
    done = False
    try:
        async for event in provider.stream(request):
            ref.tell(ModelDelta(generation, event))
            done = done or isinstance(event, MessageDone)
        if not done:
            ref.tell(ModelFailed(generation, "model stream ended before the message was complete"))
    except ProviderError as exc:
        ref.tell(ModelFailed(generation, str(exc), exc.transient))
    except pykka.ActorDeadError:
        pass
    except Exception as exc:  # a provider bug must fail the turn, not vanish
        log.exception("model call failed")
        with contextlib.suppress(pykka.ActorDeadError):
            ref.tell(ModelFailed(generation, f"{type(exc).__name__}: {exc}"))


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
        self.last_input = self.last_activity = self.clock.now()
        self.safety_fired = False
        self.redactor = redactor or Redactor()
        self.streams: dict[tuple[str, int], StreamRedactor] = {}
        self.snapshot_store = snapshots
        self.app = app
        self.provider = provider
        self.tools = tools
        self.config = config
        self.new = new
        self.session: Session
        self.phase = "idle"
        self.generation = 0
        self.seq = 0
        self.partial = ""
        self.done: MessageDone | None = None
        self.task: Future[None] | None = None
        self.tool_queue: deque[ToolUseBlock] = deque()
        self.rounds = 0
        self.turn_usage = Usage()
        self.unchecked_retries = 0
        self.reminders: list[Reminder] = []
        self.awaiting: Verdict | None = None
        self.running: Grant | None = None
        """The grant of the call running now: setting its ``cancel`` kills its processes."""
        self.waiting_call = ""
        """The call (or plan review) the session waits on in a WAITING phase."""
        self.review_is_call = False
        self.plan = _PlanTracker()
        self.retries = 0
        self.retry_at: dt.datetime | None = None
        self.titling = False
        self.forest: Forest
        self.mirror: TreeMirror
        self.gen: Generate | None = None
        """The Generate request the running turn answers (None: a user message's turn)."""
        self.completions_left = 0
        self.alternative = False
        """The running model call is another completion of ``self.request``."""
        self.alt_parent = ""
        """The node the turn's completions answer."""
        self.request: ModelRequest | None = None
        self.gen_seq = 0
        self.gen_turn = 0
        """The turn the generation events belong to (turns ended before it, failed ones
        too, so two turns never share a number)."""
        self.turn_nodes: list[str] = []
        """The turn's final assistant nodes (seed 003: what ``done`` carries): the main
        completion's last message first, then each further completion's."""
        self.generation_subject = self.subjects.generation(session_id)
        self.compaction: CompactionPlan | None = None
        self.compaction_off = False
        """No more compaction this turn: one failed, or one had to summarize the whole
        history (the turn alone fills the budget, so compacting again would only repeat)."""
        self.workspace_texts = WorkspaceTexts()
        self.stream_subject = self.subjects.stream(session_id)

    # --- lifecycle ----------------------------------------------------------------------

    def recover(self) -> None:
        self._cancel_interactions("the session restarted")
        self._cancel_stream()
        session = self.app.session(self.session_id)
        if session is None:
            if self.new is None:
                raise LookupError(f"session {self.session_id} does not exist")
            session = Session(
                session_id=self.session_id,
                name=self.new.name,
                workspace=self.new.workspace,
                model=self.config.model,
                channel=self.new.channel,
                multi_turn=self.new.multi_turn,
                budget_usd=self.new.budget_usd,
                origin=self.new.origin,
                owner=self.new.owner,
            )
            if self.new.fork is not None:
                fork = self.new.fork
                session.fork_from(source_id=fork.source_id, at_version=fork.at_version,
                                  history=fork.history, fired_rules=fork.fired_rules)
            if self.config.mode != "default":
                session.change_mode(mode=self.config.mode, auto_approve=self._auto_list(
                    self.config.mode), reason="the configured starting mode")
            self.app.save(session)
        self.session = session
        self.forest = self.app.forest(self.session_id) or Forest(session_id=self.session_id)
        self.mirror = TreeMirror(self.forest)
        self.gen = None
        self.gen_turn, self.gen_seq = session.turns, 0
        self.phase = "idle"
        self.tool_queue.clear()
        self.last_input = self.last_activity = self.clock.now()
        self._sync_tree(publish=False)
        if session.in_turn and session.status not in FINISHED:
            # The process (or this actor) stopped mid-turn: the turn is lost. Answer every
            # tool call left without a result, so the history stays valid for the model,
            # say what happened, and take up any queued message.
            self._refuse_pending("the turn was interrupted by a restart before this call ran",
                                 running="the engine stopped while this call ran")
            self._record_failure("the turn was interrupted by a restart")
        elif session.queued and session.status not in FINISHED:
            self._start_queued()  # a message was stored but its turn had not started

    def on_stop(self) -> None:
        self._cancel_stream()
        self._stop_running()  # nothing it started may outlive the engine's record of it

    def on_failure_recorded(self, error: str) -> None:
        session = self.app.session(self.session_id)
        if session is not None:
            session.record_actor_failure(error=error)
            self.app.save(session)

    # --- dispatch -----------------------------------------------------------------------

    def handle(self, message: Any, envelope: Envelope | None) -> None:
        if isinstance(message, UserMessage):
            self._on_user_message(message, envelope)
        elif isinstance(message, ModelDelta):
            self._on_model_delta(message)
        elif isinstance(message, ModelFailed):
            if message.generation == self.generation and self.phase == "streaming":
                self._on_model_failed(message)
        elif isinstance(message, Interrupt):
            if message.generation == self.generation and self.phase in ("streaming", "barrier"):
                self._keep_reminders(message.later)
                self._interrupt(message.rules, message.reminder, message.source,
                                message.context_mode)
        elif isinstance(message, AskResult):
            self._on_ask_result(message)
        elif isinstance(message, ToolFinished):
            self._on_tool_finished(message)
        elif isinstance(message, InteractionSettled):
            self._on_settled(message)
        elif isinstance(message, SessionTick):
            self._on_tick()
        elif isinstance(message, TitleDone):
            self._on_title(message)
        elif isinstance(message, CompactionDone):
            self._on_compacted(message)
        elif isinstance(message, TreeQuery):
            self.reply(envelope, self._tree_page(message))
        elif isinstance(message, (BranchTo, EditNode)):
            self.reply(envelope, self._move(message))
        elif isinstance(message, TreeCommand):
            self.reply(envelope, self._change_tree(message))
        elif isinstance(message, UndoFiles):
            self.reply(envelope, self._undo(message))
        elif isinstance(message, Generate):
            self._on_generate(message, envelope)
        elif isinstance(message, KillSession):
            self._kill(message.reason)
            self.reply(envelope, Killed(session_id=self.session_id, found=True))
        else:
            log.warning("session %s ignored %r", self.session_id, message)

    # --- turn ---------------------------------------------------------------------------

    def _on_user_message(self, message: UserMessage, envelope: Envelope | None) -> None:
        """Store the message first (as the next turn's start, or queued behind the running
        turn), answer Accepted, then act on it. Commands are handled at once instead."""
        accepted = Accepted(session_id=self.session_id, name=self.session.name)
        if not may_decide(message.user, self.session.owner, self.session.home_channel,
                          self.config.approvers):
            self._refuse_sender(message, envelope)
            return
        command = parse_command(message.text)
        if command is not None:
            self._run_command(command, message)
            self.reply(envelope, accepted)
            return
        if self.phase in WAITING:
            # Text while the chat is asked something answers it (an approval: no, with the
            # text as the reason); the coordinator decides which (it is not a user message).
            self.send(self.subjects.interactions, ChatText(
                session_id=self.session_id, channel=message.channel, text=message.text,
                user=message.user))
            self.reply(envelope, accepted)
            return
        self.last_input = self.clock.now()
        if self.session.budget_exhausted:
            text = (f"session {self.session.name} spent ${self.session.cost_usd:.4f} of its "
                    f"${self.session.budget_usd:.2f} budget and cannot go on; fork it or "
                    "start a new session")
            self.send(self.subjects.channel_out(message.channel),
                      ChannelMessage(session_id=self.session_id, kind="error", text=text))
            self.reply(envelope, ErrorReply(error="budget_exhausted", reason=text))
            return
        if self.phase != "idle" or self.session.queued:
            self.session.queue_user_message(
                text=message.text, channel=message.channel, user=message.user
            )
            self.app.save(self.session)
            self.reply(envelope, accepted)
            if self.phase == "idle":
                self._start_queued()
            return
        self._receive(message.text, message.channel, message.user)
        self.reply(envelope, accepted)
        self._begin_turn()

    def _refuse_sender(self, message: UserMessage, envelope: Envelope | None) -> None:
        """A message from someone who may not decide for this session (its owner and the
        approvers of its home channel may): a command, an answer or a turn alike, it is
        refused, recorded and told to the sender's chat; nothing of it is stored here."""
        reason = refusal_reason(message.user, "send messages to", self.session.name)
        log.warning("session %s: %s", self.session_id, reason)
        self.app.save(RefusedMessage(
            channel=message.channel, user=message.user, kind="not_approver", reason=reason,
            size=len(message.text.encode()), excerpt=message.text))
        self.reply(envelope, ErrorReply(error="not_allowed", reason=reason))
        self.send(self.subjects.channel_out(message.channel),
                  ChannelMessage(session_id=self.session_id, kind="error", text=reason))

    def _run_command(self, command: Command, message: UserMessage) -> None:
        """Handle a chat command: never stored as a user message, never sent to the model;
        what it did is recorded and told to the channel."""
        name, result = command.name, ""
        if name == "status":
            result = status_text(self.session)
        elif name == "clear":
            if self.phase != "idle":
                result = "a turn is running; send /clear again when it is done"
            else:
                self.session.clear_context()
                result = "context cleared: the next message starts fresh"
        elif name == "dir":
            path = resolve_dir(self.session.workspace, command.args or ".",
                               self.config.workspace_root or self.session.workspace)
            if not command.args:
                result = f"working directory: {self.session.workspace}"
            elif path is None:
                result = (f"{command.args!r} is not a folder inside "
                          f"{self.config.workspace_root or self.session.workspace}")
            elif self.phase != "idle":
                result = "a turn is running; send /dir again when it is done"
            else:
                self.session.change_workspace(path=path)
                result = f"working directory is now {path}"
        elif name in ("approve", "deny"):
            if self.phase != "approval":
                result = "nothing is waiting for approval"
            else:
                interaction, _, why = command.args.partition(" ")
                self._answer_approval(interaction, approved=name == "approve", message=message,
                                      reason=why.strip())
                result = "answer sent"
        elif name == "default" and self.phase == "review":  # seed 000's third choice
            self.send(self.subjects.interactions, PlanAnswer(
                session_id=self.session_id, choice="default", user=message.user,
                channel=message.channel))
            result = "answer sent"
        elif name in MODE_COMMANDS:
            mode = MODE_COMMANDS[name]
            auto = self._auto_list(mode)
            self.session.change_mode(mode=mode, auto_approve=auto, reason=f"/{name}")
            result = f"mode is now {mode}" + (
                f"; auto-approved: {', '.join(auto)}" if auto else "")
            if mode == "plan":
                result += (f"; the plan goes to {self._plan_file()}, and ExitPlanMode asks "
                           "you to review it")
        elif name == "stop":
            if self.phase == "idle":
                result = "no turn is running"
            else:
                self._stop_turn(f"stopped by {message.user}")
                result = "the turn was stopped; the session waits for your next message"
        elif name in PLAN_COMMANDS:
            if self.phase != "review":
                result = "no plan is waiting for review"
            else:
                self.send(self.subjects.interactions, PlanAnswer(
                    session_id=self.session_id, choice=PLAN_COMMANDS[name],  # type: ignore[arg-type]
                    user=message.user, feedback=command.args, channel=message.channel))
                result = "answer sent"
        else:
            prefix = "" if name == "help" else f"unknown command /{name}. "
            result = prefix + help_text()
        self.session.run_command(name=name, args=command.args, user=message.user,
                                 channel=message.channel, result=result)
        self.app.save(self.session)
        self.send(
            self.subjects.channel_out(message.channel),
            ChannelMessage(session_id=self.session_id, kind="status", text=result),
        )

    def _auto_list(self, mode: str) -> list[str]:
        return list(self.config.auto_approve) if mode == "auto" else []

    def _plan_file(self) -> str:
        return plan_file_for(self.session.workspace, self.session_id)

    def _answer_approval(
        self, interaction_id: str, *, approved: bool, message: UserMessage, reason: str
    ) -> None:
        waiting = self.tool_queue[0].id if self.tool_queue else ""
        self.send(self.subjects.interactions, InteractionAnswer(
            session_id=self.session_id, interaction_id=interaction_id, approved=approved,
            user=message.user, reason=reason, call_id=waiting, channel=message.channel,
        ))

    def _start_queued(self) -> None:
        head = self.session.queued[0]
        self._receive(head.text, head.channel, head.user)
        self._begin_turn()

    def _receive(self, text: str, channel: str, user: str) -> None:
        self.gen = None
        resumed = self.session.status in FINISHED
        self.session.receive_user_message(text=text, channel=channel, user=user)
        if self.session.status != "running":
            self._set_status("running", "resumed" if resumed else "user message")
        self.app.save(self.session)

    def _set_status(self, status: str, reason: str) -> bool:
        """Move to ``status`` if the lifecycle allows it (unsaved); else log and refuse."""
        why = refusal(self.session.status, status)
        if why is not None:
            log.warning("session %s: refused to become %s (%s): %s", self.session_id, status,
                        reason, why)
            return False
        self.session.change_status(status=status, reason=reason)
        return True

    def _begin_turn(self) -> None:
        self.retries = 0
        self.retry_at = None
        self.plan = _PlanTracker()
        self._assemble_prompt()
        self.rounds = 0
        self.turn_usage = Usage()
        self.unchecked_retries = 0
        self.reminders = []
        self.gen_seq = 0
        self.gen_turn = self.session.turns
        self.turn_nodes = []
        self.compaction_off = False
        self.alternative = False
        self.completions_left = self.gen.n - 1 if self.gen is not None else 0
        self._next_call()

    def _next_call(self) -> None:
        """The turn's next model call; when the history fills 70% of the context budget it
        is compacted first (two model calls in the background, then this call)."""
        request = self._build_request()
        plan = None if self.compaction_off else plan_compaction(
            self.session.history, system=request.system, window=self._window(),
            sent_tokens=request.history_tokens, tools=request.tools)
        if plan is None:
            self._call_model(request)
            return
        self._active()
        self.compaction = plan
        self.generation = self.session.version
        self.phase = "compacting"
        model = self.config.model
        memory, summary = memory_request(plan.older, model=model), summary_request(
            plan.older, model=model)
        generation, ref, provider = self.generation, self.actor_ref, self.provider
        self.task = self.bus.spawn(
            lambda: pump_compaction(provider, memory, summary, generation, ref))

    def _on_compacted(self, done: CompactionDone) -> None:
        """Append the durable facts to MEMORY.md, replace the older part of the history
        with its summary (both recorded), then make the model call that waited."""
        plan = self.compaction
        if done.generation != self.generation or self.phase != "compacting" or plan is None:
            return
        self.compaction, self.task = None, None
        cost = cost_usd(self.config.model, done.usage)
        summary = self.redactor.text(done.summary.strip())
        error = done.error or ("" if summary else "the summary call answered nothing")
        if error:
            log.warning("session %s: compaction failed: %s", self.session_id, error)
            self.session.fail_compaction(error=error, cost_usd=cost)
            self.compaction_off = True
        else:
            self.compaction_off = plan.replaced >= len(self.session.history)
            self._flush_memory(parse_facts(self.redactor.text(done.memory)))
            text = summary_text(summary)
            after = estimate_history_tokens(summarize_stale_results(
                [Turn("user", [TextBlock(text)]), *self.session.history[plan.replaced:]]))
            self.session.compact_history(summary=text, replaced=plan.replaced,
                                         tokens_before=plan.tokens, tokens_after=after,
                                         budget=plan.budget, cost_usd=cost)
        self.app.save(self.session)
        self._call_model()

    def _flush_memory(self, facts: list[str]) -> None:
        """Append ``facts`` to the workspace's MEMORY.md under today's heading and record
        the ones added; nothing when none is new. A file that cannot be used safely (see
        :func:`append_memory`) is left alone with a warning."""
        if not facts:
            return
        today = self.clock.now().date()
        try:
            added = append_memory(self.session.workspace, facts, today)
        except OSError as exc:
            log.warning("session %s: memory not flushed: %s", self.session_id, exc)
            return
        if added:
            self.session.flush_memory(path=os.path.join(self.session.workspace, MEMORY_FILE),
                                      facts=added, heading=f"## {today.isoformat()}")

    def _window(self) -> int:
        return context_window(self.config.model, self.config.context_window)

    def _system_text(self) -> str:
        """The system prompt as sent: the assembled prompt with the mode's instructions."""
        return engine_tools.system_prompt(
            self.session.system_prompt or self.config.system_prompt, self.session.mode,
            self._plan_file())

    def _build_request(self) -> ModelRequest:
        """The next call's request from the history (mirrored into the tree first)."""
        self._sync_tree()
        self.alt_parent = self.mirror.cursor
        history = self.session.history
        no_tools = self.gen is not None and not self.gen.tools
        tools = ([] if no_tools and not _holds_tool_blocks(history)
                 else self._tool_definitions())
        request = build_request(
            history,
            model=self.config.model,
            tools=tools,
            max_tokens=self.config.max_tokens,
            system=self._system_text(),
            window=self.config.context_window,
        )
        if no_tools and tools:
            # The API refuses tool blocks in a request that defines no tools: they are
            # defined, and the model is told to use none.
            request.tool_choice = {"type": "none"}
        return request

    def _call_model(self, request: ModelRequest | None = None) -> None:
        """Stream one model call: ``request``, else another completion of the last one,
        else a request built now."""
        self._active()
        self.streams = {}
        self.generation = self.session.version
        self.seq = 0
        self.partial = ""
        self.done = None
        self.phase = "streaming"
        self._publish("turn_start")
        if request is None:
            if self.alternative and self.request is not None:
                request = self.request  # another completion of the same context, built once
            else:
                request = self._build_request()
        self.request = request
        self._emit(ProviderRequest, model=request.model, messages=len(request.messages),
                   input_tokens=request.input_tokens, max_tokens=request.max_tokens,
                   tools=[t["name"] for t in request.tools],
                   tool_choice=(request.tool_choice or {}).get("type", "auto"))
        generation, ref, provider = self.generation, self.actor_ref, self.provider
        self.task = self.bus.spawn(lambda: pump_model(provider, request, generation, ref))

    # --- the conversation tree and generation events -----------------------------------

    def _root_prompt(self) -> str:
        """The system prompt whose root the session's messages hang under."""
        return self.session.system_prompt or self.config.system_prompt

    def _sync_tree(self, publish: bool = True) -> None:
        """Mirror the history's complete messages into the tree (saved; a message of tool
        results waits until it holds every result); with ``publish``, say which assistant
        messages and tool results it placed."""
        history = self.session.history
        placed = self.mirror.sync(self._root_prompt(), history,
                                  complete=complete_messages(history))
        self._save_tree()
        if not publish:
            return
        for node, parent, turn in placed:
            if turn.role == "assistant":
                # The main completion's latest message: the one before it (a tool call's)
                # was on the way, not final.
                self.turn_nodes[:1] = [node]
                self._emit(AssistantNode, node_id=node, parent_id=parent,
                           content=list(turn.content))
                continue
            for block in turn.content:
                if isinstance(block, ToolResultBlock):
                    self._emit(ToolResultNode, node_id=node, call_id=block.tool_use_id,
                               is_error=block.is_error, content=block.content)

    def _tree_page(self, query: TreeQuery) -> TreeView:
        """A page of the tree as it stands (complete messages mirrored first)."""
        self._sync_tree(publish=False)
        nodes = tree_nodes(self.forest.state)
        start = max(0, query.offset)
        end = start + max(1, min(query.limit, TREE_PAGE_MAX))
        return TreeView(session_id=self.session_id, cursor=self.mirror.cursor,
                        nodes=nodes[start:end], offset=start, total=len(nodes),
                        version=self.forest.version)

    def _stand_at(self, node_id: str, history: list[Turn], reason: str) -> None:
        """Record that the session stands at ``node_id`` with ``history`` (the path to
        it), and put the tree's cursor on exactly that node."""
        self.session.move_to(node_id=node_id, history=history, reason=reason)
        self.app.save(self.session)
        self.mirror.stand_at(node_id, self._root_prompt(), self.session.history)
        self._save_tree()

    def _save_tree(self) -> None:
        if self.forest.pending_events:
            self.app.save(self.forest)

    def _emit(self, event: type[GenerationEvent], /, **fields: Any) -> None:
        """Publish one generation event of the running turn."""
        self.gen_seq += 1
        self.send(self.generation_subject, event(
            session_id=self.session_id, turn=self.gen_turn, seq=self.gen_seq,
            **fields))

    def _tree_between_turns(self) -> ErrorReply | None:
        """Ready the tree for a change by the user (the store caught up, the history
        mirrored), or why not: only between turns (a running turn is never changed under
        it)."""
        if self.phase != "idle" or self.session.queued:
            return ErrorReply(error="busy", reason="a turn is running; try again when it "
                              "is done (or /stop it)")
        self._sync_tree(publish=False)
        return None

    def _undo(self, message: UndoFiles) -> Undone | ErrorReply:
        """``tether undo``: put files back from the snapshots of this session's calls,
        recorded on the session by its actor like every other change. Only between turns."""
        if self.phase != "idle" or self.session.queued:
            return ErrorReply(error="busy", reason=f"session {self.session.name} is in the "
                              "middle of a turn; undo it when it waits")
        if self.snapshot_store is None:
            return ErrorReply(error="undo", reason="this engine takes no snapshots")
        try:
            restored = undo_files(self.session, self.app.session_events(self.session_id),
                                  message.to_version, self.snapshot_store, self.app.save,
                                  os.path.realpath(self.config.workspace_root
                                                   or self.session.workspace))
        except UndoError as exc:
            return ErrorReply(error="undo", reason=str(exc))
        return Undone(session_id=self.session_id, restored=restored)

    def _move(self, message: BranchTo | EditNode) -> Branched | ErrorReply:
        """Branch (or edit, then branch) to a node of the tree: the session's history
        becomes the path to it. Only between turns."""
        busy = self._tree_between_turns()
        if busy is not None:
            return busy
        try:
            node_id = resolve_node(self.forest.state, message.node_id)
            if isinstance(message, EditNode):
                node_id = self.forest.edit(node_id, message.text)
            history = history_at(self.forest.state, node_id)
        except (LookupError, ForestError) as exc:
            self._save_tree()  # an edit that was made stays, even if no session can stand there
            return ErrorReply(error="tree", reason=str(exc))
        self._save_tree()
        verb = "edited" if isinstance(message, EditNode) else "branched"
        self._stand_at(node_id, history, f"{verb} by {message.user}")
        return Branched(session_id=self.session_id, node_id=node_id,
                        messages=len(self.session.history))

    def _change_tree(self, message: TreeCommand) -> TreeChanged | ErrorReply:
        """Split, delete or bookmark a node of the tree, only between turns. A delete
        never touches the session's path (move the session first); a split on it
        re-reads the history from the tree (recorded as MovedTo, the same messages in
        more nodes), so the history and the tree keep agreeing."""
        busy = self._tree_between_turns()
        if busy is not None:
            return busy
        state = self.forest.state
        cursor = self.mirror.cursor
        on_path = {node.id for node in state.path(cursor)} if cursor else set()
        resplit = False
        try:
            if isinstance(message, BookmarkNode):
                if message.remove:
                    node_id = state.bookmarks.get(message.name, "")
                    self.forest.remove_bookmark(message.name)
                    detail = f"bookmark {message.name!r} removed"
                else:
                    node_id = resolve_node(state, message.node_id)
                    self.forest.bookmark(message.name, node_id)
                    detail = f"bookmark {message.name!r} names {node_id[:8]}"
            elif isinstance(message, DeleteNode):
                node_id = resolve_node(state, message.node_id)
                if node_id in on_path:
                    raise LookupError(
                        f"session {self.session.name} stands at {node_id[:8]} or below it; "
                        "move it elsewhere first (tether branch), then delete")
                gone = 1 + (len(state.descendants(node_id)) if message.mode == "cascade"
                            else 0)
                self.forest.delete(node_id, message.mode)
                detail = (f"deleted {node_id[:8]}" + (
                    f" and the {gone - 1} node{'s' if gone != 2 else ''} under it"
                    if gone > 1 else "") + (
                    "; its children took its place" if message.mode == "reparent" else ""))
            else:
                split = resolve_node(state, message.node_id)
                node_id = self.forest.split(split, message.position)
                resplit = split in on_path
                detail = (f"split {split[:8]}: {node_id[:8]} holds its first "
                          f"{message.position} characters, {split[:8]} the rest")
        except (LookupError, ForestError) as exc:
            return ErrorReply(error="tree", reason=str(exc))
        self._save_tree()
        if resplit:
            try:
                history = history_at(self.forest.state, cursor)
            except (LookupError, ForestError) as exc:  # the split stands; the session too
                return ErrorReply(error="tree", reason=f"split, but the session's history "
                                  f"could not be read back from the tree: {exc}")
            self._stand_at(cursor, history, f"a message on its path split by {message.user}")
        return TreeChanged(session_id=self.session_id, node_id=node_id, detail=detail)

    def _on_generate(self, message: Generate, envelope: Envelope | None) -> None:
        """Answer the history as it stands, with no new user message (refused with a
        reason when the session is busy or the request cannot be served)."""
        history = self.session.history
        why = ""
        if self.phase != "idle" or self.session.queued:
            why = "a turn is running; generate when it is done (or /stop it)"
        elif message.n > 1 and message.tools:
            why = (f"{message.n} completions cannot run with tools active: ask for one, or "
                   "turn tools off (tether generate --no-tools)")
        elif self.session.budget_exhausted:
            why = f"session {self.session.name} spent its budget"
        elif not history or history[-1].role != "user":
            why = ("nothing to answer: the session stands at an assistant message (or has "
                   "none); send a message, or branch to a user message first")
        if why:
            self.reply(envelope, ErrorReply(error="generate_refused", reason=why))
            return
        resumed = self.session.status in FINISHED
        self.session.start_generation(n=message.n, tools=message.tools,
                                      max_tool_iterations=message.max_tool_iterations,
                                      user=message.user)
        if self.session.status != "running":
            self._set_status("running", "resumed" if resumed else "generate")
        self.app.save(self.session)
        self.last_input = self.clock.now()
        self.reply(envelope, Accepted(session_id=self.session_id, name=self.session.name))
        self.gen = message
        self._begin_turn()

    def _assemble_prompt(self) -> None:
        """Build the system prompt from the workspace for this turn (redacted); record it
        when it changed."""
        self.workspace_texts = read_workspace(self.session.workspace)
        for warning in self.workspace_texts.warnings:
            log.warning("session %s: %s", self.session_id, warning)
        text = self.redactor.text(assemble_system_prompt(self.config.system_prompt,
                                                         self.workspace_texts))
        if text != self.session.system_prompt:
            self.session.set_system_prompt(text=text)
            self.app.save(self.session)

    def _lazy(self) -> dict[str, str]:
        """The executor's tool groups when tools load lazily, else nothing."""
        return self.tools.groups() if self.config.lazy_tools else {}

    def _tool_definitions(self) -> list[dict[str, Any]]:
        """What the model may call now: the loaded groups (all, without lazy loading),
        the engine's own tools, and the meta-tools for what is not loaded yet."""
        groups = self._lazy()
        loaded = self.session.loaded_groups
        tools = self.tools.definitions(loaded if groups else None)
        tools += engine_tools.definitions(self.session.mode)
        if groups and any(g not in loaded for g in groups):
            tools.append(engine_tools.load_tools_definition(groups, loaded))
        if self.workspace_texts.skills:
            tools.append(load_skills_definition())
        return tools

    def _publish(self, kind: Any, text: str = "", block: int = 0) -> None:
        self.seq += 1
        start = kind == "turn_start"
        channel = self.session.channel if start else ""
        turn = self.session.completed_turns if start else 0
        self.send(
            self.stream_subject,
            StreamDelta(
                session_id=self.session_id,
                generation=self.generation,
                seq=self.seq,
                kind=kind,
                text=text,
                block=block,
                channel=channel,
                turn=turn,
            ),
        )

    def _on_model_delta(self, message: ModelDelta) -> None:
        if message.generation != self.generation or self.phase != "streaming":
            return  # a delta of an aborted call
        self._active()
        event = message.event
        if isinstance(event, TextDelta):
            self.partial += event.text
            self._publish_redacted("text", event.index, event.text)
        elif isinstance(event, ThinkingDelta):
            self._publish_redacted("thinking", event.index, event.text)
        elif isinstance(event, ToolUseStart):
            self._publish("tool_start", event.name, event.index)
        elif isinstance(event, ToolInputDelta):
            self._publish("tool_input", event.partial_json, event.index)
        elif isinstance(event, MessageDone):
            self.done = event
            self.task = None
            self._emit(ProviderResponse, stop_reason=event.stop_reason, usage=event.usage)
            for (kind, index), stream in self.streams.items():
                rest = stream.flush()  # what was held back while a secret could form
                if rest:
                    self._publish(kind, rest, index)
            self.streams = {}
            self._publish("end")
            self.phase = "barrier"
            self.ask_async(
                self.subjects.ttsr(self.session_id),
                BarrierCheck(session_id=self.session_id, generation=self.generation, seq=self.seq),
                BarrierResult,
                tag=f"barrier:{self.generation}",
                timeout=self.config.ask_timeout,
            )

    def _publish_redacted(self, kind: str, index: int, text: str) -> None:
        """Publish ``text`` through the block's streaming redactor: only what cannot be the
        start of a secret goes out now; the rest waits for the next delta or the end."""
        stream = self.streams.get((kind, index))
        if stream is None:
            stream = self.streams[(kind, index)] = self.redactor.stream()
        safe = stream.feed(text)
        if safe:
            self._publish(kind, safe, index)

    def _on_ask_result(self, result: AskResult) -> None:
        kind, _, key = result.tag.partition(":")
        if kind == "barrier":
            if self.phase != "barrier" or key != str(self.generation):
                return
            answer = result.message
            if not isinstance(answer, BarrierResult):
                # Fail closed: nothing the monitor has not vouched for is stored or run.
                self._record_failure(
                    f"the rule monitor did not confirm the reply ({result.error}); "
                    "stopped before storing it or running any tool"
                )
            elif answer.unchecked:
                self._retry_unchecked()
            elif not answer.clear:
                self._keep_reminders(answer.later)
                self._interrupt(answer.rules, answer.reminder, "text", answer.context_mode)
            else:
                self._keep_reminders(answer.later)
                self._commit_message()
        elif kind == "verdict":
            self._on_verdict(key, result)
        elif kind == "opened":
            self._on_opened(key, result)

    def _retry_unchecked(self) -> None:
        # The monitor missed part of this stream (it restarted, or a delta was lost): ask
        # the model again so every delta of the reply is checked.
        self.unchecked_retries += 1
        if self.unchecked_retries > MAX_UNCHECKED_RETRIES:
            self._record_failure("the rule monitor could not check the reply")
            return
        log.warning("session %s: the rule monitor missed part of the stream; asking again",
                    self.session_id)
        self.session.record_unchecked_stream(attempt=self.unchecked_retries)
        self.app.save(self.session)
        self._call_model()

    def _interrupt(
        self, rules: list[str], reminder: str, source: str, context_mode: str = "discard"
    ) -> None:
        self._cancel_stream()
        if self.alternative:
            # Another completion broke a rule: it is dropped (never in the tree); the
            # history, which holds the first completion, stays as it is.
            log.info("session %s: a completion was dropped: rules %s", self.session_id,
                     ", ".join(rules))
            self.session.drop_alternative(rules=rules)
            self.app.save(self.session)
            self.phase, self.done = "tools", None
            self._next_tool()
            return
        self.session.record_ttsr_interruption(
            rules=rules,
            reminder=reminder,
            generation=self.generation,
            partial_text=self.redactor.text(self.partial),
            source=source,
            context_mode=context_mode,
        )
        self.app.save(self.session)
        self._call_model()

    def _over_budget(self) -> bool:
        """The session spent more than its budget: fail it (unanswered calls refused)."""
        spent = self.session.cost_usd + self._turn_cost()
        budget = self.session.budget_usd
        if budget <= 0 or spent <= budget:
            return False
        self.session.exhaust_budget(cost_usd=spent, budget_usd=budget)
        self._refuse_pending(f"not run: the session's ${budget:.2f} budget is spent")
        self._record_failure(f"budget exhausted: ${spent:.4f} spent of ${budget:.2f}",
                             finish=True, kind="budget")
        return True

    def _commit_alternative(self, done: MessageDone) -> None:
        """Another completion: its own branch under the node the first one answers."""
        content = [self._redact_block(b) for b in done.content]
        node = self.forest.append(self.alt_parent, "assistant", content)
        self.session.add_alternative(content=content, stop_reason=done.stop_reason,
                                     usage=done.usage, node_id=node)
        self.turn_usage = Usage(
            self.turn_usage.input_tokens + done.usage.input_tokens,
            self.turn_usage.output_tokens + done.usage.output_tokens,
        )
        if self._over_budget():
            return
        self._save_tree()
        self.app.save(self.session)
        if node != self.alt_parent and node not in self.turn_nodes:
            self.turn_nodes.append(node)
            self._emit(AssistantNode, node_id=node, parent_id=self.alt_parent, content=content)
        self.phase, self.tool_queue = "tools", deque()
        self._next_tool()

    def _commit_message(self) -> None:
        done = self.done
        assert done is not None
        if self.alternative:
            self._commit_alternative(done)
            return
        self.session.append_assistant_message(
            content=[self._redact_block(b) for b in done.content],
            stop_reason=done.stop_reason,
            usage=done.usage,
            generation=self.generation,
        )
        self.turn_usage = Usage(
            self.turn_usage.input_tokens + done.usage.input_tokens,
            self.turn_usage.output_tokens + done.usage.output_tokens,
        )
        self.rounds += 1
        if self._over_budget():
            return
        self.app.save(self.session)
        self._sync_tree()
        said = "".join(b.text for b in done.content if isinstance(b, TextBlock)).strip()
        if said:
            self.plan.streamed = self.redactor.text(said)
        calls = [b for b in done.content if isinstance(b, ToolUseBlock)]
        gen = self.gen
        if calls and gen is not None and self.rounds >= max(1, gen.max_tool_iterations):
            # Seed 003: max_tool_iterations = N allows N model calls; running this
            # message's calls would need call N + 1. Checked before any call runs: they
            # are refused, never run with their results thrown away.
            self._refuse_pending("not run: the generation reached its tool-iteration limit")
            self._record_failure(
                f"the generation made {self.rounds} model calls, its limit "
                "(max_tool_iterations), and the last asked for tools; it stopped before "
                "running them", kind="tool_iteration_limit")
            return
        self.tool_queue = deque(calls)
        self.phase = "tools"
        self._next_tool()

    def _redact_block(self, block: ContentBlock) -> ContentBlock:
        # Tool inputs are kept exact: they are what ran, and the action hash covers them.
        if isinstance(block, TextBlock):
            return TextBlock(self.redactor.text(block.text))
        return block

    # --- tools --------------------------------------------------------------------------

    def _next_tool(self) -> None:
        if not self.tool_queue:
            self._sync_tree()  # the message of results is complete: into the tree
            if not self.session.pending_tool_calls() and self._last_stop() != "tool_use":
                if self.session.mode == "plan" and self.plan.touched and not self.plan.exited:
                    # A plan file was written but ExitPlanMode never called: review anyway.
                    self._open_review(f"plan-{self.generation}", is_call=False)
                    return
                if self.completions_left > 0:
                    self.completions_left -= 1
                    self.alternative = True
                    self._call_model()
                    return
                self._complete_turn("end_turn")
            elif self.rounds >= self.config.round_limit:
                self._complete_turn("round_limit")
            else:
                self._next_call()
            return
        call = self.tool_queue[0]
        try:
            digest = action_hash(call.name, call.input)
        except ValueError:  # NaN or Infinity in the input: not canonical JSON
            digest = ""
        self.session.propose_tool_call(
            call_id=call.id, tool=call.name, tool_input=call.input, action_hash=digest
        )
        if call.name in ENGINE_TOOLS and digest:
            self._engine_tool(call)
            return
        group = self.tools.group_of(call.name) if self._lazy() else None
        if group is not None and group not in self.session.loaded_groups:
            # Used by name before it was loaded: that asks for its group as well.
            self.session.load_tools(groups=[group], reason=f"{call.name} was used")
        if not digest:
            self.session.decide_tool_call(
                call_id=call.id, decision="deny", reason="the input is not valid JSON",
                tier="protection",
            )
            self._refuse(call, "the input is not valid JSON (NaN or Infinity)")
            return
        self.app.save(self.session)
        self.ask_async(
            self.subjects.gatekeeper,
            ToolProposal(
                session_id=self.session_id,
                call_id=call.id,
                tool=call.name,
                input=call.input,
                workspace=self.session.workspace,
                action_hash=digest,
                mode=self.session.mode,  # type: ignore[arg-type]
                auto_approve=call.name in self.session.auto_approve,
                plan_file=self._plan_file() if self.session.mode == "plan" else "",
            ),
            Verdict,
            tag=f"verdict:{call.id}",
            timeout=self.config.verdict_timeout or self.config.ask_timeout,
        )

    def _last_stop(self) -> str:
        return self.done.stop_reason if self.done else ""

    def _on_verdict(self, call_id: str, result: AskResult) -> None:
        if self.phase != "tools" or not self.tool_queue or self.tool_queue[0].id != call_id:
            return
        call = self.tool_queue[0]
        verdict = result.message
        if not isinstance(verdict, Verdict):
            verdict = Verdict(
                call_id=call_id,
                decision="deny",
                reason=f"the gatekeeper did not answer ({result.error})",
                action_hash="",
                tier="unavailable",
            )
        self.session.decide_tool_call(
            call_id=call_id, decision=verdict.decision, reason=verdict.reason, tier=verdict.tier
        )
        if verdict.decision == "escalate":
            self._ask_approval(call, verdict)
            return
        if verdict.decision != "allow":
            self._refuse(call, verdict.reason)
            return
        self._execute(call, verdict)

    def _ask_approval(self, call: ToolUseBlock, verdict: Verdict) -> None:
        """Tier 3: ask the session's chat; the answer comes back as InteractionSettled."""
        self.app.save(self.session)
        self.awaiting = verdict
        self._open_interaction("approval", call.id, ApprovalRequest(
            session_id=self.session_id, call_id=call.id, tool=call.name,
            summary=full_input(call.input), reason=verdict.reason,
            channel=self.session.channel, owner=self.session.owner,
            home_channel=self.session.home_channel,
        ))

    def _engine_tool(self, call: ToolUseBlock) -> None:
        """The engine's own tools: the meta-tools answered at once, AskUserQuestion and
        ExitPlanMode by the chat."""
        if call.name == LOAD_TOOLS:
            groups = engine_tools.parse_load_tools(call.input, self.tools.groups())
            if isinstance(groups, str):
                self._refuse_engine_call(call, groups)
                return
            self._allow_engine_call(call, "the engine loads tool groups")
            new = [g for g in groups if g not in self.session.loaded_groups]
            if new:  # a group loaded already changes nothing: no event
                self.session.load_tools(groups=new, reason="load_tools")
            tools = ", ".join(d["name"] for d in self.tools.definitions(groups))
            self._finish_engine_call(call, f"loaded {', '.join(groups)}: {tools}", False)
        elif call.name == LOAD_SKILLS:
            skills = parse_load_skills(call.input)
            if isinstance(skills, str):
                self._refuse_engine_call(call, skills)
                return
            self._allow_engine_call(call, "the engine reads skills")
            body = load_skills(self.workspace_texts, skills, self.session.workspace)
            self._finish_engine_call(call, body, False)
        elif call.name == ASK_USER_QUESTION:
            question = engine_tools.parse_question(call.input)
            if isinstance(question, str):
                self._refuse_engine_call(call, question)
                return
            self._allow_engine_call(call, "the engine asks the chat")
            self._open_interaction("question", call.id, QuestionRequest(
                session_id=self.session_id, call_id=call.id, question=question.question,
                options=question.options, channel=self.session.channel,
                owner=self.session.owner, home_channel=self.session.home_channel))
        elif call.name == EXIT_PLAN_MODE:
            if self.session.mode != "plan":
                self._refuse_engine_call(call, f"not in plan mode (the mode is "
                                               f"{self.session.mode})")
                return
            self._allow_engine_call(call, "the engine asks the chat to review the plan")
            self._open_review(call.id, is_call=True)

    def _allow_engine_call(self, call: ToolUseBlock, reason: str) -> None:
        self.session.decide_tool_call(call_id=call.id, decision="allow", reason=reason,
                                      tier="engine")

    def _refuse_engine_call(self, call: ToolUseBlock, reason: str) -> None:
        self.session.decide_tool_call(call_id=call.id, decision="deny", reason=reason,
                                      tier="engine")
        self._refuse(call, reason)

    def _open_review(self, call_id: str, *, is_call: bool) -> None:
        """Put the plan to the chat: from the plan file, else what was written to it, else
        the streamed reply, else a fallback line."""
        self.plan.exited = True
        plan_file = self._plan_file()
        plan, source = engine_tools.resolve_plan(_read_text(plan_file), self.plan.written,
                                                 self.plan.streamed)
        self.session.propose_plan(plan=plan, source=source, call_id=call_id if is_call else "",
                                  plan_file=plan_file)
        self.app.save(self.session)
        self.review_is_call = is_call
        self._open_interaction("review", call_id, PlanReviewRequest(
            session_id=self.session_id, call_id=call_id, plan=plan, source=source,
            channel=self.session.channel, owner=self.session.owner,
            home_channel=self.session.home_channel))

    def _open_interaction(self, phase: str, call_id: str, request: Any) -> None:
        self.app.save(self.session)  # the call's proposal and decision come first
        self.phase = phase
        self.waiting_call = call_id
        self.ask_async(self.subjects.interactions, request, InteractionOpened,
                       tag=f"opened:{call_id}", timeout=self.config.ask_timeout)

    def _on_opened(self, call_id: str, result: AskResult) -> None:
        if result.error and self.phase in WAITING and call_id == self.waiting_call:
            self._on_settled(InteractionSettled(
                session_id=self.session_id, call_id=call_id, interaction_id="",
                kind={"approval": "approval", "question": "question"}.get(
                    self.phase, "plan_review"),  # type: ignore[arg-type]
                outcome="cancelled", by="tether",
                reason=f"nobody could be asked ({result.error})"))

    def _on_settled(self, settled: InteractionSettled) -> None:
        if self.phase not in WAITING or settled.call_id != self.waiting_call:
            return  # an answer to something this session no longer waits on
        phase, self.phase, self.waiting_call = self.phase, "tools", ""
        if phase == "review":
            self._on_review(settled)
            return
        call = self.tool_queue[0]
        if phase == "question":
            if settled.outcome == "answered":
                self._finish_engine_call(call, f"The user answered: {settled.answer}", False)
            else:
                self._finish_engine_call(call, f"No answer: {settled.reason}. Go on without "
                                               "it, or ask again later.", True)
            return
        verdict, self.awaiting = self.awaiting, None
        approved = settled.outcome == "approved"
        self.session.decide_tool_call(
            call_id=call.id, decision="allow" if approved else "deny",
            reason=settled.reason,
            tier="human" if settled.by not in ("timeout", "tether")
            else f"approval-{settled.by}",
        )
        if not approved or verdict is None:
            self._refuse(call, settled.reason)
            return
        self._execute(call, verdict)

    def _finish_engine_call(self, call: ToolUseBlock, output: str, is_error: bool) -> None:
        self.session.record_tool_result(call_id=call.id, tool=call.name,
                                        output=self.redactor.text(output), is_error=is_error)
        self.app.save(self.session)
        self.tool_queue.popleft()
        self._next_tool()

    def _on_review(self, settled: InteractionSettled) -> None:
        choice = settled.outcome
        self.session.review_plan(choice=choice, feedback=settled.answer, by=settled.by)
        if choice not in ("proceed", "clean_proceed", "default", "adjust"):
            why = f"the plan review ended without an answer: {settled.reason}"
            self._refuse_pending(why)
            self._record_failure(why)
            return
        if self.review_is_call:
            call = self.tool_queue[0]
            output, is_error = engine_tools.plan_result(choice, settled.answer)
            if choice == "adjust":
                self.plan.exited = False  # a revised plan is reviewed again
                self._finish_engine_call(call, output, is_error)  # the model revises the plan
                return
            self.session.record_tool_result(call_id=call.id, tool=call.name, output=output,
                                            is_error=False)
            self.tool_queue.popleft()
            self._refuse_pending("not run: the plan was approved, so implementation starts "
                                 "with the next message")
        # Proceed, clean proceed, or feedback for a plan offered without ExitPlanMode:
        # this turn ends and the next starts with the implementation prompt (or feedback).
        plan = self.session.plan
        user, channel = settled.by, self.session.channel
        self._complete_turn("plan_review", take_queued=False)
        if choice == "adjust":
            self._receive(settled.answer or "Please revise the plan.", channel, user)
        elif choice == "default":  # implemented with every escalation asked
            self.session.change_mode(mode="default", auto_approve=[],
                                     reason=f"plan approved by {user}, in the default mode")
            self._receive(engine_tools.implementation_prompt(plan), channel, user)
        else:
            self.session.change_mode(mode="auto", auto_approve=self._auto_list("auto"),
                                     reason=f"plan approved by {user}")
            if choice == "clean_proceed":
                self.session.clear_context()
            self._receive(engine_tools.implementation_prompt(plan), channel, user)
        self._begin_turn()

    def _execute(self, call: ToolUseBlock, verdict: Verdict) -> None:
        """Run an allowed call on a helper thread, after checking it is the one judged."""
        # Right before execution: the call must still be the one the gatekeeper judged.
        if action_hash(call.name, call.input) != verdict.action_hash:  # already known valid
            self._refuse(call, "action hash mismatch: the call changed after it was judged")
            return
        self.app.save(self.session)
        self.phase = "executing"
        ref, tools, workspace, generation = (
            self.actor_ref, self.tools, self.session.workspace, self.generation
        )

        store, session_id, writes = self.snapshot_store, self.session_id, verdict.writes
        if self.session.mode == "plan" and os.path.realpath(self._plan_file()) in writes:
            content = call.input.get("content") if call.name == "write_file" else None
            self.plan.candidate = content if isinstance(content, str) else ""

        grant = Grant(network=verdict.network, writes=tuple(writes))
        self.session.start_tool_call(call_id=call.id, tool=call.name,
                                     sandbox=tools.sandbox_profile(call.name, grant))
        self.app.save(self.session)  # durable before it runs: no end means interrupted
        self.running = grant

        root = os.path.realpath(self.config.workspace_root or self.session.workspace)

        def run() -> None:
            snapshot = None
            try:
                if store is not None and writes:
                    # Copy what the call is about to change, so `tether undo` can put it back.
                    snapshot = store.take(session_id, f"{generation}-{call.id}", writes, root)
                output = tools.execute(call.name, call.input, workspace, grant)
            except OSError as exc:
                output = ToolOutput(f"not run: could not snapshot the files it changes: {exc}",
                                    True)
            except Exception as exc:  # executors should not raise; never lose the turn
                output = ToolOutput(f"tool failed: {type(exc).__name__}: {exc}", True)
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell(ToolFinished(generation, call.id, call.name, output, snapshot))

        threading.Thread(target=contextvars.copy_context().run, args=(run,),
                         name=f"tool-{call.id}", daemon=True).start()

    def _refuse(self, call: ToolUseBlock, reason: str) -> None:
        self.session.refuse_tool_call(call_id=call.id, reason=reason)
        self.app.save(self.session)
        self.tool_queue.popleft()
        self._next_tool()

    def _on_tool_finished(self, message: ToolFinished) -> None:
        if self.phase != "executing" or not self.tool_queue:
            return
        self._active()
        if message.generation != self.generation:
            return
        if self.tool_queue[0].id != message.call_id:
            return
        self.running = None
        if message.snapshot is not None:
            self.session.record_snapshot(
                call_id=message.call_id,
                snapshot_id=message.snapshot.id,
                folder=message.snapshot.folder,
                paths=[e.path for e in message.snapshot.entries],
            )
        self.plan.finished(message.output.is_error)
        self.session.record_tool_result(
            call_id=message.call_id,
            tool=message.tool,
            output=self.redactor.text(message.output.content),
            is_error=message.output.is_error,
        )
        self.app.save(self.session)
        self.tool_queue.popleft()
        self.phase = "tools"
        self._next_tool()

    # --- endings ------------------------------------------------------------------------

    def _keep_reminders(self, later: list[Reminder]) -> None:
        """Hold reminders of non-aborting rules until the turn ends (each once)."""
        for reminder in later:
            if reminder not in self.reminders:
                self.reminders.append(reminder)

    def _add_reminders(self) -> None:
        """Reminders of rules that did not abort the stream join the history now."""
        for reminder in self.reminders:
            self.session.add_ttsr_reminder(rules=reminder.rules, reminder=reminder.text)
        self.reminders = []

    def _complete_turn(self, stop: str, take_queued: bool = True) -> None:
        self._add_reminders()
        self.session.complete_turn(
            rounds=self.rounds,
            usage=self.turn_usage,
            cost_usd=self._turn_cost(),
            stop=stop,
        )
        self._turn_ended("the turn is done", "completed")
        self.app.save(self.session)
        self._maybe_title()
        self._sync_tree()
        self._emit(GenerationDone, nodes=list(self.turn_nodes), stop=stop)
        self.gen = None
        if take_queued:
            self._idle()
        else:
            self.phase = "idle"
            self.tool_queue.clear()

    def _record_failure(self, error: str, finish: bool = False,
                        kind: ErrorKind = "failed") -> None:
        """The turn failed with ``error`` of ``kind``; ``finish``: so does the session."""
        self._cancel_interactions(error)
        self._cancel_stream()
        self._add_reminders()
        self.session.fail_turn(error=error, cost_usd=self._turn_cost(), kind=kind)
        self.turn_usage = Usage()
        if finish:
            self._set_status("failed", error)
        else:
            self._turn_ended(f"the turn failed: {error}", "failed")
        self.app.save(self.session)
        self._maybe_title()
        self._sync_tree()
        self._emit(GenerationError, kind=kind, message=error)
        self.gen = None
        self._idle()

    def _stop_turn(self, why: str) -> None:
        """Stop the running turn only: nothing more is asked of the model, no further tool
        runs, every call without a result gets one; the session stays."""
        self._refuse_pending(f"not run: {why}")
        self.tool_queue.clear()
        self.generation = -1  # what is still on its way (deltas, a tool's result) is dropped
        self._record_failure(why, kind="aborted")

    def _maybe_title(self) -> None:
        """Once the session has enough messages and no title, ask for one (background)."""
        if self.titling or not self.config.titles or not wants_title(
                exchange_messages(self.session.history), self.session.title):
            return
        self.titling = True
        request = title_request(self.session.history, model=self.config.model)
        provider, ref = self.provider, self.actor_ref
        self.bus.spawn(lambda: pump_title(provider, request, ref))

    def _on_title(self, done: TitleDone) -> None:
        self.titling = False
        title = clean_title(self.redactor.text(done.text))
        if done.error or not title:
            log.info("session %s: no title (%s)", self.session_id, done.error or "empty")
            return
        if not self.session.title:
            self.session.set_title(title=title, cost_usd=cost_usd(self.config.model,
                                                                    done.usage))
            self.app.save(self.session)

    def _turn_ended(self, why: str, single_turn_status: str) -> None:
        """A multi-turn session stays running and waits for input; a single-turn session
        is finished (unsaved)."""
        self.last_input = self.clock.now()
        self.safety_fired = False
        if self.session.multi_turn:
            self.session.signal_waiting(reason=why)
        else:
            self._set_status(single_turn_status, why)

    def _turn_cost(self) -> float:
        return cost_usd(self.config.model, self.turn_usage)

    # --- timers -------------------------------------------------------------------------

    def _active(self) -> None:
        self.last_activity = self.clock.now()

    def _on_model_failed(self, failed: ModelFailed) -> None:
        """A transient error is retried after a backoff (recorded); any other, or one
        retried too often, ends the turn with the error."""
        if not failed.transient or self.retries >= self.config.provider_retries:
            tried = f" (after {self.retries} retries)" if self.retries else ""
            self._record_failure(f"{failed.error}{tried}", kind="provider")
            return
        self.retries += 1
        delay = float(2 ** (self.retries - 1))
        # The backoff counts from the failure, read before the retry is recorded: whoever
        # sees the record and moves the clock cannot move the retry along with it.
        self.retry_at = self.clock.now() + dt.timedelta(seconds=delay)
        self._cancel_stream()
        self.session.record_provider_retry(attempt=self.retries, error=failed.error,
                                           delay=delay)
        self.app.save(self.session)
        self.phase = "retrying"

    def _on_tick(self) -> None:
        """The idle timeout kills a multi-turn session nobody talks to; the safety net
        says a turn waits when nothing has happened for a while (once a turn)."""
        now = self.clock.now()
        if self.phase == "retrying" and self.retry_at is not None and now >= self.retry_at:
            self.retry_at = None
            self._call_model()
            return
        idle_for = (now - self.last_input).total_seconds()
        quiet_for = (now - self.last_activity).total_seconds()
        if self.phase == "idle":
            limit = self.config.idle_timeout
            if (limit and self.session.status == "running" and self.session.multi_turn
                    and not self.session.queued and idle_for >= limit):
                self._kill(f"idle for {limit / 60:g} minutes")
        elif self.phase != "compacting" and self.config.safety_net and not (
                self.safety_fired) and quiet_for >= self.config.safety_net:
            self.safety_fired = True
            self.session.signal_waiting(
                reason=f"nothing has happened for {self.config.safety_net:g} s")
            self.app.save(self.session)

    def _idle(self) -> None:
        self.phase = "idle"
        self.tool_queue.clear()
        if self.session.queued and self.session.status not in FINISHED:
            self._start_queued()

    def _refuse_pending(self, reason: str, *, running: str = "") -> None:
        """Give every tool call of the last assistant message a result (unsaved): the
        one running is stopped and recorded as interrupted (``running`` saying why, else
        ``reason``), the others as refused."""
        for call in self.session.pending_tool_calls():
            if call.id == self.session.running_call:
                self._stop_running()
                self.session.interrupt_tool_call(call_id=call.id, tool=call.name,
                                                 reason=running or reason)
            else:
                self.session.refuse_tool_call(call_id=call.id, reason=reason)

    def _stop_running(self) -> None:
        """Kill the processes of the call running now, if any."""
        running, self.running = self.running, None
        if running is not None:
            running.cancel.set()

    def _cancel_interactions(self, reason: str) -> None:
        if self.phase in WAITING:
            self.send(self.subjects.interactions,
                      CancelInteractions(session_id=self.session_id, reason=reason))

    def _kill(self, reason: str) -> None:
        in_turn = self.phase != "idle"
        self._cancel_interactions(reason)
        self._cancel_stream()
        self.reminders = []
        self._refuse_pending("the session was killed before this call ran",
                             running="the session was killed while this call ran; its "
                                     "processes were stopped")
        self.tool_queue.clear()
        if in_turn:
            # The turn ends here: recorded (kind "killed", whose notice the kill's own
            # says), so it counts, what it spent counts, and a resumed session's next turn
            # is another turn, with a number of its own.
            self.session.fail_turn(error=f"killed: {reason}", cost_usd=self._turn_cost(),
                                   kind="killed")
            self.turn_usage = Usage()
        if self.session.status != "killed":
            self._set_status("killed", reason)
        self.app.save(self.session)
        self._sync_tree()
        if in_turn:
            self._emit(GenerationError, kind="aborted", message=f"killed: {reason}")
        self.gen = None
        self.phase = "idle"
        self.generation = -1

    def _cancel_stream(self) -> None:
        task, self.task = getattr(self, "task", None), None
        if task is not None:
            task.cancel()


class _PlanTracker:
    """What a turn in plan mode wrote to the plan file (seed: ``_ToolCallbackState``)."""

    def __init__(self) -> None:
        self.candidate: str | None = None
        """The content of the plan-file write now running ("" when a command writes it)."""
        self.written: str | None = None
        """The last content written to the plan file."""
        self.touched = False
        """A call that writes the plan file ran this turn."""
        self.streamed = ""
        """The model's latest text this turn."""
        self.exited = False
        """The plan was put to review this turn."""

    def finished(self, failed: bool) -> None:
        """The running call ended: a plan-file write that worked counts."""
        if self.candidate is not None and not failed:
            self.touched = True
            if self.candidate:
                self.written = self.candidate
        self.candidate = None


def _holds_tool_blocks(history: list[Turn]) -> bool:
    return any(isinstance(b, ToolUseBlock | ToolResultBlock) for t in history for b in t.content)


def _read_text(path: str) -> str | None:
    """The text of ``path``, or None when it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(PLAN_READ_LIMIT)
    except OSError:
        return None
