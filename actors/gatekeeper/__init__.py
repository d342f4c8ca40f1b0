"""The tool gatekeeper: every tool call is judged before it runs.

:mod:`.deny_lists` holds the configured deny lists (stage 1) and the call's action hash;
:mod:`.security` is the pipeline after them (protection, the tier-0 policy file, the
tier-1 heuristics); :mod:`.tier2` asks a model to review what they escalate; :mod:`.actor`
puts the stages together (:func:`judge`, pure) and records each decision.
"""

from tether.actors.gatekeeper.actor import GatekeeperActor, Judgement, judge
from tether.actors.gatekeeper.deny_lists import BUILTIN_TOOLS, Decision, DenyLists, action_hash
from tether.actors.gatekeeper.tier2 import Tier2Settings

__all__ = ["BUILTIN_TOOLS", "Decision", "DenyLists", "GatekeeperActor", "Judgement",
           "Tier2Settings", "action_hash", "judge"]
