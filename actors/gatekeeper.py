"""The gatekeeper actor: judges every proposed tool call and records the decision.

Bound to ``<ns>.gatekeeper`` in the queue group ``gatekeeper`` so several can share the
load. Each decision is stored as a :class:`events.decisions.ToolDecision` aggregate (one
per call, so gatekeepers never contend) before the Verdict is sent.
"""

from __future__ import annotations

from typing import Any

from actors.gatekeeper_policy import Policy, action_hash
from actors.runtime import ActorSystem, Envelope, TetherActor
from events.application import TetherApplication
from events.decisions import ToolDecision, decision_uuid
from events.messages import ToolProposal, Verdict


class GatekeeperActor(TetherActor):
    """Applies the policy to ToolProposals."""

    def __init__(self, system: ActorSystem, *, app: TetherApplication, policy: Policy) -> None:
        super().__init__(system)
        self.app = app
        self.policy = policy

    def handle(self, message: Any, envelope: Envelope | None) -> None:
        if not isinstance(message, ToolProposal):
            return
        digest = action_hash(message.tool, message.input)
        if digest != message.action_hash:
            decision, reason, tier = "deny", "the proposal's action hash does not match", "hash"
        else:
            judged = self.policy.decide(message.tool, message.input, message.workspace)
            decision, reason, tier = judged.decision, judged.reason, judged.tier
        existing = self.app.load(
            decision_uuid(message.session_id, message.call_id, digest), ToolDecision
        )
        if existing is None:
            # A re-sent proposal keeps its first decision (the audit record is immutable).
            self.app.save(
                ToolDecision(
                    call_id=message.call_id,
                    session_id=message.session_id,
                    tool=message.tool,
                    tool_input=message.input,
                    action_hash=digest,
                    decision=decision,
                    reason=reason,
                    tier=tier,
                )
            )
        else:
            decision, reason, tier = existing.decision, existing.reason, existing.tier
        self.reply(
            envelope,
            Verdict(
                call_id=message.call_id,
                decision="allow" if decision == "allow" else "deny",
                reason=reason,
                action_hash=digest,
                tier=tier,
            ),
        )
