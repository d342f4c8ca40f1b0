"""A session's pure core driven by hand: inputs in, events and effects out.

No actor, thread, socket, store or model server: :class:`Core` holds a session's state
and feeds :func:`actors.session.decide`; it answers the core's reads with plain values
the test gives (an empty workspace unless told otherwise), as the actor shell would.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from tether.actors.gatekeeper.deny_lists import action_hash
from tether.actors.model.prompt import WorkspaceTexts
from tether.actors.model.redact import Redactor
from tether.actors.ports import MessageDone, TextDelta, ToolUseStart
from tether.actors.runtime import AskResult
from tether.actors.session import Env, Outcome, Phase, SessionConfig, State, decide
from tether.actors.session.effects import (
    Ask,
    CallModel,
    Continue,
    Effect,
    ReadPlan,
    ReadWorkspace,
    Reply,
    RunTool,
    Send,
)
from tether.actors.session.inputs import Continued, ModelDelta, PlanRead, WorkspaceRead
from tether.adapters.tools import BuiltinTools
from tether.events.messages import (
    BarrierResult,
    Branched,
    BranchTo,
    ContentBlock,
    TextBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
    Verdict,
)
from tether.events.session import Session
from tether.events.stamping import stamped
from tether.events.subjects import Subjects

SID = "s1"
OWNER = "alice"
NOW = dt.datetime(2026, 11, 28, 12, 0, tzinfo=dt.UTC)
USAGE = Usage(input_tokens=100, output_tokens=20)


@dataclass
class Fed:
    """What one input (and the reads it caused) decided."""

    events: list[Any] = field(default_factory=list)
    effects: list[Effect] = field(default_factory=list)

    def names(self) -> list[str]:
        return [type(e).__name__ for e in self.events]

    def recorded(self, kind: type) -> list[Any]:
        """The events of one class (``Session.TurnFailed``...), in order."""
        return [e for e in self.events if isinstance(e, kind)]

    def of(self, kind: type) -> list[Any]:
        """The effects of one kind, in order."""
        return [e for e in self.effects if isinstance(e, kind)]

    def sent(self, kind: type) -> list[Any]:
        """The messages of one kind the decision sends (or replies, or asks)."""
        return [e.message for e in self.effects
                if isinstance(e, Send | Reply | Ask) and isinstance(e.message, kind)]


class Core:
    """One session's core, its clock moved by hand."""

    def __init__(self, config: SessionConfig | None = None, *, multi_turn: bool = True,
                 budget_usd: float = 0.0, workspace: str = "/work/ws",
                 texts: WorkspaceTexts | None = None, keeps_tree: bool = True) -> None:
        self.now = NOW
        self.texts = texts or WorkspaceTexts()
        self.plan_text: str | None = None
        with stamped(self.now):
            session = Session(session_id=SID, name="demo", workspace=workspace, model="m",
                              channel="term", multi_turn=multi_turn, budget_usd=budget_usd,
                              owner=OWNER, keeps_tree=keeps_tree)
        self.created = session.collect_events()
        """The session's first event, as the manager's actor records it."""
        env = Env(session_id=SID, config=config or SessionConfig(model="claude-sonnet-4-5"),
                  subjects=Subjects(), redactor=Redactor(), tools=BuiltinTools(),
                  snapshots=True)
        self.state = State.of(env, session, self.now)
        self.log: list[Any] = []
        """Every event recorded so far."""

    @property
    def session(self) -> Session:
        return self.state.session

    @property
    def phase(self) -> Phase:
        return self.state.turn.phase

    @property
    def generation(self) -> int:
        return self.state.turn.generation

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)

    def feed(self, message: Any) -> Fed:
        """Decide ``message``, then the answers to the reads it asked for."""
        fed, inputs = Fed(), [message]
        while inputs:
            outcome = decide(self.state, inputs.pop(0), self.now)
            self._save(outcome, fed)
            for effect in outcome.effects:
                answer = self._answer(effect)
                if answer is not None:
                    inputs.append(answer)
        return fed

    def _save(self, outcome: Outcome, fed: Fed) -> None:
        events = outcome.events
        for aggregate in outcome.aggregates:
            aggregate.collect_events()
        fed.events += events
        fed.effects += outcome.effects
        self.log += events

    def _answer(self, effect: Effect) -> Any:
        if isinstance(effect, ReadWorkspace):
            return WorkspaceRead(self.texts)
        if isinstance(effect, ReadPlan):
            return PlanRead(self.plan_text)
        if isinstance(effect, Continue):
            return Continued(effect.then)
        return None

    # --- the user and the model ---------------------------------------------------------

    def say(self, text: str, user: str = OWNER) -> Fed:
        return self.feed(UserMessage(text=text, channel="term", session_id=SID, user=user))

    def stream(self, content: list[ContentBlock], stop: str = "end_turn",
               usage: Usage = USAGE) -> Fed:
        """The running model call streams ``content`` and completes."""
        fed = Fed()
        for index, block in enumerate(content):
            if isinstance(block, TextBlock):
                self._merge(fed, self.feed(ModelDelta(self.generation,
                                                      TextDelta(index, block.text))))
            elif isinstance(block, ToolUseBlock):
                self._merge(fed, self.feed(ModelDelta(
                    self.generation, ToolUseStart(index, block.id, block.name))))
        self._merge(fed, self.feed(ModelDelta(self.generation,
                                              MessageDone(content, stop, usage))))
        return fed

    def barrier(self, **answer: Any) -> Fed:
        """The rule monitor answers the barrier (clear unless told otherwise)."""
        result = BarrierResult(generation=self.generation, **({"clear": True} | answer))
        return self.feed(AskResult(f"barrier:{self.generation}", result))

    def answer(self, text: str, usage: Usage = USAGE) -> Fed:
        """The model replies ``text`` and the monitor clears it."""
        fed = self.stream([TextBlock(text)], usage=usage)
        self._merge(fed, self.barrier())
        return fed

    def call_tools(self, *calls: ToolUseBlock) -> Fed:
        """The model asks for ``calls`` and the monitor clears the reply."""
        fed = self.stream(list(calls), stop="tool_use")
        self._merge(fed, self.barrier())
        return fed

    def verdict(self, call: ToolUseBlock, decision: str = "allow", **fields: Any) -> Fed:
        """The gatekeeper's verdict on ``call``."""
        verdict = Verdict(call_id=call.id, decision=decision,  # type: ignore[arg-type]
                          reason=fields.pop("reason", f"{decision} by policy"),
                          action_hash=action_hash(call.name, call.input), **fields)
        return self.feed(AskResult(f"verdict:{call.id}", verdict))

    @staticmethod
    def _merge(into: Fed, fed: Fed) -> None:
        into.events += fed.events
        into.effects += fed.effects


