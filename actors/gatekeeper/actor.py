"""The gatekeeper actor: judges every proposed tool call and records the decision.

Bound to ``<ns>.gatekeeper`` in the queue group ``gatekeeper`` so several can share the
load. :func:`judge` is the pure decision: the action hash is checked, the configured deny
lists apply, then the security pipeline (enrichment, protection, tier-0 policy, tier-1
heuristics: :mod:`actors.gatekeeper.security`), then the session's mode (:mod:`actors.modes`: plan
mode refuses what is not planning, auto mode answers the policy's escalations of the tools
it auto-approves). Each decision is stored as a
:class:`events.decisions.ToolDecision` aggregate with every stage's result before the
Verdict is sent. A call that needs tier 2 is reviewed by a model when ``[tier2]`` is
enabled (:mod:`actors.gatekeeper.tier2`; the review runs on the bus loop and comes back as a
message); one that needs a person gets an ``escalate`` verdict and the session asks
through the interaction coordinator (tier 3). With tier 2 off, what would go to it asks a
person.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from typing import Any, Literal

import msgspec
import pykka
from eventsourcing.persistence import RecordConflictError

from tether.actors.gatekeeper.deny_lists import DenyLists, action_hash
from tether.actors.gatekeeper.security import ActionRequest, PipelineConfig, evaluate
from tether.actors.gatekeeper.tier2 import Tier2Budget, Tier2Settings, read_review, review_request
from tether.actors.model.pricing import cost_usd
from tether.actors.modes import auto_approvable, plan_mode_refusal
from tether.actors.ports import (
    Clock,
    Ids,
    ModelRequest,
    Provider,
    ProviderError,
    RandomIds,
    SystemClock,
    answer_of,
)
from tether.actors.runtime import ActorSystem, Envelope, TetherActor
from tether.events.application import TetherApplication
from tether.events.decisions import StageRecord, ToolDecision, decision_uuid
from tether.events.messages import ToolProposal, Usage, Verdict

APPROVERS = {2: "the LLM evaluator (tier 2)", 3: "a person (tier 3)"}


log = logging.getLogger(__name__)

PREDECIDED = ("this call was decided before, by a proposal from outside this engine "
              "process; not run")
"""The reason a session's call is denied when a decision of it is already recorded."""


class Judgement(msgspec.Struct, frozen=True):
    """A decision about one call: allow or deny, why, which stage decided, every stage,
    and the paths it writes or deletes (known before it runs)."""

    decision: str
    reason: str
    tier: str
    stages: list[StageRecord]
    writes: list[str] = []
    required_tier: int = 0
    network: bool = False
    """An allowed (or, once approved, escalated) call may reach the network."""


#: The tools that start processes (contained by the sandbox when there is one), and those
#: of them that run arbitrary commands (their sandbox has the workspace writable).
PROCESS_TOOLS = frozenset({"run_shell", "git_status", "git_diff"})
SHELL_TOOLS = frozenset({"run_shell"})


class Containment(msgspec.Struct, frozen=True):
    """Whether tool processes run in a sandbox: ``sandboxed``; ``off`` (the settings
    turned it off: every shell call needs a person); ``missing`` (none can be built here:
    process tools are refused, ``reason`` saying why)."""

    state: Literal["sandboxed", "off", "missing"] = "sandboxed"
    reason: str = ""


def _contain(judged: Judgement, tool: str, containment: Containment) -> Judgement:
    """``judged`` as it stands where tool processes are not sandboxed: a process tool is
    refused where no sandbox can be built; with the sandbox off, a shell call that would
    run needs a person (tier 3), never less."""
    if tool not in PROCESS_TOOLS or containment.state == "sandboxed" or (
            judged.decision == "deny"):
        return judged
    if containment.state == "missing":
        reason = (f"refused: {tool} runs only inside the sandbox, and there is none: "
                  f"{containment.reason}")
        stage = StageRecord("sandbox", "deny", reason)
        return msgspec.structs.replace(judged, decision="deny", reason=reason, tier="sandbox",
                                       stages=[*judged.stages, stage], required_tier=0)
    if tool not in SHELL_TOOLS:
        return judged  # the read-only git tools run plain, with hooks and filters off
    why = 'the sandbox is off (sandbox = "off"), so a person decides every shell command'
    reason = (f"{judged.reason}; {why}" if judged.decision == "escalate"
              else f"{why}; it needs approval by {APPROVERS[3]}")
    stage = StageRecord("sandbox", "escalate", why, 3)
    return msgspec.structs.replace(judged, decision="escalate", reason=reason,
                                   tier="escalation", stages=[*judged.stages, stage],
                                   required_tier=3)


def judge(
    proposal: ToolProposal, deny_lists: DenyLists, pipeline: PipelineConfig, now: dt.datetime,
    containment: Containment | None = None,
) -> Judgement:
    """Decide one proposal. Pure apart from reading the file system to resolve paths.

    Without a sandbox (``containment``), process tools are refused, or (sandbox off)
    shell calls need a person; see :func:`_contain`."""
    judged = _judge(proposal, deny_lists, pipeline, now)
    return _contain(judged, proposal.tool, containment or Containment())


