"""The pure security pipeline: enrich -> protection -> tier 0 -> tier 1.

How verdicts and minimum tiers compose (:func:`evaluate`):

1. **Protection** refuses (final ``deny``, ``deciding_stage="protection"``,
   ``deciding_tier=None``; the tiers do not run) or sets ``min_tier`` (0-3).
2. **Tier 0** (the policy): ``deny`` is final. ``escalate`` raises the needed tier to the
   rule's ``tier`` (the no-match default escalates to ``default_tier``, 1 by default).
   ``allow`` counts only when ``min_tier`` is 0; otherwise it is recorded but the action
   still needs ``min_tier``.
3. **Tier 1** (the heuristics) always runs unless tier 0 denied: a ``deny`` finding is final
   (it also overrides a tier-0 allow: danger beats convenience). An ``escalate`` finding
   raises the needed tier to at least 2, except over a tier-0 ``allow`` that counted (an
   explicit policy allow outweighs heuristic doubt, never a heuristic deny).
4. Otherwise, when the needed tier is at most 1, tier 1 ``allow`` decides. Above that the
   verdict is ``escalate`` with ``required_tier``: 2 when tier 2 is enabled and 2 is enough,
   else 3 (a human). "Needs at least tier N" is always honoured: an allow from a tier below
   N never decides, and tier 3 satisfies any N.

Deny is monotone: no later stage turns a deny into anything else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import msgspec

from tether.actors.gatekeeper.security.action import (
    ActionRequest,
    EnrichedAction,
    ReadOnlyTools,
    enrich,
)
from tether.actors.gatekeeper.security.heuristics import Finding, scan
from tether.actors.gatekeeper.security.policy import Policy, PolicyDecision, default_policy
from tether.actors.gatekeeper.security.protection import (
    ProtectionConfig,
    ProtectionResult,
    check_protection,
)

Stage = Literal["protection", "tier0", "tier1"]
FinalVerdict = Literal["allow", "deny", "escalate"]

__all__ = ["Evaluation", "PipelineConfig", "StageResult", "evaluate"]


@dataclass(frozen=True)
class PipelineConfig:
    """What the pipeline needs besides the request: protected files, the tier-0 policy,
    whether tier 2 (the LLM evaluator) is enabled, what ``~`` means (None: this
    process's home), and the name prefixes of tools the operator declared read-only
    (MCP servers with ``trust = "read"``; see :func:`~actors.gatekeeper.security.action.enrich`)."""

    protection: ProtectionConfig = field(default_factory=ProtectionConfig)
    policy: Policy = field(default_factory=default_policy)
    tier2_enabled: bool = False
    home: str | None = None
    read_only_tools: tuple[str | ReadOnlyTools, ...] = ()


class StageResult(msgspec.Struct, frozen=True):
    """One stage's outcome. ``verdict`` is ``deny``, ``allow``, ``escalate`` or ``pass``
    (protection let it through); ``min_tier`` is the tier this stage demands at least."""

    stage: Stage
    verdict: Literal["allow", "deny", "escalate", "pass"]
    reason: str
    min_tier: int = 0
    findings: tuple[Finding, ...] = ()
    rule: str | None = None


class Evaluation(msgspec.Struct, frozen=True):
    """The pipeline's answer for one request.

    ``verdict`` is final for ``allow``/``deny``; ``escalate`` means tier ``required_tier``
    (2: the LLM evaluator, 3: a human) must decide. ``deciding_stage``/``deciding_tier``
    name what fixed the verdict (protection has no tier: None). ``min_tier`` is what
    protection demanded; ``stages`` every stage that ran, in order.
    """

    request_id: str
    action_hash: str
    verdict: FinalVerdict
    reason: str
    deciding_stage: Stage
    deciding_tier: int | None
    min_tier: int
    required_tier: int | None
    stages: tuple[StageResult, ...]
    action: EnrichedAction


def evaluate(
    request: ActionRequest, workspace: str, config: PipelineConfig | None = None
) -> Evaluation:
    """Run enrich -> protection -> tier 0 -> tier 1 on ``request`` for ``workspace``.
    Pure apart from reading the file system; never raises (module docstring)."""
    cfg = config or PipelineConfig()
    action = enrich(request, workspace, cfg.home, cfg.read_only_tools)
    protection: ProtectionResult = check_protection(action, cfg.protection)
    stages: list[StageResult] = []

    def done(
        verdict: FinalVerdict,
        reason: str,
        stage: Stage,
        tier: int | None,
        required: int | None = None,
    ) -> Evaluation:
        return Evaluation(
            request_id=request.id,
            action_hash=action.hash,
            verdict=verdict,
            reason=reason,
            deciding_stage=stage,
            deciding_tier=tier,
            min_tier=protection.min_tier,
            required_tier=required,
            stages=tuple(stages),
            action=action,
        )

    if protection.refused:
        stages.append(StageResult("protection", "deny", protection.reason))
        return done("deny", protection.reason, "protection", None)
    stages.append(StageResult("protection", "pass", protection.reason, protection.min_tier))
    needed = protection.min_tier

    t0: PolicyDecision = cfg.policy.evaluate(action)
    stages.append(StageResult("tier0", t0.verdict, t0.reason, t0.tier, rule=t0.rule_name))
    if t0.verdict == "deny":
        return done("deny", t0.reason, "tier0", 0)
    allowed_at_0 = t0.verdict == "allow" and needed <= 0
    if t0.verdict == "escalate":
        needed = max(needed, t0.tier)

    findings = scan(action, cfg.home)
    denies = [f for f in findings if f.verdict == "deny"]
    escalations = [f for f in findings if f.verdict == "escalate"]
    if denies:
        reason = "; ".join(f.reason for f in denies)
        stages.append(StageResult("tier1", "deny", reason, findings=findings))
        return done("deny", reason, "tier1", 1)
    if escalations:
        reason = "; ".join(f.reason for f in escalations)
        stages.append(StageResult("tier1", "escalate", reason, 2, findings=findings))
        if allowed_at_0:
            return done("allow", t0.reason, "tier0", 0)
        needed = max(needed, 2)
    elif allowed_at_0:
        stages.append(StageResult("tier1", "allow", "no heuristic fired"))
        return done("allow", t0.reason, "tier0", 0)
    else:
        verdict: Literal["allow", "escalate"] = "allow" if needed <= 1 else "escalate"
        stages.append(StageResult("tier1", verdict, "no heuristic fired", needed))
        if needed <= 1:
            return done("allow", "tier 1 found nothing wrong", "tier1", 1)
    required = 2 if cfg.tier2_enabled and needed <= 2 else 3
    reasons = [s.reason for s in stages if s.min_tier >= 2]
    reason = "; ".join(dict.fromkeys(reasons)) or f"needs tier {required}"
    return done("escalate", reason, "tier1", 1, required)
