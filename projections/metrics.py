"""The metrics projection: what Tether spent and did, kept exactly once.

Figures (:class:`Metrics`, from :meth:`MetricsView.snapshot`) and where each comes from:

* cost: the Session's ``cost_usd`` of every event that carries one (:data:`COSTING`:
  ``TurnCompleted``, ``TurnFailed``, ``TitleSet``, ``HistoryCompacted`` and
  ``CompactionFailed``, what the aggregate adds to its own ``cost_usd`` and the budget
  check sees), in total and per UTC date of the event's timestamp;
* sessions launched: ``Created`` events (a fork is a launch too);
* sessions by status: each session once, in its latest ``StatusChanged`` status (a legacy
  ``waiting`` counts as ``running``, see ``LEGACY_STATUSES``);
* durations: from ``Created`` to the latest ``StatusChanged`` to completed, failed or
  killed, averaged over the sessions finished *now*: a resumed session leaves the average
  while it runs again and comes back with its new finish (what ``tether stats`` shows);
* finishes: each time a session becomes finished (it was not), the seconds from its
  creation, counted in :data:`DURATION_BUCKETS` with their number and sum; these only grow
  (a resumed session that finishes again is counted again), so ``/metrics`` serves them as
  a histogram;
* the most expensive session: id, name, cost and first prompt (clipped to 100 characters);
  costs only grow, so the leader changes only when another session overtakes it (ties keep
  the first to get there);
* tool calls by verdict: the Session's ``ToolCallDecided``, the last decision per call id
  being its verdict (an answered escalation counts by its answer; one still unanswered is
  ``awaiting_approval``). Not the gatekeeper's ``ToolDecision`` aggregate: the session
  records the gatekeeper's verdict too (counting both would count a call twice), and only
  the session knows the human's answer to an escalation, its own refusals (input that is
  not JSON, a gatekeeper that did not answer) and the engine tools;
* TTSR triggers per rule: ``RuleLog.TtsrTriggered``, each rule in ``rules`` counting one.
  Not the Session's ``TtsrInterrupted``/``TtsrReminderAdded``, which echo the same firing.

The rules are pure functions (:func:`apply_session_event`, :func:`session_deltas`,
:func:`top_after`, :func:`verdict_moves`). An event's row changes are applied in order, in
one transaction with its tracking record (:mod:`projections.tables`): the entity row
(session or call) changes first and hands what it was and became to the counter changes
after it, so counters move from what that transaction read and a replayed position changes
nothing. :meth:`MetricsView.snapshot` reads the tables one by one; taken while a follower
applies, it may mix two consecutive positions.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from typing import Any

import msgspec

from tether.events.lifecycle import FINISHED, LEGACY_STATUSES, STATUSES
from tether.events.session import Session
from tether.events.ttsr import RuleLog
from tether.projections.tables import Change, Row, Table, Update
from tether.projections.view import TrackedView

PROMPT_LENGTH = 100
ESCALATE = "escalate"
VERDICTS = ("allow", "deny", ESCALATE)
"""The decisions a call can end on (``escalate``: still awaiting an answer)."""
OTHER = "other"
"""The label counting a status or decision outside the known ones (none is recorded
today): the counters' keys are fixed before the transaction reads the row they move from."""

DURATION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
                    7200.0, 14400.0, 28800.0, 86400.0, math.inf)
"""Upper bounds (seconds, inclusive) of the buckets finishes are counted in."""

TOTALS = Table("totals", (("name", "text"), ("value", "real")), key=("name",))
"""Single figures: ``cost_usd``, ``launched``, ``finished``, ``duration_s`` (the sum of
the finished sessions' durations), ``finishes`` and ``finish_seconds`` (the number and sum
of the finishes' durations)."""
FINISH_BUCKETS = Table("finish_buckets", (("le", "real"), ("finishes", "int")), key=("le",))
"""Finishes per bucket (not cumulative): ``le`` is the bucket's upper bound, the last
one a large finite number standing for infinity (:data:`INF_KEY`)."""
INF_KEY = 1e300
COST_BY_DAY = Table("cost_by_day", (("day", "text"), ("cost_usd", "real")), key=("day",))
BY_STATUS = Table("status_counts", (("status", "text"), ("sessions", "int")),
                  key=("status",))
