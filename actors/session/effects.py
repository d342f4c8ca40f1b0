"""What a decision asks the shell to do, and its outcome.

A decision (:func:`actors.session.decide`) changes no part of the world: it records events
on its aggregates and lists effects. The shell saves the aggregates once, then performs
the effects in order; the answer to an effect that reads or runs something comes back as
an input (:mod:`actors.session.inputs`).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

import msgspec

from tether.actors import core
from tether.actors.core import Reply, Send
from tether.actors.model.prompt import WorkspaceTexts
from tether.actors.ports import Grant, ModelRequest
from tether.events.messages import ToolUseBlock


class Ask(msgspec.Struct, frozen=True):
    """Request ``message`` on ``subject`` of this process's actor that takes it (the
    monitor, the gatekeeper, the coordinator: never the bus, where anyone may answer; none
    there fails the ask at once); the answer (or the timeout) comes back as an
    ``AskResult`` tagged ``tag``."""

    subject: str
    message: Any
    reply_type: type
    tag: str
    timeout: float


class CallModel(msgspec.Struct, frozen=True):
    """Stream ``request``; its events come back as ``ModelDelta``/``ModelFailed``."""

    request: ModelRequest
    generation: int


class Compact(msgspec.Struct, frozen=True):
    """Make the memory call, then the summary call; the answers come back as
    ``CompactionDone``."""

    memory: ModelRequest
    summary: ModelRequest
    generation: int


class AskTitle(msgspec.Struct, frozen=True):
    """Ask the model for the session's title in the background (``TitleDone``)."""

    request: ModelRequest


class CancelModel(msgspec.Struct, frozen=True):
    """Stop the model call (or compaction) running now, if any."""


class RunTool(msgspec.Struct, frozen=True):
    """Run an allowed call on a helper thread, after snapshotting ``grant.writes`` beneath
    ``root`` (``ToolFinished``); ``grant.cancel`` stops it."""

    call: ToolUseBlock
    grant: Grant
    workspace: str
    generation: int
    root: str
    plan_file: str = ""
    """In plan mode, the plan file: the shell says whether the grant writes it."""


class StopTool(msgspec.Struct, frozen=True):
    """Kill the processes of the call running now, if any."""


class Continue(msgspec.Struct, frozen=True):
    """Decide ``then`` once this decision is saved (``Continued``): after a fact the world
    already holds (a call ran, MEMORY.md was written, a person approved), so a failure
    further on cannot take its record with it."""

    then: Literal["next_tool", "execute", "call_model"]


class ReadWorkspace(msgspec.Struct, frozen=True):
    """Read the workspace's prompt files (``WorkspaceRead``)."""

    workspace: str


class ResolveDir(msgspec.Struct, frozen=True):
    """Find the folder ``/dir requested`` means, inside ``root`` (``DirResolved``)."""

    requested: str
    current: str
    root: str
    user: str
    channel: str


class ReadSkills(msgspec.Struct, frozen=True):
    """Read the bodies of the skills ``names`` (``SkillsRead``)."""

    call_id: str
    texts: WorkspaceTexts
    names: list[str]
    workspace: str


class ReadPlan(msgspec.Struct, frozen=True):
    """Read the plan file (``PlanRead``)."""

    path: str


class WriteMemory(msgspec.Struct, frozen=True):
    """Append ``facts`` to the workspace's MEMORY.md under ``today`` (``MemoryWritten``)."""

    workspace: str
    facts: list[str]
    today: dt.date


class RestoreFiles(msgspec.Struct, frozen=True):
    """``tether undo``: put back the files of the calls after ``to_version`` (all when
    None) beneath ``root``, record it, and answer the request."""

    to_version: int | None
    root: str


Effect = (Send | Reply | Ask | CallModel | Compact | AskTitle | CancelModel | RunTool
          | StopTool | Continue | ReadWorkspace | ResolveDir | ReadSkills | ReadPlan
          | WriteMemory | RestoreFiles)


Outcome = core.Outcome[Effect]
"""What one input decided (:class:`actors.core.Outcome`)."""