def eager(**config: object) -> Core:
    """A core whose tools are all loaded from the start (no load_tools round)."""
    return Core(SessionConfig(**{"model": "m", "lazy_tools": False, **config}))  # type: ignore[arg-type]


def approved_run(core: Core, call: ToolUseBlock) -> None:
    """A turn whose model asked for ``call``, which the gatekeeper allowed: it runs."""
    core.say("go")
    core.call_tools(call)
    core.verdict(call)


def read_call(call_id: str = "c1", path: str = "notes.md") -> ToolUseBlock:
    return ToolUseBlock(id=call_id, name="read_file", input={"path": path})


def calls_model(fed: Fed) -> bool:
    return bool(fed.of(CallModel))


def runs(fed: Fed) -> list[RunTool]:
    return fed.of(RunTool)


def branch_back(core: Core, messages: int = 1) -> None:
    """Move the session ``messages`` messages up its path, as ``tether branch`` does."""
    conversation = core.session.conversation
    node = conversation.tree.path(conversation.cursor)[-1 - messages].id
    fed = core.feed(BranchTo(session_id=SID, node_id=node, user=OWNER))
    assert fed.sent(Branched), fed.effects


def generation_events(*feds: Fed) -> list[Any]:
    """The generation events the decisions published, in order."""
    from tether.events.messages import GenerationEvent

    return [m for fed in feds for m in fed.sent(GenerationEvent)]