BY_VERDICT = Table("verdict_counts", (("verdict", "text"), ("calls", "int")),
                   key=("verdict",))
BY_RULE = Table("rule_triggers", (("rule", "text"), ("triggers", "int")), key=("rule",))
SESSIONS = Table(
    "sessions",
    (
        ("session_id", "text"), ("name", "text"), ("status", "text"), ("created_at", "text"),
        ("finished_at", "text"), ("cost_usd", "real"), ("first_prompt", "text"),
    ),
    key=("session_id",),
)
"""What the figures need of each session (:class:`SessionFacts`)."""
CALLS = Table("calls", (("session_id", "text"), ("call_id", "text"), ("verdict", "text")),
              key=("session_id", "call_id"))
"""The latest decision of each tool call."""
TOP = Table(
    "top_session",
    (("slot", "int"), ("session_id", "text"), ("name", "text"), ("cost_usd", "real"),
     ("first_prompt", "text")),
    key=("slot",),
)
"""One row (slot 0): the most expensive session."""

COSTING = (Session.TurnCompleted, Session.TurnFailed, Session.TitleSet,
           Session.HistoryCompacted, Session.CompactionFailed)
"""Session events with a ``cost_usd``: turns (completed or failed), the title call and
compactions (made or failed: their summary and memory calls), each counted as
``events.session.Session`` adds it to the session's cost."""

SESSION_EVENTS = (Session.Created, Session.UserMessageReceived, Session.Forked,
                  Session.StatusChanged, *COSTING)
"""The Session events that change a session's facts."""


class SessionFacts(msgspec.Struct, frozen=True):
    """One session as the metrics need it. Times are ISO 8601 in UTC."""

    session_id: str
    name: str
    status: str
    created_at: str
    finished_at: str
    """When the session last finished; "" unless its status is a finished one."""
    cost_usd: float
    first_prompt: str


class TopSession(msgspec.Struct, frozen=True):
    """The most expensive session."""

    session_id: str
    name: str
    cost_usd: float
    first_prompt: str


class Deltas(msgspec.Struct, frozen=True):
    """How one session's change moves the counters."""

    by_status: dict[str, int]
    finished: int
    duration_s: float
    finish: float | None = None
    """The duration of a finish this change made (the session was not finished and now
    is), else None."""


class Metrics(msgspec.Struct, frozen=True):
    """Every figure, as of notification ``position``."""

    position: int = 0
    total_cost_usd: float = 0.0
    cost_by_day: dict[str, float] = {}
    """UTC date (YYYY-MM-DD) -> dollars, oldest first."""
    sessions_launched: int = 0
    sessions_by_status: dict[str, int] = {}
    """Every lifecycle status in order (zeros included), then ``other`` if any."""
    finished_sessions: int = 0
    avg_duration_s: float = 0.0
    """Average over the finished sessions; 0.0 when none is."""
    finish_buckets: dict[float, int] = {}
    """Upper bound (seconds, :data:`DURATION_BUCKETS`, ``inf`` last) -> finishes whose
    duration was at most that: cumulative, as a histogram's buckets are."""
    finishes: int = 0
    """Times a session finished (each finish after a resume too)."""
    finish_seconds: float = 0.0
    """The sum of the finishes' durations."""
    most_expensive: TopSession | None = None
    tool_calls_by_verdict: dict[str, int] = {}
    """``allow`` and ``deny`` (then ``other`` if any): each decided call once, by its
    final verdict."""
    awaiting_approval: int = 0
    """Calls escalated and not answered yet."""
    ttsr_triggers: dict[str, int] = {}
    """Rule name -> triggers, by name."""


# --- the pure rules --------------------------------------------------------------------


