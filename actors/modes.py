"""Session modes as the gatekeeper applies them. Pure.

``default``: the pipeline's verdict stands. ``plan``: the session explores and writes one
plan file; anything else that changes the world is refused, and a command runs only when
a tier-0 rule allows it by name (an inspection command). ``auto``: an escalation of a tool
the session auto-approves is allowed, but only when the escalation came from the policy
alone: a minimum tier set by protection, or a tier-1 heuristic's doubt, still goes to the
tier that must decide.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only a type here; importing it would start the gatekeeper's package,
    # whose actor imports this module: a cycle when this module is imported first
    from tether.actors.gatekeeper.security.pipeline import Evaluation

PLAN_DIR = os.path.join(".tether", "plans")
"""Where plan files live, relative to the session's workspace."""


def plan_file_for(workspace: str, session_id: str) -> str:
    """The plan file of session ``session_id`` (absolute)."""
    return os.path.join(workspace, PLAN_DIR, f"{session_id}.md")


def plan_mode_refusal(evaluation: Evaluation, plan_file: str) -> str | None:
    """Why plan mode refuses the evaluated action, or None when it may go ahead."""
    action = evaluation.action
    target = os.path.realpath(plan_file) if plan_file else ""
    others = [p.original for p in action.writes if p.resolved != target or p.access != "write"]
    if others or "delete" in action.classes:
        return (f"plan mode: only the plan file {plan_file} may be written "
                f"(not {', '.join(others) or 'a delete'}); propose the plan with ExitPlanMode")
    if "network" in action.classes:
        return "plan mode: nothing goes to the network while planning"
    if "execute" in action.classes and not (
        evaluation.verdict == "allow" and evaluation.deciding_stage == "tier0"
    ):
        return ("plan mode: only inspection commands the policy allows by name run while "
                "planning")
    if "write" in action.classes and not action.writes:
        return "plan mode: this call writes somewhere that could not be worked out"
    return None


def auto_approvable(evaluation: Evaluation) -> bool:
    """Whether an escalation may be answered by the session's auto-approval: only when
    the policy asked for it, never protection's minimum tier or a heuristic's doubt."""
    if evaluation.verdict != "escalate" or evaluation.min_tier > 0:
        return False
    return not any(s.stage == "tier1" and s.verdict == "escalate" and s.findings
                   for s in evaluation.stages)