def _judge(
    proposal: ToolProposal, deny_lists: DenyLists, pipeline: PipelineConfig, now: dt.datetime
) -> Judgement:
    digest = action_hash(proposal.tool, proposal.input)
    if digest != proposal.action_hash:
        reason = "the proposal's action hash does not match its input"
        return Judgement("deny", reason, "hash", [StageRecord("hash", "deny", reason)])
    configured = deny_lists.decide(proposal.tool, proposal.input, proposal.workspace)
    stages = [StageRecord("configured", configured.decision, configured.reason)]
    if configured.decision != "allow":
        return Judgement("deny", configured.reason, configured.tier, stages)
    evaluation = evaluate(
        ActionRequest(id=proposal.call_id, type=proposal.tool, payload=proposal.input,
                      time=now),
        proposal.workspace,
        pipeline,
    )
    stages.extend(
        StageRecord(s.stage, s.verdict, s.reason, s.min_tier, s.rule or "")
        for s in evaluation.stages
    )
    writes = list(dict.fromkeys(p.resolved for p in evaluation.action.writes if p.resolved))
    if proposal.mode == "plan" and evaluation.verdict != "deny":
        refusal = plan_mode_refusal(evaluation, proposal.plan_file)
        if refusal is not None:
            stages.append(StageRecord("mode", "deny", refusal))
            return Judgement("deny", refusal, "mode", stages, writes)
    if evaluation.verdict == "escalate" and proposal.auto_approve and auto_approvable(
        evaluation
    ):
        reason = f"auto-approved in {proposal.mode} mode ({evaluation.reason})"
        stages.append(StageRecord("mode", "allow", reason))
        return Judgement("allow", reason, "auto", stages, writes)
    if evaluation.verdict == "escalate":
        needed = evaluation.required_tier or 3
        reason = f"{evaluation.reason}; it needs approval by {APPROVERS.get(needed, needed)}"
        return Judgement("escalate", reason, "escalation", stages, writes, needed,
                         network="network" in evaluation.action.classes)
    return Judgement(evaluation.verdict, evaluation.reason, evaluation.deciding_stage, stages,
                     writes, network="network" in evaluation.action.classes)


class ReviewDone(msgspec.Struct):
    """A tier-2 review finished (``text``: the reviewer's answer) or failed (``error``)."""

    canary: str
    text: str = ""
    usage: Usage = msgspec.field(default_factory=Usage)
    error: str = ""


async def run_review(provider: Provider, request: ModelRequest, canary: str,
                     timeout: float, ref: pykka.ActorRef[Any]) -> None:
    """Ask the reviewer on the bus loop; the answer goes back to the gatekeeper."""
    try:
        async with asyncio.timeout(timeout):
            text, usage = await answer_of(provider, request)
        result = ReviewDone(canary, text, usage)
    except TimeoutError:
        result = ReviewDone(canary, error=f"the reviewer did not answer within {timeout:g} s")
    except ProviderError as exc:
        result = ReviewDone(canary, error=f"the reviewer could not be asked: {exc}")
    except Exception as exc:  # any failure must come back, or the call waits for nothing
        result = ReviewDone(canary, error=f"the review failed: {type(exc).__name__}: {exc}")
    with contextlib.suppress(pykka.ActorDeadError):
        ref.tell(result)


class _Waiting(msgspec.Struct):
    proposal: ToolProposal
    envelope: Envelope | None
    judged: Judgement


