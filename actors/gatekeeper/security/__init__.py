"""The gatekeeper's security pipeline, pure core: enrich, protection, tier 0, tier 1.

Nothing in this package touches NATS, threads, clocks or the event store. The only I/O is
reading the file system to resolve paths (symlinks, hard links, directory listings for globs)
and :func:`actors.gatekeeper.security.policy.load_policy`, which reads one policy file.

Stages, in order (see :func:`actors.gatekeeper.security.pipeline.evaluate`):

1. :mod:`.action` turns a tool call into an :class:`ActionRequest`, hashes it
   and enriches it (paths resolved against the workspace, shell commands read the way bash
   reads them by :mod:`.shell`, classes, what cannot be read completely);
2. :mod:`.protection` applies the hard rules (identity files, memory files,
   agent configuration, workspace confinement, tier 3 for what cannot be read completely):
   refuse, or a minimum tier;
3. :mod:`.policy` is tier 0: ordered YAML rules, first match wins;
4. :mod:`.heuristics` is tier 1: dangerous commands and content.

Tiers 2 (LLM evaluator) and 3 (human approval) live elsewhere; an ``escalate`` evaluation
names the tier that must decide.
"""

from tether.actors.gatekeeper.security.action import (
    ActionRequest,
    EnrichedAction,
    PathRef,
    ShellCommand,
    action_hash,
    enrich,
)
from tether.actors.gatekeeper.security.heuristics import Finding, scan
from tether.actors.gatekeeper.security.pipeline import (
    Evaluation,
    PipelineConfig,
    StageResult,
    evaluate,
)
from tether.actors.gatekeeper.security.policy import (
    DEFAULT_POLICY_YAML,
    Policy,
    PolicyError,
    PolicyRule,
    default_policy,
    load_policy,
    parse_policy,
)
from tether.actors.gatekeeper.security.protection import (
    ProtectionConfig,
    ProtectionResult,
    check_protection,
)

__all__ = [
    "DEFAULT_POLICY_YAML",
    "ActionRequest",
    "EnrichedAction",
    "Evaluation",
    "Finding",
    "PathRef",
    "PipelineConfig",
    "Policy",
    "PolicyError",
    "PolicyRule",
    "ProtectionConfig",
    "ProtectionResult",
    "ShellCommand",
    "StageResult",
    "action_hash",
    "check_protection",
    "default_policy",
    "enrich",
    "evaluate",
    "load_policy",
    "parse_policy",
    "scan",
]