def utc_stamp(value: Any) -> str:
    """An event timestamp as ISO 8601 in UTC (microseconds kept); "" if there is none."""
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat()
    return ""


def utc_day(value: Any) -> str:
    """The UTC date (YYYY-MM-DD) of an event timestamp; "" if there is none."""
    return utc_stamp(value)[:10]


def clip(text: str, width: int = PROMPT_LENGTH) -> str:
    """``text`` on one line, at most ``width`` characters (an ellipsis marks a cut)."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _first_user_text(history: list[Any]) -> str:
    for turn in history:
        if getattr(turn, "role", "") != "user":
            continue
        for block in getattr(turn, "content", []):
            text = getattr(block, "text", None)
            if isinstance(text, str) and text.strip():
                return text
    return ""


def apply_session_event(facts: SessionFacts | None, event: Any) -> SessionFacts | None:
    """The session's facts after ``event`` (a Session domain event); None before Created."""
    if isinstance(event, Session.Created):
        return SessionFacts(session_id=event.session_id, name=event.name, status="starting",
                            created_at=utc_stamp(event.timestamp), finished_at="",
                            cost_usd=0.0, first_prompt="")
    if facts is None:
        return None
    if isinstance(event, Session.UserMessageReceived) and not facts.first_prompt:
        return msgspec.structs.replace(facts, first_prompt=clip(event.text))
    if isinstance(event, Session.Forked) and not facts.first_prompt:
        return msgspec.structs.replace(facts, first_prompt=clip(_first_user_text(event.history)))
    if isinstance(event, Session.StatusChanged):
        status = LEGACY_STATUSES.get(event.status, event.status)
        finished_at = utc_stamp(event.timestamp) if status in FINISHED else ""
        return msgspec.structs.replace(facts, status=status, finished_at=finished_at)
    if isinstance(event, COSTING):
        return msgspec.structs.replace(facts, cost_usd=facts.cost_usd + event.cost_usd)
    return facts


def duration_s(facts: SessionFacts | None) -> float | None:
    """Seconds from Created to the finish of a finished session; None if not finished."""
    if facts is None or facts.status not in FINISHED or not facts.finished_at:
        return None
    finished = dt.datetime.fromisoformat(facts.finished_at)
    return (finished - dt.datetime.fromisoformat(facts.created_at)).total_seconds()


def status_label(status: str) -> str:
    """The label a session status is counted under (legacy statuses read as today's)."""
    status = LEGACY_STATUSES.get(status, status)
    return status if status in STATUSES else OTHER


def verdict_label(decision: str) -> str:
    """The label a call's final decision is counted under."""
    return decision if decision in VERDICTS else OTHER


def session_deltas(before: SessionFacts | None, after: SessionFacts | None) -> Deltas:
    """How a session going from ``before`` to ``after`` moves the status counts, the
    number of finished sessions and the sum of their durations."""
    by_status: dict[str, int] = {}
    old = status_label(before.status) if before else None
    new = status_label(after.status) if after else None
    if old != new:
        if old is not None:
            by_status[old] = -1
        if new is not None:
            by_status[new] = 1
    was, now = duration_s(before), duration_s(after)
    return Deltas(by_status=by_status, finished=int(now is not None) - int(was is not None),
                  duration_s=(now or 0.0) - (was or 0.0),
                  finish=now if was is None and now is not None else None)


def bucket_of(seconds: float) -> float:
    """The upper bound of the bucket a duration is counted in."""
    return next(le for le in DURATION_BUCKETS if seconds <= le)


def top_after(top: TopSession | None, facts: SessionFacts | None) -> TopSession | None:
    """The most expensive session once a session's facts became ``facts`` (costs only
    grow: the leader is refreshed, overtaken by a strictly higher cost, or kept)."""
    if facts is None or facts.cost_usd <= 0:
        return top
    replaces = top is None or top.session_id == facts.session_id or \
        facts.cost_usd > top.cost_usd
    if not replaces:
        return top
    return TopSession(session_id=facts.session_id, name=facts.name, cost_usd=facts.cost_usd,
                      first_prompt=facts.first_prompt)