class GatekeeperActor(TetherActor):
    """Applies :func:`judge` to ToolProposals, asks tier 2 when enabled and needed, and
    records each decision."""

    def __init__(
        self,
        system: ActorSystem,
        *,
        app: TetherApplication,
        policy: DenyLists,
        pipeline: PipelineConfig | None = None,
        clock: Clock | None = None,
        provider: Provider | None = None,
        tier2: Tier2Settings | None = None,
        canaries: Ids | None = None,
        containment: Containment | None = None,
    ) -> None:
        super().__init__(system)
        self.app = app
        self.policy = policy
        self.pipeline = pipeline or PipelineConfig()
        self.clock = clock or SystemClock()
        self.provider = provider
        self.tier2 = tier2 or Tier2Settings()
        self.canaries = canaries or RandomIds()
        self.budget = Tier2Budget(self.tier2, self.clock.now())
        self.containment = containment or Containment()
        self.waiting: dict[str, _Waiting] = {}

    def handle(self, message: Any, envelope: Envelope | None) -> None:
        if isinstance(message, ReviewDone):
            self._reviewed(message)
            return
        if not isinstance(message, ToolProposal):
            return
        try:
            judged = judge(message, self.policy, self.pipeline, self.clock.now(),
                           self.containment)
        except Exception as exc:  # never let one proposal stop the judge of every session
            log.exception("gatekeeper: could not judge call %s of session %s",
                          message.call_id, message.session_id)
            judged = Judgement(decision="deny", tier="protection", stages=[], reason=(
                f"the gatekeeper could not judge this call ({type(exc).__name__}); not run"))
        if judged.decision == "escalate" and judged.required_tier == 2:
            first = self._first_decision(message, envelope, judged)
            if first is not None:  # decided before: not reviewed again
                self._reply(message, envelope, first)
                return
            self._review(message, envelope, judged)
        else:
            self._answer(message, envelope, judged)

    def _first_decision(self, message: ToolProposal, envelope: Envelope | None,
                        judged: Judgement) -> Judgement | None:
        """``judged`` as the call was first decided, if it was: a re-sent proposal keeps
        its first decision (the audit record is immutable). Except for a proposal of this
        process's sessions, which never propose a call twice: a decision already there
        was asked for by someone else, over the bus, perhaps with another mode or
        workspace, so the call is denied rather than given it."""
        existing = self.app.load(decision_uuid(
            message.session_id, message.call_id, action_hash(message.tool, message.input)),
            ToolDecision)
        if existing is None:
            return None
        if envelope is not None and envelope.from_here:
            log.warning("gatekeeper: call %s of session %s was decided before by a "
                        "proposal from the bus; denied", message.call_id, message.session_id)
            return msgspec.structs.replace(
                judged, decision="deny", tier="protection", reason=PREDECIDED)
        return msgspec.structs.replace(judged, decision=existing.decision,
                                       reason=existing.reason, tier=existing.tier)

    def _review(self, proposal: ToolProposal, envelope: Envelope | None,
                judged: Judgement) -> None:
        refusal = self.budget.refusal(self.clock.now())
        if refusal is not None or self.provider is None:
            self._fail(proposal, envelope, judged, refusal or "no reviewer is configured")
            return
        canary = f"canary-{self.canaries.new()}"
        self.waiting[canary] = _Waiting(proposal, envelope, judged)
        request = review_request(proposal.tool, proposal.input, judged.reason, canary,
                                 self.tier2)
        provider, timeout, ref = self.provider, self.tier2.timeout, self.actor_ref
        self.bus.spawn(lambda: run_review(provider, request, canary, timeout, ref))

    def _reviewed(self, done: ReviewDone) -> None:
        waiting = self.waiting.pop(done.canary, None)
        if waiting is None:
            return
        self.budget.spend(cost_usd(self.tier2.model, done.usage))
        review = read_review(done.text, done.canary) if not done.error else done.error
        if isinstance(review, str):
            self._fail(waiting.proposal, waiting.envelope, waiting.judged, review)
            return
        reason = f"tier 2: {review.reason}"
        stages = [*waiting.judged.stages, StageRecord("tier2", review.verdict, reason, 2)]
        self._answer(waiting.proposal, waiting.envelope, msgspec.structs.replace(
            waiting.judged, decision=review.verdict, reason=reason, tier="tier2",
            stages=stages))

    def _fail(self, proposal: ToolProposal, envelope: Envelope | None, judged: Judgement,
              problem: str) -> None:
        """The review could not be had: fail open or closed, as configured, and say so."""
        opened = self.tier2.on_failure == "open"
        decision = "allow" if opened else "deny"
        reason = f"{problem}; tier 2 failed {'open' if opened else 'closed'}"
        stages = [*judged.stages, StageRecord("tier2", decision, reason, 2)]
        self._answer(proposal, envelope, msgspec.structs.replace(
            judged, decision=decision, reason=reason, tier="tier2", stages=stages))

    def _answer(self, message: ToolProposal, envelope: Envelope | None, judged: Judgement
                ) -> None:
        """Record the decision, then give it; one decided before is given as it was
        (found by the save that it conflicts with: no read before each save)."""
        decided = ToolDecision(
            call_id=message.call_id,
            session_id=message.session_id,
            tool=message.tool,
            tool_input=message.input,
            action_hash=action_hash(message.tool, message.input),
            decision=judged.decision,
            reason=judged.reason,
            tier=judged.tier,
        )
        decided.record_stages(stages=judged.stages)
        try:
            self.app.save(decided)
        except RecordConflictError:
            first = self._first_decision(message, envelope, judged)
            if first is None:  # not a decision in the way: the store failed
                raise
            judged = first
        self._reply(message, envelope, judged)

    def _reply(self, message: ToolProposal, envelope: Envelope | None, judged: Judgement
               ) -> None:
        digest = action_hash(message.tool, message.input)
        decision, reason, tier = judged.decision, judged.reason, judged.tier
        self.reply(
            envelope,
            Verdict(
                call_id=message.call_id,
                decision="allow" if decision == "allow" else (
                    "escalate" if decision == "escalate" else "deny"),
                reason=reason,
                action_hash=digest,
                tier=tier,
                writes=judged.writes,
                required_tier=judged.required_tier if decision == "escalate" else 0,
                network=judged.network and decision in ("allow", "escalate"),
            ),
        )
