"""The TTSR monitor actor: one per session, watching the session's stream for rules.

It follows ``<ns>.session.<id>.stream``. Each delta goes to a :class:`StreamMatcher` (one
buffer per source: text, thinking, each tool call's arguments); the
:class:`InjectionPolicy` decides which rules may fire. On a match it records
``TtsrTriggered`` on the session's :class:`events.ttsr.RuleLog` (published on the bus by
the relay) and tells the session to interrupt, or, for rules that do not abort, to add
the reminder after the turn. It answers the session's barrier requests on
``<ns>.ttsr.<id>`` once every delta up to the asked sequence number has been checked; a
barrier that arrives before its deltas waits for them. A gap in the sequence numbers (a
restart, a lost delta) makes the generation "unchecked": the session asks the model again.

Rules are reloaded at the start of a model call when their files changed; the injection
history is kept.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable
from typing import Any

import msgspec

from tether.actors.runtime import ActorSystem, Envelope, TetherActor
from tether.actors.ttsr.match import Match, StreamMatcher
from tether.actors.ttsr.policy import Injection, InjectionPolicy, TtsrSettings
from tether.actors.ttsr.rules import Rule, RuleSet, load_rules, render_reminder
from tether.events.application import TetherApplication
from tether.events.messages import BarrierCheck, BarrierResult, Interrupt, Reminder, StreamDelta
from tether.events.ttsr import RuleLog

log = logging.getLogger(__name__)

PATH_HEAD = 4096
"""Characters of a tool call's arguments searched for its ``path`` (for scope globs)."""

MAX_PARKED_FROM_BUS = 64
"""Barrier checks from the bus held at once, waiting for the running call's end."""

_PATH = re.compile(r'"path"\s*:\s*"((?:[^"\\]|\\.)*)"')


def rule_folders(workspace: str, configured: str, user: str) -> list[tuple[str, str]]:
    """Where a session's rules come from, first wins: the workspace's ``.tether/rules``,
    the configured rules folder, the user's rules folder."""
    folders = [("workspace", os.path.join(workspace, ".tether", "rules"))]
    folders.append(("configured", configured))
    folders.append(("user", user))
    return [(origin, path) for origin, path in folders if path]


def fingerprint(folders: list[tuple[str, str]]) -> tuple[tuple[str, int, int], ...]:
    """What changes when a rule file is added, removed or edited."""
    seen: list[tuple[str, int, int]] = []
    for _, folder in folders:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            if name.endswith(".md"):
                path = os.path.join(folder, name)
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                seen.append((path, st.st_mtime_ns, st.st_size))
    return tuple(seen)