def verdict_moves(before: str, decision: str) -> dict[str, int]:
    """How a call whose verdict was ``before`` ("" if none yet) and is now ``decision``
    (the last decision recorded wins) moves the verdict counts: each call counts once."""
    old, new = verdict_label(before) if before else "", verdict_label(decision)
    if old == new:
        return {}
    moves = {new: 1}
    if old:
        moves[old] = -1
    return moves


# --- applying them ---------------------------------------------------------------------


class _Step:
    """What the first change of an event did to its entity row, for the changes after it
    (applied later in the same transaction)."""

    def __init__(self) -> None:
        self.before: Any = None
        self.after: Any = None


def _add(key: Row, column: str, delta: Callable[[], float]) -> Update:
    """Add ``delta()`` (read when applied) to ``column`` of the row with ``key``."""

    def update(current: Row | None) -> Row | None:
        amount = delta()
        if not amount:
            return None
        row = dict(current) if current else {**key, column: 0}
        row[column] += amount
        return row

    return update


def _facts(row: Row | None) -> SessionFacts | None:
    if row is None:
        return None
    return SessionFacts(**{k: row[k] for k in SessionFacts.__struct_fields__})


def _top(row: Row | None) -> TopSession | None:
    if row is None:
        return None
    return TopSession(**{k: row[k] for k in TopSession.__struct_fields__})


