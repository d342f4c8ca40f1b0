"""What a session's decisions read and change: the aggregates, the turn in progress as a
typed value, and the fixed things around them (configuration, tool catalogue, redactor).
"""

from __future__ import annotations

import datetime as dt
import enum
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from tether.actors.model.compaction import CompactionPlan
from tether.actors.model.prompt import WorkspaceTexts
from tether.actors.model.redact import Redactor, StreamRedactor
from tether.actors.ports import Grant, MessageDone, ModelRequest
from tether.actors.session.config import SessionConfig
from tether.events.messages import Generate, Reminder, ToolUseBlock, Usage, Verdict
from tether.events.sandbox import SandboxProfile
from tether.events.session import Session
from tether.events.subjects import Subjects


class Phase(enum.Enum):
    """Where the session's turn stands."""

    IDLE = "idle"
    """No turn runs: the session waits for a message."""
    PREPARING = "preparing"
    """The turn starts: the workspace's prompt files are being read."""
    COMPACTING = "compacting"
    """The history is being summarized before the next model call."""
    STREAMING = "streaming"
    """A model call streams."""
    RETRYING = "retrying"
    """A model call failed transiently; the next waits for its backoff."""
    BARRIER = "barrier"
    """The reply is complete; the rule monitor is asked whether it is clear."""
    TOOLS = "tools"
    """The reply's tool calls go to the gatekeeper one by one."""
    EXECUTING = "executing"
    """An allowed call runs."""
    READING_PLAN = "reading_plan"
    """The plan file is being read for a review."""
    APPROVAL = "approval"
    """The chat is asked to approve a call."""
    QUESTION = "question"
    """The chat is asked the model's question."""
    REVIEW = "review"
    """The chat reviews the plan."""


WAITING = (Phase.APPROVAL, Phase.QUESTION, Phase.REVIEW)
"""Phases in which the session waits for its chat (through the interaction coordinator)."""


class ToolCatalog(Protocol):
    """What a decision may ask of the tools: names, groups and profiles, never a run."""

    def definitions(self, groups: Iterable[str] | None = None) -> list[dict[str, Any]]: ...

    def groups(self) -> dict[str, str]: ...

    def group_of(self, tool: str) -> str | None: ...

    def sandbox_profile(self, name: str, grant: Grant) -> SandboxProfile | None: ...


@dataclass(frozen=True)
class Env:
    """What stays fixed for the session's life."""

    session_id: str
    config: SessionConfig
    subjects: Subjects
    redactor: Redactor
    tools: ToolCatalog
    snapshots: bool = False
    """The engine takes snapshots (``tether undo`` can work)."""


class PlanTracker:
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


@dataclass
class TurnState:
    """The turn in progress (and the clock readings the timers compare against)."""

    last_input: dt.datetime
    """When the session last heard from its user (the idle timeout counts from it)."""
    last_activity: dt.datetime
    """When anything last happened mid-turn (the safety net counts from it)."""
    phase: Phase = Phase.IDLE
    generation: int = 0
    """The session's version when the running model call (or tool) started; what comes
    back tagged with another is from an aborted call and dropped."""
    seq: int = 0
    """The stream's last published sequence number."""
    partial: str = ""
    """The text streamed so far by the running call."""
    done: MessageDone | None = None
    """The running call's complete message, once it came."""
    streams: dict[tuple[str, int], StreamRedactor] = field(default_factory=dict)
    tool_queue: deque[ToolUseBlock] = field(default_factory=deque)
    rounds: int = 0
    turn_usage: Usage = field(default_factory=Usage)
    unchecked_retries: int = 0
    reminders: list[Reminder] = field(default_factory=list)
    awaiting: Verdict | None = None
    """The verdict of the call waiting for approval, kept once a person approved it until
    its run is decided."""
    waiting_call: str = ""
    """The call (or plan review) the session waits on in a WAITING phase."""
    review_is_call: bool = False
    """The review being opened (or open) answers an ExitPlanMode call."""
    plan: PlanTracker = field(default_factory=PlanTracker)
    retries: int = 0
    retry_at: dt.datetime | None = None
    titling: bool = False
    gen: Generate | None = None
    """The Generate request the running turn answers (None: a user message's turn)."""
    completions_left: int = 0
    alternative: bool = False
    """The running model call is another completion of ``request``."""
    alt_parent: str = ""
    """The node the turn's completions answer."""
    request: ModelRequest | None = None
    gen_seq: int = 0
    gen_turn: int = 0
    """The turn the generation events belong to (turns ended before it, failed ones too,
    so two turns never share a number)."""
    turn_nodes: list[str] = field(default_factory=list)
    """The turn's final assistant nodes (seed 003: what ``done`` carries): the main
    completion's last message first, then each further completion's."""
    compaction: CompactionPlan | None = None
    summary: str | None = None
    """The compaction's summary, kept while MEMORY.md is written."""
    summary_cost: float = 0.0
    compaction_off: bool = False
    """No more compaction this turn: one failed, or one had to summarize the whole history
    (the turn alone fills the budget, so compacting again would only repeat)."""
    workspace_texts: WorkspaceTexts = field(default_factory=WorkspaceTexts)
    safety_fired: bool = False


@dataclass
class State:
    """Everything a decision reads and changes."""

    env: Env
    session: Session
    turn: TurnState

    @classmethod
    def of(cls, env: Env, session: Session, now: dt.datetime) -> State:
        """A session as loaded, between turns as far as this process knows (what its
        replay placed in the tree was published when it happened). A turn the store says
        was under way brings what its stored model replies used, so its failure counts
        their cost even when the process that made them died."""
        session.conversation.take_placed()
        return cls(env, session,
                   TurnState(last_input=now, last_activity=now, gen_turn=session.turns,
                             turn_usage=session.turn_usage))