class _ToolCall:
    """What the monitor knows of one streaming tool call."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.head = ""
        self.path: str | None = None
        self.pending: list[Match] = []

    def add(self, text: str) -> None:
        if self.path is not None or len(self.head) >= PATH_HEAD:
            return
        self.head += text
        found = _PATH.search(self.head)
        if found is not None:
            try:
                self.path = json.loads(f'"{found.group(1)}"')
            except ValueError:
                self.path = found.group(1)


class TtsrMonitorActor(TetherActor):
    """Stream rules for one session."""

    def __init__(
        self,
        system: ActorSystem,
        *,
        session_id: str,
        app: TetherApplication,
        folders: list[tuple[str, str]],
        settings: TtsrSettings | None = None,
        redact: Callable[[str], str] = str,
    ) -> None:
        super().__init__(system)
        self.session_id = session_id
        self.app = app
        self.folders = folders
        self.settings = settings or TtsrSettings()
        self.redact = redact
        """Masks secrets in a rule file's text before the session's RuleLog records it."""
        self.rule_set = RuleSet()
        self._fingerprint: tuple[tuple[str, int, int], ...] = ()
        self.matcher = StreamMatcher([])
        self.policy = InjectionPolicy(self.settings, [])
        self.generation = -1
        self.next_seq = 0
        self.complete = False
        self.unchecked = False
        self.watching = False
        """Whether this call's deltas are matched (rules loaded, TTSR on, no violation)."""
        self.violation: BarrierResult | None = None
        self.later: list[Reminder] = []
        self.tools: dict[int, _ToolCall] = {}
        self.parked: list[tuple[Envelope, BarrierCheck]] = []

    @property
    def rules(self) -> list[Rule]:
        """The rules in force."""
        return self.rule_set.rules

    # --- lifecycle ----------------------------------------------------------------------

    def recover(self) -> None:
        self._load_rules()
        self.policy = InjectionPolicy(self.settings, self.rules)
        rule_log = self.app.rule_log(self.session_id)
        if rule_log is not None:
            self.policy.restore(Injection(rule, turn) for rule, turn in rule_log.injections)
        self.generation = -1
        self.complete = False
        self.unchecked = False
        self.violation = None

    def _load_rules(self) -> None:
        self._fingerprint = fingerprint(self.folders)
        self.rule_set = load_rules(list(self.folders))
        for warning in self.rule_set.warnings:
            log.warning("TTSR: %s", self.redact(warning))  # a warning may quote a value
        self.matcher = StreamMatcher(self.rules, window=self.settings.window)
        self.policy.set_rules(self.rules)
        self._record_rules()

    def _record_rules(self) -> None:
        """Record the rule files in force in the session's RuleLog when they differ from
        what it last recorded (nothing for a session that never had rules in force: none
        are while TTSR is off)."""
        in_force = [msgspec.structs.replace(source, text=self.redact(source.text))
                    for source in self.rule_set.sources] if self.settings.enabled else []
        rule_log = self.app.rule_log(self.session_id)
        recorded = rule_log.sources if rule_log is not None else []
        if in_force == recorded:
            return
        rule_log = rule_log or RuleLog(session_id=self.session_id)
        rule_log.record_rules(sources=in_force)
        self.app.save(rule_log)

    def _reload_if_changed(self) -> None:
        if fingerprint(self.folders) != self._fingerprint:
            log.info("TTSR: rules changed for session %s; reloading", self.session_id)
            self._load_rules()

    # --- dispatch -----------------------------------------------------------------------

    def handle(self, message: Any, envelope: Envelope | None) -> None:
        if isinstance(message, StreamDelta):
            self._on_delta(message)
        elif isinstance(message, BarrierCheck) and envelope is not None:
            if envelope.from_here or (message.generation <= self.generation
                                      and self._parked_from_bus() < MAX_PARKED_FROM_BUS):
                self.parked.append((envelope, message))
            else:
                # A check from outside of a call not started (it may never be), or one
                # too many: held, it would stay until that call ends. Not vouched for.
                self.reply(envelope, BarrierResult(generation=message.generation,
                                                   clear=False, unchecked=True))
        if self.parked:
            self._answer_barriers()

    def _on_delta(self, delta: StreamDelta) -> None:
        if delta.kind == "turn_start":
            self._start(delta)
            return
        if delta.generation != self.generation:
            if delta.generation < self.generation:
                return  # a late delta of an aborted call
            # We never saw this call's start (this actor restarted mid-stream): the turn
            # number only travels on turn_start, so take it from the session itself.
            session = self.app.session(self.session_id)
            turn = session.completed_turns if session is not None else 0
            self._start(msgspec.structs.replace(delta, turn=turn))
            self.unchecked = True
        if delta.seq != self.next_seq:
            self.unchecked = True  # a delta went missing: this call cannot be vouched for
        self.next_seq = delta.seq + 1
        kind = delta.kind
        if kind == "end":
            self._end()
            return
        if not self.watching:
            return
        matches: list[Match] = []
        if kind == "text" or kind == "thinking":
            matches = self.matcher.feed(kind, delta.block, delta.text)
        elif kind == "tool_start":
            self.tools[delta.block] = _ToolCall(delta.text)
        elif kind == "tool_input":
            call = self.tools.setdefault(delta.block, _ToolCall("unknown"))
            call.add(delta.text)
            matches = self.matcher.feed(f"tool:{call.name}", delta.block, delta.text)
            matches = self._with_paths(call, matches)
        if matches:
            self._fire(matches)

    def _start(self, delta: StreamDelta) -> None:
        self._reload_if_changed()
        self.matcher.reset()
        self.policy.start_turn(delta.turn)
        self.matcher.set_active(self.policy.active())
        self.generation = delta.generation
        self.next_seq = delta.seq + 1
        self.complete = False
        self.unchecked = False
        self.violation = None
        self.later = []
        self.tools.clear()
        self.watching = self.settings.enabled and bool(self.rules)

    def _with_paths(self, call: _ToolCall, matches: list[Match]) -> list[Match]:
        """Matches whose rule's path glob accepts the call; others wait for the path."""
        ready: list[Match] = []
        for match in [*call.pending, *matches]:
            fits = match.rule.path_fits(match.source, call.path)
            if fits is True:
                ready.append(match)
            elif fits is None:
                if match not in call.pending:
                    call.pending.append(match)
                continue
            if match in call.pending:
                call.pending.remove(match)
        return ready

    def _end(self) -> None:
        """The model's message is complete: flush end-of-block matches, settle globs."""
        if self.violation is None and self.settings.enabled and self.rules:
            matches: list[Match] = []
            for match in self.matcher.end_all():
                call = self.tools.get(match.block)
                if match.source.startswith("tool:") and call is not None:
                    matches.extend(self._with_paths(call, [match]))
                else:
                    matches.append(match)
            for call in self.tools.values():
                matches.extend(self._with_paths(call, []))
                call.pending.clear()  # the whole call streamed without a fitting path
            if matches:
                self._fire(matches)
        self.complete = True

    def _fire(self, matches: list[Match]) -> None:
        eligible = [m for m in matches if self.policy.eligible(m.rule)]
        if not eligible:
            return
        unique: dict[str, Match] = {}
        for match in eligible:
            unique.setdefault(match.rule.name, match)
        aborting = [m for m in unique.values() if m.rule.aborts_on(m.source)]
        deferred = [m for m in unique.values() if not m.rule.aborts_on(m.source)]
        self.policy.record(unique.keys())
        self.matcher.set_active(self.policy.active())
        rule_log = self.app.rule_log(self.session_id) or RuleLog(session_id=self.session_id)
        for group, is_deferred in ((aborting, False), (deferred, True)):
            if group:
                rule_log.trigger(
                    rules=[m.rule.name for m in group],
                    source=group[0].source,
                    offset=group[0].offset,
                    generation=self.generation,
                    turn=self.policy.turn,
                    deferred=is_deferred,
                )
        self.app.save(rule_log)
        session_subject = self.subjects.session(self.session_id)
        if deferred:
            rules = [m.rule for m in deferred]
            self.later.append(Reminder(rules=[r.name for r in rules],
                                       text=render_reminder(rules)))
        if aborting:
            rules = [m.rule for m in aborting]
            names = [r.name for r in rules]
            reminder = render_reminder(rules)
            mode = self.policy.context_mode(rules)
            self.violation = BarrierResult(
                generation=self.generation, clear=False, rules=names, reminder=reminder,
                context_mode=mode, later=list(self.later),
            )
            self.watching = False  # the call is being aborted: the rest is moot
            log.info("session %s: rule(s) %s matched; interrupting", self.session_id, names)
            self.send(session_subject, Interrupt(
                session_id=self.session_id, generation=self.generation, rules=names,
                reminder=reminder, source=aborting[0].source, context_mode=mode,
                later=list(self.later),
            ))

    def _parked_from_bus(self) -> int:
        return sum(1 for envelope, _ in self.parked if not envelope.from_here)

    def _answer_barriers(self) -> None:
        waiting: list[tuple[Envelope, BarrierCheck]] = []
        for envelope, check in self.parked:
            if check.generation < self.generation:
                # That call was superseded (interrupted): its caller has moved on.
                self.reply(envelope, BarrierResult(generation=check.generation, clear=True))
            elif check.generation == self.generation and (
                self.violation is not None or (self.complete and self.next_seq > check.seq)
            ):
                self.reply(envelope, self._verdict(check.generation))
            else:
                waiting.append((envelope, check))
        self.parked = waiting

    def _verdict(self, generation: int) -> BarrierResult:
        if self.violation is not None:
            return self.violation
        if self.unchecked:
            return BarrierResult(generation=generation, clear=False, unchecked=True)
        return BarrierResult(generation=generation, clear=True, later=list(self.later))
