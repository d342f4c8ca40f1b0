"""What the session reacts to besides its bus messages: in-process messages from the
model, tool and title pumps, the manager's ticks, and the answers to the shell's reads.

Every value here is plain data, so a decision can be replayed from it.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from tether.actors.model.prompt import WorkspaceTexts
from tether.actors.ports import ModelEvent, Snapshot, ToolOutput
from tether.events.forest import ForestState
from tether.events.messages import Usage


class SessionTick(msgspec.Struct):
    """Time passed (from the manager): check the idle timeout and the safety net."""


class ModelDelta(msgspec.Struct):
    """One event of the model call started at ``generation``."""

    generation: int
    event: ModelEvent


class ModelFailed(msgspec.Struct):
    """The model call started at ``generation`` failed; ``transient``: worth a retry."""

    generation: int
    error: str
    transient: bool = False


class TitleDone(msgspec.Struct):
    """The background title call ended: its answer, or why not."""

    text: str = ""
    usage: Usage = msgspec.field(default_factory=Usage)
    error: str = ""


class CompactionDone(msgspec.Struct):
    """The compaction's two model calls ended: the memory call's and the summary call's
    answers, what they used, or why they failed."""

    generation: int
    memory: str = ""
    summary: str = ""
    usage: Usage = msgspec.field(default_factory=Usage)
    error: str = ""


class ToolFinished(msgspec.Struct):
    """A call ran (or could not): its output and the snapshot taken before it."""

    generation: int
    call_id: str
    tool: str
    output: ToolOutput
    snapshot: Snapshot | None = None
    wrote_plan: bool = False
    """The call was allowed to write the plan file (plan mode)."""


class WorkspaceRead(msgspec.Struct):
    """The workspace's prompt files, read for the turn about to call the model."""

    texts: WorkspaceTexts


class DirResolved(msgspec.Struct):
    """The folder ``/dir requested`` names (None: not a folder inside the root), for the
    command ``user`` sent on ``channel``."""

    requested: str
    path: str | None
    user: str
    channel: str


class SkillsRead(msgspec.Struct):
    """The ``load_skills`` call's result: the skills' bodies, read now."""

    call_id: str
    body: str


class PlanRead(msgspec.Struct):
    """The plan file's text (None: it could not be read), for the review being opened."""

    text: str | None


class MemoryWritten(msgspec.Struct):
    """Facts appended to MEMORY.md (only the new ones), or why none could be."""

    path: str
    heading: str
    added: list[str] = []
    error: str = ""


class Continued(msgspec.Struct):
    """The decision that asked to ``Continue`` is saved: go on with ``then``."""

    then: Literal["next_tool", "execute", "call_model"]


class Restarting(msgspec.Struct):
    """The actor restarts (or starts): what it left running is to be let go."""


class Recovered(msgspec.Struct):
    """The state was loaded from the store: pick up a turn the restart cut short, or a
    message that waits. ``stored_tree``: the tree of a session stored before sessions
    kept their own (its Forest aggregate, empty when it had none), to import; None when
    the session keeps its tree."""

    stored_tree: ForestState | None = None
