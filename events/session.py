"""The Session aggregate: one agent conversation, rebuilt from its events.

Each command method records one event (eventsourcing's ``@event`` decorator turns the
method into an event class and its body into the event's apply). The state kept here is
what the session actor needs to resume after a restart: the conversation as the model saw
it, the current status and the running totals.
"""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from eventsourcing.domain import Aggregate, DomainEvent, event

from tether.events.conversation import Conversation, Turn, complete_messages
from tether.events.forest import Change, ForestError, ForestState
from tether.events.lifecycle import FINISHED, LEGACY_STATUSES
from tether.events.messages import ContentBlock, TextBlock, ToolResultBlock, ToolUseBlock, Usage
from tether.events.sandbox import SandboxProfile
from tether.events.snapshots import TypedSnapshot
from tether.events.stamping import stamped_trigger
from tether.events.tree_records import in_full, record_tree, tree_uuid

__all__ = ["KeptApart", "QueuedMessage", "Session", "SessionState", "TreeSnapshot", "Turn",
           "interrupted_result", "session_uuid", "tree_uuid"]


class QueuedMessage(msgspec.Struct):
    """A user message that arrived while a turn was running, waiting for its turn."""

    text: str
    channel: str
    user: str


class SessionState(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Every attribute of a :class:`Session`, typed: what its snapshots keep."""

    _created_on: dt.datetime
    _modified_on: dt.datetime
    session_id: str
    home_channel: str
    owner: str
    origin: str
    multi_turn: bool
    budget_usd: float
    in_turn: bool
    turn_usage: Usage
    waiting: bool
    budget_exhausted: bool
    forked_from: str
    title: str
    system_prompt: str
    loaded_groups: list[str]
    compactions: int
    name: str
    workspace: str
    model: str
    channel: str
    status: str
    history: list[Turn]
    turns: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    fired_rules: list[str]
    failures: int
    queued: list[QueuedMessage]
    completed_turns: int
    snapshots: list[tuple[str, str]]
    mode: str
    auto_approve: list[str]
    plan: str
    running_call: str
    call_ids: list[str] = msgspec.field(default_factory=list)
    """Every tool call id the session proposed (absent from older snapshots)."""
    keeps_tree: bool
    _tree: Conversation | None = None
    """The Conversation itself, in snapshots stored before the tree was kept apart, and
    in those of a session whose tree is in hand taken outside the application. A
    snapshot holds this or ``_tree_at``."""
    _tree_at: int | None = None
    """Not an attribute: the session version of the record this snapshot's tree is kept
    in (:class:`events.tree_records.TreeRecord`, or a :class:`TreeSnapshot` the release
    before wrote; read on first use). An older release, which needs
    ``_tree``, cannot decode such a snapshot, and reads the events instead."""
    _tree_pending: int


class KeptApart:
    """A session's tree not read yet: the tree record stored at session version ``at``.
    ``load`` reads it (the application sets it as it loads the session); a session
    rebuilt from a snapshot without an application has none, and cannot read its tree."""

    __slots__ = ("at", "load")

    def __init__(self, at: int, load: Callable[[int], Conversation] | None = None) -> None:
        self.at = at
        self.load = load

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KeptApart) and other.at == self.at

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"KeptApart(at={self.at})"


@dataclass(frozen=True)
class TreeSnapshot(DomainEvent):
    """A session's conversation tree as it stood at session version
    ``originator_version``, whole, as the release before tree records
    (:class:`events.tree_records.TreeRecord`) kept it apart from the session's own
    snapshots (in the same table, under :func:`tree_uuid`). Still read, no longer
    written. Like every snapshot it is a cache of the events."""

    state: Conversation


def interrupted_result(reason: str) -> str:
    """What the model is told of a call interrupted mid-run."""
    return (f"interrupted: {reason}. It started but its end was never recorded, so its "
            f"outcome is unknown: it may have done part of its work, or all of it. Check "
            f"the workspace before running it again.")


class Session(Aggregate):
    """One agent session. Its id is a UUID derived from the session's short id."""

    @staticmethod
    def create_id(session_id: str, **_: Any) -> uuid.UUID:
        return session_uuid(session_id)

    def trigger_event(self, event_class: Any, **kwargs: Any) -> None:
        stamped_trigger(self, event_class, **kwargs)  # a decision's time, if it gave one

    class Snapshot(TypedSnapshot):
        state: SessionState

        @classmethod
        def take(cls, aggregate: Any) -> Any:
            """The session's snapshot; a tree kept apart is pointed at, a tree in hand
            is kept inline (the application writes it apart first:
            :meth:`Session.tree_record`)."""
            snapshot = super().take(aggregate)
            tree = aggregate._tree
            if isinstance(tree, KeptApart):
                snapshot.state._tree, snapshot.state._tree_at = None, tree.at
            else:  # read whole, if it was read from a record (what is not read is not kept)
                snapshot.state._tree = in_full(tree)
            return snapshot

        def mutate(self, _: None) -> Aggregate:
            session = super().mutate(None)
            attributes = vars(session)
            at = attributes.pop("_tree_at")
            if at is not None:
                attributes["_tree"] = KeptApart(at)
            elif attributes["_tree"] is None:
                raise ValueError(f"the snapshot of session {self.originator_id} at "
                                 f"{self.originator_version} holds no tree")
            return session

    class Created(Aggregate.Created):
        """Declared explicitly so that fields added later have defaults: sessions stored
        before them were multi-turn, without a budget."""

        session_id: str
        name: str
        workspace: str
        model: str
        channel: str
        multi_turn: bool = True
        budget_usd: float = 0.0
        origin: str = ""
        owner: str = ""
        keeps_tree: bool = False

    @event(Created)
    def __init__(self, session_id: str, name: str, workspace: str, model: str, channel: str,
                 multi_turn: bool = True, budget_usd: float = 0.0, origin: str = "",
                 owner: str = "", keeps_tree: bool = True):
        self.session_id = session_id
        self.home_channel = channel
        """The channel the session was created on: the approvers named for it may decide
        for the session (its ``channel`` follows the latest message)."""
        self.owner = owner
        """The principal whose message started the session (a fork: its source's owner).
        With the approvers the settings name, the only one who may approve its calls, answer
        its questions, review its plans and change its mode. Sessions stored before owners
        were recorded belong to the user of their first message."""
        self.origin = origin
        """Where background notices go, when given explicitly (a route)."""
        self.multi_turn = multi_turn
        self.budget_usd = budget_usd
        """Dollars this session may spend (0: no limit)."""
        self.in_turn = False
        """A turn started and has not ended (completed, failed or killed) yet."""
        self.turn_usage = Usage(0, 0)
        """The tokens of the model calls of the turn not ended yet: its cost is counted in
        ``cost_usd`` only when it ends."""
        self.waiting = False
        """The session said it waits for input (and has had none since)."""
        self.budget_exhausted = False
        self.forked_from = ""
        self.title = ""
        self.system_prompt = ""
        """The system prompt of the latest model call (as assembled and recorded)."""
        self.loaded_groups: list[str] = []
        """Tool groups loaded so far (lazy tools)."""
        self.compactions = 0
        """Compactions of the history so far."""
        self.name = name
        self.workspace = workspace
        self.model = model
        self.channel = channel
        self.status = "starting"
        self.history: list[Turn] = []
        self.turns = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.cost_usd = 0.0
        self.fired_rules: list[str] = []
        self.failures = 0
        self.queued: list[QueuedMessage] = []
        self.completed_turns = 0
        self.snapshots: list[tuple[str, str]] = []
        self.mode = "default"
        self.auto_approve: list[str] = []
        self.plan = ""
        self.running_call = ""
        """The call that started and has not ended (ToolCallStarted without a result)."""
        self.call_ids: list[str] = []
        """The ids of every tool call proposed, on any branch: a model reusing one is
        refused (the audit keys calls by it)."""
        self.keeps_tree = keeps_tree
        """The conversation tree is derived here, from this session's events. Sessions
        stored before kept it in a Forest aggregate of their own until their actor
        imports it (:meth:`import_tree`)."""
        self._tree: Conversation | KeptApart = Conversation.of_session(session_id)
        """The history mirrored into a tree of messages, and the session's place on it
        (:attr:`conversation`): in hand, or kept apart (not read yet)."""
        self._tree_pending = -1
        """How many leading messages of the history the tree is to hold once mirrored (-1:
        it is up to date)."""

    class UserMessageQueued(Aggregate.Event):
        text: str
        channel: str
        user: str

    @event(UserMessageQueued)
    def queue_user_message(self, text: str, channel: str, user: str) -> None:
        if not self.owner:
            self.owner = user
        self.queued.append(QueuedMessage(text, channel, user))

    class UserMessageReceived(Aggregate.Event):
        text: str
        channel: str
        user: str

    @event(UserMessageReceived)
    def receive_user_message(self, text: str, channel: str, user: str) -> None:
        if not self.owner:
            self.owner = user
        # A queued message is taken up in order: receiving it removes it from the queue.
        if self.queued and self.queued[0] == QueuedMessage(text, channel, user):
            self.queued.pop(0)
        self.history.append(Turn("user", [TextBlock(text)]))
        self.channel = channel
        self.in_turn = True
        self.waiting = False

    class AssistantMessageAppended(Aggregate.Event):
        content: list[ContentBlock]
        stop_reason: str
        usage: Usage
        generation: int

    @event(AssistantMessageAppended)
    def append_assistant_message(
        self, content: list[ContentBlock], stop_reason: str, usage: Usage, generation: int
    ) -> None:
        self.history.append(Turn("assistant", list(content)))
        self._count_tokens(usage)
        self._mirror()

    def _mirror(self) -> None:
        """The history's complete messages are to be mirrored into the tree. Every event
        that adds to the history says so, but the user's message: it waits for the reply
        to it, since the root it hangs under is the system prompt it is sent with, which
        its turn settles only once it has started.

        The mirroring itself waits until the tree is next used (:attr:`conversation`), as
        far as the history went now: mirroring the added messages at once or all together
        later gives the same tree, node ids included, as long as everything else that
        changes the tree, the root's prompt or the history's earlier messages uses the
        tree first (it does: each reads :attr:`conversation` before its change, a result
        added to a message already complete too). A replay or a load that needs no tree
        then neither mirrors nor reads it; the application mirrors as it writes a tree
        record (:meth:`tree_record`), and gets the tree a replay gets."""
        self._tree_pending = complete_messages(self.history)

    def __eq__(self, other: object) -> bool:
        """The same state, the tree included (decoded and mirrored up to date first: one
        side may hold it as loaded, the other as used)."""
        if isinstance(other, Session):
            self.conversation  # noqa: B018
            other.conversation  # noqa: B018
        equal: bool = super().__eq__(other)
        return equal

    __hash__ = Aggregate.__hash__

    @property
    def conversation(self) -> Conversation:
        """The history mirrored into a tree of messages, and the session's place on it
        (read from its record when it was kept apart, and the messages added since
        mirrored, on first use)."""
        tree = self._tree
        if isinstance(tree, Conversation) and self._tree_pending < 0:
            return tree
        with _FIRST_USE:
            return self._read_and_mirror()

    def _read_and_mirror(self) -> Conversation:
        tree = self._tree
        if isinstance(tree, KeptApart):
            if tree.load is None:
                raise LookupError(f"session {self.session_id}: its tree is kept apart and "
                                  "nothing was given to read it (load the session through "
                                  "the application)")
            tree = tree.load(tree.at)
        limit = self._tree_pending
        try:
            if limit >= 0:
                # As far as the history went when it was due (the user's message that
                # came since waits for its reply).
                tree.sync(self.system_prompt, self.history, limit)
        finally:
            # Handed out (the unlocked way in :attr:`conversation`) only once mirrored:
            # another thread never gets a tree half mirrored. Never mirrored twice.
            self._tree, self._tree_pending = tree, -1
        return tree

    @property
    def tree_in_hand(self) -> bool:
        """Whether the tree was read (or never kept apart): using it reads nothing."""
        return isinstance(self._tree, Conversation)

    def read_tree_with(self, load: Callable[[int], Conversation]) -> None:
        """Give a tree kept apart the means to read it (its record, by version)."""
        if isinstance(self._tree, KeptApart):
            self._tree.load = load

    def tree_record(self, every: int) -> list[DomainEvent]:
        """The records keeping the tree apart with a snapshot of the session at its
        version (:func:`events.tree_records.record_tree`: its structure, and the blocks
        of the messages no earlier record kept), or none when the record it points at
        will do: it does while the tree was not used since, and is less than ``every``
        versions old (the messages added since are mirrored when it is read, so the
        record is renewed before that grows long). Points the session at the new
        record."""
        tree = self._tree
        if isinstance(tree, KeptApart) and self.version - tree.at < every:
            return []
        conversation = self.conversation
        records = record_tree(conversation, self.id, self.version)
        self._tree = KeptApart(self.version, lambda _: conversation)
        return records

    def _count_tokens(self, usage: Usage) -> None:
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.turn_usage = Usage(self.turn_usage.input_tokens + usage.input_tokens,
                                self.turn_usage.output_tokens + usage.output_tokens)

    class ToolCallProposed(Aggregate.Event):
        call_id: str
        tool: str
        tool_input: dict[str, Any]
        action_hash: str

    @event(ToolCallProposed)
    def propose_tool_call(
        self, call_id: str, tool: str, tool_input: dict[str, Any], action_hash: str
    ) -> None:
        self.call_ids.append(call_id)

    class ToolCallDecided(Aggregate.Event):
        call_id: str
        decision: str
        reason: str
        tier: str

    @event(ToolCallDecided)
    def decide_tool_call(self, call_id: str, decision: str, reason: str, tier: str) -> None:
        pass

    class ToolCallStarted(Aggregate.Event):
        call_id: str
        tool: str
        sandbox: SandboxProfile | None

    @event(ToolCallStarted)
    def start_tool_call(self, call_id: str, tool: str, sandbox: SandboxProfile | None) -> None:
        """An allowed call starts running, contained by ``sandbox`` (None: the tool starts
        no process). Saved before it runs: a start with no end was interrupted."""
        self.running_call = call_id

    class ToolCallExecuted(Aggregate.Event):
        call_id: str
        tool: str
        output: str
        is_error: bool

    @event(ToolCallExecuted)
    def record_tool_result(self, call_id: str, tool: str, output: str, is_error: bool) -> None:
        self._add_tool_result(ToolResultBlock(call_id, output, is_error))

    class ToolCallInterrupted(Aggregate.Event):
        call_id: str
        tool: str
        reason: str

    @event(ToolCallInterrupted)
    def interrupt_tool_call(self, call_id: str, tool: str, reason: str) -> None:
        """A call that started never reported its end (the engine died while it ran, or
        the session was killed): it may have done some of its work, or all of it."""
        self._add_tool_result(ToolResultBlock(call_id, interrupted_result(reason), True))

    class CommandRun(Aggregate.Event):
        name: str
        args: str
        user: str
        channel: str
        result: str

    @event(CommandRun)
    def run_command(self, name: str, args: str, user: str, channel: str, result: str) -> None:
        """A chat command was handled (it never reached the model)."""

    class ContextCleared(Aggregate.Event):
        pass

    @event(ContextCleared)
    def clear_context(self) -> None:
        """/clear: the next message starts a fresh context (the events keep the old one)."""
        conversation = self.conversation  # what was added before is mirrored first
        self.history = []
        conversation.rewritten()

    class WorkspaceChanged(Aggregate.Event):
        path: str

    @event(WorkspaceChanged)
    def change_workspace(self, path: str) -> None:
        """/dir: tools run in ``path`` from now on."""
        self.workspace = path

    class TitleSet(Aggregate.Event):
        title: str
        cost_usd: float

    @event(TitleSet)
    def set_title(self, title: str, cost_usd: float) -> None:
        """The session's title, generated in the background once it had enough messages
        (what that model call cost counts with the session)."""
        self.title = title
        self.cost_usd += cost_usd

    class ProviderRetried(Aggregate.Event):
        attempt: int
        error: str
        delay: float

    @event(ProviderRetried)
    def record_provider_retry(self, attempt: int, error: str, delay: float) -> None:
        """The model call failed with a transient ``error``; it is tried again after
        ``delay`` seconds (``attempt`` of this turn)."""

    class HistoryCompacted(Aggregate.Event):
        summary: str
        replaced: int
        tokens_before: int
        tokens_after: int
        budget: int
        cost_usd: float

    @event(HistoryCompacted)
    def compact_history(self, summary: str, replaced: int, tokens_before: int,
                        tokens_after: int, budget: int, cost_usd: float) -> None:
        """The first ``replaced`` messages of the history gave way to ``summary`` (the
        whole ``[Previous conversation summary: ...]`` text, a user message), because the
        history took 70% or more of the ``budget`` (estimated tokens before and after).
        The summary call and the memory call cost ``cost_usd``."""
        conversation = self.conversation  # what was added before is mirrored first
        self.history = [Turn("user", [TextBlock(summary)]), *self.history[replaced:]]
        self.cost_usd += cost_usd
        self.compactions += 1
        conversation.rewritten()
        self._mirror()

    class MemoryFlushed(Aggregate.Event):
        path: str
        facts: list[str]
        heading: str

    @event(MemoryFlushed)
    def flush_memory(self, path: str, facts: list[str], heading: str) -> None:
        """Before a compaction, durable ``facts`` from the part it summarizes were
        appended to the memory file ``path`` under ``heading`` (only when there were
        any)."""

    class CompactionFailed(Aggregate.Event):
        error: str
        cost_usd: float

    @event(CompactionFailed)
    def fail_compaction(self, error: str, cost_usd: float) -> None:
        """A compaction could not be made (``error``); the history stays whole and the
        turn goes on. What its calls cost still counts."""
        self.cost_usd += cost_usd

    class SystemPromptSet(Aggregate.Event):
        text: str

    @event(SystemPromptSet)
    def set_system_prompt(self, text: str) -> None:
        """Model calls from now on use ``text`` (assembled from the workspace; recorded
        when it changes, so a replay knows every context without the files)."""
        if self._tree_pending >= 0:
            self.conversation  # noqa: B018  (messages added before hang under the old root)
        self.system_prompt = text

    class ToolsLoaded(Aggregate.Event):
        groups: list[str]
        reason: str

    @event(ToolsLoaded)
    def load_tools(self, groups: list[str], reason: str) -> None:
        """These tool groups' definitions are sent from now on (asked for with
        ``load_tools``, or a tool of the group was used by name)."""
        for group in groups:
            if group not in self.loaded_groups:
                self.loaded_groups.append(group)

    class ModeChanged(Aggregate.Event):
        mode: str
        auto_approve: list[str]
        reason: str

    @event(ModeChanged)
    def change_mode(self, mode: str, auto_approve: list[str], reason: str) -> None:
        """The session works in ``mode`` from now on; ``auto_approve`` lists the tools
        whose escalations its mode answers (``auto`` only)."""
        self.mode = mode
        self.auto_approve = list(auto_approve)

    class PlanProposed(Aggregate.Event):
        plan: str
        source: str
        call_id: str
        plan_file: str

    @event(PlanProposed)
    def propose_plan(self, plan: str, source: str, call_id: str, plan_file: str) -> None:
        """The plan put to the chat for review, and where its text came from (the plan
        file, what was written to it, the streamed reply or a fallback line)."""
        self.plan = plan

    class PlanReviewed(Aggregate.Event):
        choice: str
        feedback: str
        by: str

    @event(PlanReviewed)
    def review_plan(self, choice: str, feedback: str, by: str) -> None:
        """The chat's answer: proceed, clean_proceed, adjust, or cancelled/expired."""

    class FilesSnapshotted(Aggregate.Event):
        call_id: str
        snapshot_id: str
        folder: str
        paths: list[str]

    @event(FilesSnapshotted)
    def record_snapshot(self, call_id: str, snapshot_id: str, folder: str,
                        paths: list[str]) -> None:
        """Copies of ``paths`` were taken before call ``call_id`` changed them."""
        self.snapshots.append((snapshot_id, folder))

    class FilesRestored(Aggregate.Event):
        snapshot_ids: list[str]
        to_version: int
        paths: list[str]

    @event(FilesRestored)
    def record_restore(self, snapshot_ids: list[str], to_version: int,
                       paths: list[str]) -> None:
        """``tether undo`` put ``paths`` back as they were (snapshots newest first)."""
        self.snapshots = [s for s in self.snapshots if s[0] not in snapshot_ids]

    class ToolCallRefused(Aggregate.Event):
        call_id: str
        reason: str

    @event(ToolCallRefused)
    def refuse_tool_call(self, call_id: str, reason: str) -> None:
        self._add_tool_result(ToolResultBlock(call_id, f"refused: {reason}", True))

    def _add_tool_result(self, block: ToolResultBlock) -> None:
        if block.tool_use_id == self.running_call:
            self.running_call = ""
        last = self.history[-1] if self.history else None
        if last is not None and last.role == "user" and all(
            isinstance(b, ToolResultBlock) for b in last.content
        ):
            if complete_messages(self.history) == len(self.history):
                # A result more for a message already complete (never so from the core):
                # it changes a message the tree may hold, so the tree is used first.
                self.conversation  # noqa: B018
            last.content.append(block)
        else:
            self.history.append(Turn("user", [block]))
        self._mirror()

    class TtsrInterrupted(Aggregate.Event):
        """Declared explicitly so the field added later has a default: events stored
        before ``context_mode`` existed still load (as "discard", what they did)."""

        rules: list[str]
        reminder: str
        generation: int
        partial_text: str
        source: str
        context_mode: str = "discard"

    @event(TtsrInterrupted)
    def record_ttsr_interruption(
        self,
        rules: list[str],
        reminder: str,
        generation: int,
        partial_text: str,
        source: str,
        context_mode: str = "discard",
    ) -> None:
        # "discard": the partial reply never enters the history; "keep": it stays, as an
        # assistant message, before the reminder.
        if context_mode == "keep" and partial_text.strip():
            self.history.append(Turn("assistant", [TextBlock(partial_text)]))
        self.history.append(Turn("user", [TextBlock(reminder)]))
        self._note_fired(rules)
        self._mirror()

    class TtsrReminderAdded(Aggregate.Event):
        rules: list[str]
        reminder: str

    @event(TtsrReminderAdded)
    def add_ttsr_reminder(self, rules: list[str], reminder: str) -> None:
        """A reminder for rules that did not abort the stream, added after the turn."""
        self.history.append(Turn("user", [TextBlock(reminder)]))
        self._note_fired(rules)
        self._mirror()

    def _note_fired(self, rules: list[str]) -> None:
        for name in rules:
            if name not in self.fired_rules:
                self.fired_rules.append(name)

    class StatusChanged(Aggregate.Event):
        status: str
        reason: str

    @event(StatusChanged)
    def change_status(self, status: str, reason: str) -> None:
        self.status = LEGACY_STATUSES.get(status, status)
        if self.status in FINISHED:
            self.in_turn = False
        if status == "killed":
            self.queued.clear()  # a kill drops what was waiting (the events keep it)

    class WaitingForInput(Aggregate.Event):
        reason: str

    @event(WaitingForInput)
    def signal_waiting(self, reason: str) -> None:
        """The session waits for the user: its turn ended, or nothing has happened for a
        while (the safety net)."""
        self.waiting = True

    class BudgetExhausted(Aggregate.Event):
        cost_usd: float
        budget_usd: float

    @event(BudgetExhausted)
    def exhaust_budget(self, cost_usd: float, budget_usd: float) -> None:
        """The session spent more than its budget; it fails."""
        self.budget_exhausted = True

    class Forked(Aggregate.Event):
        source_id: str
        at_version: int
        history: list[Turn]
        fired_rules: list[str]

    @event(Forked)
    def fork_from(self, source_id: str, at_version: int, history: list[Turn],
                  fired_rules: list[str]) -> None:
        """This session starts as a copy of ``source_id`` up to event ``at_version``."""
        conversation = self.conversation
        self.forked_from = source_id
        self.history = [t.copy() for t in history]
        self.fired_rules = list(fired_rules)
        conversation.rewritten()

    class GenerationStarted(Aggregate.Event):
        n: int
        tools: bool
        max_tool_iterations: int
        user: str

    @event(GenerationStarted)
    def start_generation(self, n: int, tools: bool, max_tool_iterations: int,
                         user: str) -> None:
        """A turn starts with no new user message: the model answers the history as it
        stands (``tether generate``), ``n`` completions, tools on or off."""
        self.in_turn = True
        self.waiting = False

    class AlternativeGenerated(Aggregate.Event):
        content: list[ContentBlock]
        stop_reason: str
        usage: Usage
        node_id: str
        parent_id: str = ""

    @event(AlternativeGenerated)
    def add_alternative(self, content: list[ContentBlock], stop_reason: str, usage: Usage,
                        node_id: str, parent_id: str = "") -> None:
        """Another completion of the same request, kept as its own branch of the tree
        (``node_id``, under ``parent_id``, the message the request answered) and not in
        the history; its tokens count. Stored before sessions kept their tree, the event
        has no parent: the branch is in the session's Forest."""
        self._count_tokens(usage)
        if parent_id:
            self.conversation.append(parent_id, "assistant", content)

    class AlternativeDropped(Aggregate.Event):
        rules: list[str]

    @event(AlternativeDropped)
    def drop_alternative(self, rules: list[str]) -> None:
        """Another completion broke ``rules`` while it streamed and was dropped (never in
        the tree or the history). Recorded so the next completion is a generation of its
        own: nothing of the dropped stream can be taken for it."""

    class StreamUnchecked(Aggregate.Event):
        attempt: int

    @event(StreamUnchecked)
    def record_unchecked_stream(self, attempt: int) -> None:
        """The rule monitor did not see the whole stream of a reply (it restarted, or a
        delta was lost), so the reply was neither stored nor run, and the model is asked
        again (``attempt``, from 1) as a generation of its own."""

    class MovedTo(Aggregate.Event):
        node_id: str
        history: list[Turn]
        reason: str

    @event(MovedTo)
    def move_to(self, node_id: str, history: list[Turn], reason: str) -> None:
        """The session now stands at ``node_id`` of its tree (``tether branch`` or
        ``edit``): its history is the path to it, recorded whole so a replay needs no tree."""
        conversation = self.conversation  # what was added before is mirrored first
        self.history = [t.copy() for t in history]
        if not self.keeps_tree:
            # Its tree is replaced when it is imported; until then it mirrors the history.
            conversation.rewritten()
            self._mirror()
            return
        try:
            conversation.stand_at(node_id, self.system_prompt, self.history)
        except (ForestError, ValueError):
            # Not a node of this tree (never so when recorded by the session's core):
            # the history is what counts, mirrored as it is.
            conversation.rewritten()
            self._mirror()

    class TreeAltered(Aggregate.Event):
        operation: str
        node_id: str
        result_id: str
        changes: list[Change]

    @event(TreeAltered)
    def alter_tree(self, operation: str, node_id: str, result_id: str,
                    changes: list[Change]) -> None:
        """The user changed the tree: ``operation`` (edit, split, delete, bookmark or
        unbookmark) of ``node_id`` made ``changes`` and ended at ``result_id``. The
        changes are recorded, not the rules that made them, so a later change of the
        rules cannot change a stored tree."""
        self.conversation.apply(changes)

    class TreeImported(Aggregate.Event):
        tree: ForestState

    @event(TreeImported)
    def import_tree(self, tree: ForestState) -> None:
        """The tree a session stored before sessions kept their own (in its Forest
        aggregate, read once by its actor) is now the session's, whole: every edit made
        in it stays."""
        self.keeps_tree = True
        self._tree = Conversation(tree=msgspec.convert(msgspec.to_builtins(tree), ForestState))
        self._mirror()

    class TurnCompleted(Aggregate.Event):
        rounds: int
        usage: Usage
        cost_usd: float
        stop: str

    @event(TurnCompleted)
    def complete_turn(self, rounds: int, usage: Usage, cost_usd: float, stop: str) -> None:
        self.turns += 1
        self.completed_turns += 1
        self.cost_usd += cost_usd
        self.in_turn = False
        self.turn_usage = Usage(0, 0)
        self._mirror()  # what the turn said, answered or not

    class TurnFailed(Aggregate.Event):
        """Declared explicitly so that ``cost_usd`` and ``kind``, added later, have
        defaults."""

        error: str
        cost_usd: float = 0.0
        kind: str = "failed"

    @event(TurnFailed)
    def fail_turn(self, error: str, cost_usd: float = 0.0, kind: str = "failed") -> None:
        """The turn ended with ``error`` of ``kind`` (aborted, tool_iteration_limit,
        provider, budget, failed, or killed: the session was killed mid-turn); what it
        spent until then still counts."""
        self.turns += 1
        self.cost_usd += cost_usd
        self.in_turn = False
        self.turn_usage = Usage(0, 0)
        self._mirror()  # what the turn said, answered or not

    class ActorFailed(Aggregate.Event):
        error: str

    @event(ActorFailed)
    def record_actor_failure(self, error: str) -> None:
        self.failures += 1

    # --- queries -----------------------------------------------------------------------

    def pending_tool_calls(self) -> list[ToolUseBlock]:
        """tool_use blocks of the last assistant message that have no result yet."""
        for index in range(len(self.history) - 1, -1, -1):
            turn = self.history[index]
            if turn.role == "assistant":
                answered = {
                    b.tool_use_id
                    for later in self.history[index + 1 :]
                    for b in later.content
                    if isinstance(b, ToolResultBlock)
                }
                return [
                    b for b in turn.content if isinstance(b, ToolUseBlock) and b.id not in answered
                ]
        return []


_FIRST_USE = threading.RLock()
"""Reading a tree and mirroring what waits is done by one thread at a time: two threads
using one loaded session at once would otherwise each put in a tree of their own."""

SESSION_NAMESPACE = uuid.UUID("6f1c5a52-8d5e-4a57-9a43-0d2b7d1f6e11")


def session_uuid(session_id: str) -> uuid.UUID:
    """The aggregate id of the session with short id ``session_id`` (stable, derived)."""
    return uuid.uuid5(SESSION_NAMESPACE, f"session:{session_id}")