class MetricsView(TrackedView):
    """The metrics projection over a Tether application's log."""

    NAME = "Metrics"
    TABLES = (TOTALS, COST_BY_DAY, BY_STATUS, BY_VERDICT, BY_RULE, SESSIONS, CALLS, TOP,
              FINISH_BUCKETS)

    def changes(self, domain_event: Any, position: int) -> list[Change]:
        match domain_event:
            case RuleLog.TtsrTriggered():
                return [Change(BY_RULE.name, (rule,),
                               _add({"rule": rule}, "triggers", lambda: 1))
                        for rule in domain_event.rules]
            case Session.ToolCallDecided():
                return self._decision(domain_event)
            case Session.Event() if isinstance(domain_event, SESSION_EVENTS):
                return self._session(domain_event)
        return []

    def _session(self, event: Any) -> list[Change]:
        created = isinstance(event, Session.Created)
        sid = event.session_id if created else self.app.session_id_of(event)
        if sid is None:
            return []
        step = _Step()

        def facts(current: Row | None) -> Row | None:
            step.before = _facts(current)
            step.after = apply_session_event(step.before, event)
            if step.after is None or step.after == step.before:
                return None
            return msgspec.structs.asdict(step.after)

        def deltas() -> Deltas:
            return session_deltas(step.before, step.after)

        def top(current: Row | None) -> Row | None:
            leader = _top(current)
            new = top_after(leader, step.after)
            if new is None or new == leader:
                return None
            return {"slot": 0, **msgspec.structs.asdict(new)}

        changes = [Change(SESSIONS.name, (sid,), facts)]
        if created:
            changes.append(Change(TOTALS.name, ("launched",),
                                  _add({"name": "launched"}, "value", lambda: 1)))
        if isinstance(event, COSTING):
            cost = float(event.cost_usd)
            day = utc_day(event.timestamp)
            changes += [
                Change(TOTALS.name, ("cost_usd",),
                       _add({"name": "cost_usd"}, "value", lambda: cost)),
                Change(COST_BY_DAY.name, (day,), _add({"day": day}, "cost_usd", lambda: cost)),
                Change(TOP.name, (0,), top),
            ]
        if created or isinstance(event, Session.StatusChanged):
            changes += [
                Change(BY_STATUS.name, (label,),
                       _add({"status": label}, "sessions", _status_delta(step, label)))
                for label in (*STATUSES, OTHER)
            ]
            changes += [
                Change(TOTALS.name, ("finished",),
                       _add({"name": "finished"}, "value", lambda: deltas().finished)),
                Change(TOTALS.name, ("duration_s",),
                       _add({"name": "duration_s"}, "value", lambda: deltas().duration_s)),
                Change(TOTALS.name, ("finishes",),
                       _add({"name": "finishes"}, "value",
                            lambda: int(deltas().finish is not None))),
                Change(TOTALS.name, ("finish_seconds",),
                       _add({"name": "finish_seconds"}, "value",
                            lambda: deltas().finish or 0.0)),
            ]
            changes += [
                Change(FINISH_BUCKETS.name, (_le_key(le),),
                       _add({"le": _le_key(le)}, "finishes", _finish_delta(step, le)))
                for le in DURATION_BUCKETS
            ]
        return changes

    def _decision(self, event: Any) -> list[Change]:
        sid = self.app.session_id_of(event)
        if sid is None:
            return []
        step = _Step()

        def record(current: Row | None) -> Row:
            step.before = current["verdict"] if current else ""
            step.after = event.decision
            return {"session_id": sid, "call_id": event.call_id, "verdict": event.decision}

        return [Change(CALLS.name, (sid, event.call_id), record)] + [
            Change(BY_VERDICT.name, (label,),
                   _add({"verdict": label}, "calls", _verdict_delta(step, label)))
            for label in (*VERDICTS, OTHER)
        ]

    def snapshot(self) -> Metrics:
        """Every figure as the tables hold it now."""
        totals = {r["name"]: float(r["value"]) for r in self.rows(TOTALS.name)}
        by_status = dict.fromkeys(STATUSES, 0)
        for r in self.rows(BY_STATUS.name):
            if r["status"] in by_status or r["sessions"]:
                by_status[r["status"]] = int(r["sessions"])
        verdicts = dict.fromkeys(VERDICTS, 0)
        for r in self.rows(BY_VERDICT.name):
            if r["verdict"] in verdicts or r["calls"]:
                verdicts[r["verdict"]] = int(r["calls"])
        awaiting = verdicts.pop(ESCALATE)
        top = self.rows(TOP.name)
        finished = round(totals.get("finished", 0.0))
        per_bucket = {float(r["le"]): int(r["finishes"]) for r in self.rows(FINISH_BUCKETS.name)}
        cumulative, buckets = 0, {}
        for le in DURATION_BUCKETS:
            cumulative += per_bucket.get(_le_key(le), 0)
            buckets[le] = cumulative
        return Metrics(
            position=self.position(),
            total_cost_usd=totals.get("cost_usd", 0.0),
            cost_by_day={r["day"]: float(r["cost_usd"])
                         for r in self.rows(COST_BY_DAY.name, order="day")},
            sessions_launched=round(totals.get("launched", 0.0)),
            sessions_by_status=by_status,
            finished_sessions=finished,
            avg_duration_s=totals.get("duration_s", 0.0) / finished if finished else 0.0,
            finish_buckets=buckets,
            finishes=round(totals.get("finishes", 0.0)),
            finish_seconds=totals.get("finish_seconds", 0.0),
            most_expensive=_top(top[0] if top else None),
            tool_calls_by_verdict=verdicts,
            awaiting_approval=awaiting,
            ttsr_triggers={r["rule"]: int(r["triggers"])
                           for r in self.rows(BY_RULE.name, order="rule")},
        )


def _status_delta(step: _Step, label: str) -> Callable[[], float]:
    return lambda: session_deltas(step.before, step.after).by_status.get(label, 0)


def _le_key(le: float) -> float:
    """A bucket's key in its table (a database real holds no infinity)."""
    return INF_KEY if math.isinf(le) else le


def _finish_delta(step: _Step, le: float) -> Callable[[], float]:
    def delta() -> float:
        finish = session_deltas(step.before, step.after).finish
        return int(finish is not None and bucket_of(finish) == le)

    return delta


def _verdict_delta(step: _Step, label: str) -> Callable[[], float]:
    return lambda: verdict_moves(step.before, step.after).get(label, 0)
