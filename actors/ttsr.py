"""The TTSR monitor actor: one per session, watching the session's stream for rules.

It follows ``<ns>.session.<id>.stream``. On a match it records ``TtsrTriggered`` on the
session's :class:`events.ttsr.RuleLog` and tells the session to interrupt. It also answers
the session's barrier requests on ``<ns>.ttsr.<id>``: once every delta up to the asked
sequence number has been checked, it says whether the generation is clear. A barrier that
arrives before the deltas it covers waits for them.
"""

from __future__ import annotations

import logging
from typing import Any

from actors.runtime import ActorSystem, Envelope, TetherActor
from actors.ttsr_rules import Match, Rule, StreamMatcher, render_reminder
from events.application import TetherApplication
from events.messages import BarrierCheck, BarrierResult, Interrupt, StreamDelta
from events.ttsr import RuleLog

log = logging.getLogger(__name__)


class TtsrMonitorActor(TetherActor):
    """Stream rules for one session."""

    def __init__(
        self,
        system: ActorSystem,
        *,
        session_id: str,
        app: TetherApplication,
        rules: list[Rule],
    ) -> None:
        super().__init__(system)
        self.session_id = session_id
        self.app = app
        self.rules = rules
        self.matcher = StreamMatcher(rules)
        self.generation = -1
        self.last_seq = 0
        self.violation: BarrierResult | None = None
        self.tool_names: dict[int, str] = {}
        self.parked: list[tuple[Envelope, BarrierCheck]] = []

    def recover(self) -> None:
        self.matcher = StreamMatcher(self.rules)
        rule_log = self.app.rule_log(self.session_id)
        if rule_log is not None:
            self.matcher.mark_fired(rule_log.fired)
        self.generation = -1
        self.last_seq = 0
        self.violation = None

    def handle(self, message: Any, envelope: Envelope | None) -> None:
        if isinstance(message, StreamDelta):
            self._on_delta(message)
        elif isinstance(message, BarrierCheck) and envelope is not None:
            self.parked.append((envelope, message))
        self._answer_barriers()

    def _on_delta(self, delta: StreamDelta) -> None:
        if delta.kind == "turn_start":
            self.matcher.reset()
            self.generation = delta.generation
            self.violation = None
            self.tool_names.clear()
        elif delta.generation != self.generation:
            return
        self.last_seq = max(self.last_seq, delta.seq) if delta.kind != "turn_start" else delta.seq
        if self.violation is not None or not self.rules:
            return
        matches: list[Match] = []
        if delta.kind == "text":
            matches = self.matcher.feed("text", delta.text, delta.block)
        elif delta.kind == "tool_start":
            self.tool_names[delta.block] = delta.text
        elif delta.kind == "tool_input":
            name = self.tool_names.get(delta.block, "unknown")
            matches = self.matcher.feed(f"tool:{name}", delta.text, delta.block)
        if matches:
            self._fire(matches)

    def _fire(self, matches: list[Match]) -> None:
        rules = [m.rule for m in matches]
        names = [r.name for r in rules]
        rule_log = self.app.rule_log(self.session_id) or RuleLog(session_id=self.session_id)
        rule_log.trigger(
            rules=names,
            source=matches[0].source,
            offset=matches[0].offset,
            generation=self.generation,
        )
        self.app.save(rule_log)
        reminder = render_reminder(rules)
        self.violation = BarrierResult(
            generation=self.generation, clear=False, rules=names, reminder=reminder
        )
        log.info("session %s: rule(s) %s matched; interrupting", self.session_id, names)
        self.send(
            self.subjects.session(self.session_id),
            Interrupt(
                session_id=self.session_id,
                generation=self.generation,
                rules=names,
                reminder=reminder,
                source=matches[0].source,
            ),
        )

    def _answer_barriers(self) -> None:
        waiting: list[tuple[Envelope, BarrierCheck]] = []
        for envelope, check in self.parked:
            if check.generation < self.generation:
                # An older generation was superseded: its caller has moved on.
                self.reply(envelope, BarrierResult(generation=check.generation, clear=True))
            elif check.generation == self.generation and self.last_seq >= check.seq:
                self.reply(
                    envelope,
                    self.violation or BarrierResult(generation=check.generation, clear=True),
                )
            else:
                waiting.append((envelope, check))
        self.parked = waiting
