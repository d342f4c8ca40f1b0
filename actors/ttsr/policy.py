"""When a TTSR rule may fire: the repeat policy, per-turn limits and the settings.

Pure: the monitor tells it which turn the stream belongs to and which rules were injected;
it answers which rules are eligible. Turns are counted as completed turns, so the gap of
``after-gap`` advances only when a turn completes, never with stream chunks or retries.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Literal

import msgspec

from tether.actors.ttsr.rules import Rule


class TtsrSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """TTSR settings (``[ttsr]`` in tether.toml). Per-rule values override the defaults."""

    enabled: bool = True
    """False turns matching off entirely: no rule is checked, nothing is injected."""
    context_mode: Literal["discard", "keep"] = "discard"
    repeat_mode: Literal["once", "after-gap"] = "once"
    repeat_gap: Annotated[int, msgspec.Meta(ge=1)] = 10
    window: Annotated[int, msgspec.Meta(ge=1)] = 256
    """How far back the fallback (``re``) engine looks, in characters."""


class Injection(msgspec.Struct, frozen=True):
    """A rule injected into a session at a turn (completed turns before it)."""

    rule: str
    turn: int


class InjectionPolicy:
    """Tracks injections and says which rules may fire now."""

    def __init__(self, settings: TtsrSettings, rules: list[Rule]) -> None:
        self.settings = settings
        self.rules = {r.name: r for r in rules}
        self.turn = 0
        self._last: dict[str, int] = {}
        self._this_turn: set[str] = set()

    def set_rules(self, rules: list[Rule]) -> None:
        """New rule definitions (after a reload); the injection history is kept."""
        self.rules = {r.name: r for r in rules}

    def restore(self, injections: Iterable[Injection]) -> None:
        """Take back recorded injections (after a restart, resume or fork)."""
        for item in injections:
            if item.turn >= self._last.get(item.rule, -1):
                self._last[item.rule] = item.turn
            if item.turn == self.turn:
                self._this_turn.add(item.rule)

    def start_turn(self, turn: int) -> None:
        """The stream now belongs to ``turn``; a retry within the same turn keeps the
        turn's injections (a rule fires at most once per turn)."""
        if turn != self.turn:
            self._this_turn.clear()
        self.turn = turn
        self._this_turn.update(r for r, t in self._last.items() if t == turn)

    def repeat_mode(self, rule: Rule) -> str:
        """The rule's repeat mode, or the default."""
        return rule.repeat_mode or self.settings.repeat_mode

    def repeat_gap(self, rule: Rule) -> int:
        """The rule's repeat gap, or the default."""
        return rule.repeat_gap or self.settings.repeat_gap

    def eligible(self, rule: Rule) -> bool:
        """Whether ``rule`` may fire in the current turn."""
        if not self.settings.enabled or rule.name in self._this_turn:
            return False
        last = self._last.get(rule.name)
        if last is None:
            return True
        if self.repeat_mode(rule) == "once":
            return False
        return self.turn - last >= self.repeat_gap(rule)

    def active(self) -> set[str]:
        """Names of the rules that may fire now."""
        return {name for name, rule in self.rules.items() if self.eligible(rule)}

    def record(self, names: Iterable[str]) -> None:
        """These rules were injected in the current turn."""
        for name in names:
            self._last[name] = self.turn
            self._this_turn.add(name)

    def context_mode(self, rules: Iterable[Rule]) -> Literal["discard", "keep"]:
        """How the interrupted partial reply is treated: kept only if every rule says keep."""
        modes = {rule.context_mode or self.settings.context_mode for rule in rules}
        return "keep" if modes == {"keep"} else "discard"
