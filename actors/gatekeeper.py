"""The gatekeeper actor: judges every proposed tool call and records the decision.

Bound to ``<ns>.gatekeeper`` in the queue group ``gatekeeper`` so several can share the
load. :func:`judge` is the pure decision: the action hash is checked, the configured deny
lists apply, then the security pipeline (enrichment, protection, tier-0 policy, tier-1
heuristics: :mod:`actors.security`). Each decision is stored as a
:class:`events.decisions.ToolDecision` aggregate with every stage's result before the
Verdict is sent. A call that needs approval gets an ``escalate`` verdict naming the tier;
the session then asks a person through the interaction coordinator (tier 3). Tier 2 (an
LLM evaluator) is not built yet, so what would go to it goes to a person too.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgspec

from actors.gatekeeper_policy import Policy, action_hash
from actors.ports import Clock, SystemClock
from actors.runtime import ActorSystem, Envelope, TetherActor
from actors.security import ActionRequest, PipelineConfig, evaluate
from events.application import TetherApplication
from events.decisions import StageRecord, ToolDecision, decision_uuid
from events.messages import ToolProposal, Verdict

APPROVERS = {2: "the LLM evaluator (tier 2)", 3: "a person (tier 3)"}


class Judgement(msgspec.Struct, frozen=True):
    """A decision about one call: allow or deny, why, which stage decided, every stage,
    and the paths it writes or deletes (known before it runs)."""

    decision: str
    reason: str
    tier: str
    stages: list[StageRecord]
    writes: list[str] = []
    required_tier: int = 0


def judge(
    proposal: ToolProposal, deny_lists: Policy, pipeline: PipelineConfig, now: dt.datetime
) -> Judgement:
    """Decide one proposal. Pure apart from reading the file system to resolve paths."""
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
    writes = [p.resolved for p in evaluation.action.writes if p.resolved]
    if evaluation.verdict == "escalate":
        needed = evaluation.required_tier or 3
        reason = f"{evaluation.reason}; it needs approval by {APPROVERS.get(needed, needed)}"
        if needed == 2:
            reason += " (not built yet: a person is asked instead)"
        return Judgement("escalate", reason, "escalation", stages,
                         list(dict.fromkeys(writes)), 3)
    return Judgement(evaluation.verdict, evaluation.reason, evaluation.deciding_stage, stages,
                     list(dict.fromkeys(writes)))


class GatekeeperActor(TetherActor):
    """Applies :func:`judge` to ToolProposals and records each decision."""

    def __init__(
        self,
        system: ActorSystem,
        *,
        app: TetherApplication,
        policy: Policy,
        pipeline: PipelineConfig | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(system)
        self.app = app
        self.policy = policy
        self.pipeline = pipeline or PipelineConfig()
        self.clock = clock or SystemClock()

    def handle(self, message: Any, envelope: Envelope | None) -> None:
        if not isinstance(message, ToolProposal):
            return
        digest = action_hash(message.tool, message.input)
        existing = self.app.load(
            decision_uuid(message.session_id, message.call_id, digest), ToolDecision
        )
        judged = judge(message, self.policy, self.pipeline, self.clock.now())
        writes, required = judged.writes, judged.required_tier
        if existing is not None:
            # A re-sent proposal keeps its first decision (the audit record is immutable).
            decision, reason, tier = existing.decision, existing.reason, existing.tier
        else:
            decision, reason, tier = judged.decision, judged.reason, judged.tier
            record = ToolDecision(
                call_id=message.call_id,
                session_id=message.session_id,
                tool=message.tool,
                tool_input=message.input,
                action_hash=digest,
                decision=decision,
                reason=reason,
                tier=tier,
            )
            record.record_stages(stages=judged.stages)
            self.app.save(record)
        self.reply(
            envelope,
            Verdict(
                call_id=message.call_id,
                decision="allow" if decision == "allow" else (
                    "escalate" if decision == "escalate" else "deny"),
                reason=reason,
                action_hash=digest,
                tier=tier,
                writes=writes,
                required_tier=required if decision == "escalate" else 0,
            ),
        )
