"""TTSR: stream rules that watch the model's output and interrupt it.

:mod:`.rules` reads rule files, :mod:`.match` finds triggers in a stream (hyperscan, or
``re``), :mod:`.policy` decides which firings count (repeat modes, the turn they are in),
:mod:`.whatif` replays a stored session against a rule set, and :mod:`.monitor` is the
per-session actor that puts them to work. All but the monitor are pure.
"""

from tether.actors.ttsr.match import Match, StreamMatcher
from tether.actors.ttsr.monitor import TtsrMonitorActor, fingerprint, rule_folders
from tether.actors.ttsr.policy import Injection, InjectionPolicy, TtsrSettings
from tether.actors.ttsr.rules import (
    Rule,
    RuleSet,
    Scope,
    load_rules,
    parse_rule_file,
    render_reminder,
    rules_from_sources,
)
from tether.actors.ttsr.whatif import WhatIfHit, what_if

__all__ = [
    "Injection", "InjectionPolicy", "Match", "Rule", "RuleSet", "Scope", "StreamMatcher",
    "TtsrMonitorActor", "TtsrSettings", "WhatIfHit", "fingerprint", "load_rules",
    "parse_rule_file", "render_reminder", "rule_folders", "rules_from_sources", "what_if",
]
