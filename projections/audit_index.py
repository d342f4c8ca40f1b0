"""The audit index: every tool call with who asked, what it would do, and what was decided.

One row per session and call id, built exactly once from the session events: proposed
(tool, input summary, action hash, the user whose message started the turn), decided
(verdict, tier, reason, by whom), and the outcome (executed, failed or refused), with the
time of each. ``tether audit`` queries it.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from tether.events.application import TetherApplication
from tether.events.inbox import RefusedMessage
from tether.events.session import Session
from tether.projections.tables import Change, Row, Table, Update
from tether.projections.view import TrackedView

CALLS = Table(
    "calls",
    (
        ("session_id", "text"), ("call_id", "text"), ("user_name", "text"),
        ("channel", "text"), ("tool", "text"), ("input_summary", "text"),
        ("action_hash", "text"), ("verdict", "text"), ("tier", "text"), ("reason", "text"),
        ("approver", "text"), ("outcome", "text"), ("proposed_at", "text"),
        ("decided_at", "text"), ("finished_at", "text"), ("position", "int"),
    ),
    key=("session_id", "call_id"),
)

ASKERS = Table(
    "askers",
    (("session_id", "text"), ("user_name", "text"), ("channel", "text")),
    key=("session_id",),
)
"""Who spoke last in each session: the user a tool call is done for."""

REFUSALS = Table(
    "refusals",
    (
        ("position", "int"), ("channel", "text"), ("user_name", "text"), ("kind", "text"),
        ("reason", "text"), ("size", "int"), ("excerpt", "text"), ("at", "text"),
    ),
    key=("position",),
)
"""Messages the inbox middleware turned away (never stored as user messages)."""

CONTAINMENT = Table(
    "containment",
    (("session_id", "text"), ("call_id", "text"), ("sandbox", "text")),
    key=("session_id", "call_id"),
)
"""What each call that ran was contained by (a table of its own, so an index built before
calls recorded it needs no new column)."""

SUMMARY_LENGTH = 160


class Refused(msgspec.Struct, frozen=True):
    """A refused message as the audit index holds it."""

    at: str
    channel: str
    user: str
    kind: str
    reason: str
    size: int
    excerpt: str


class AuditEntry(msgspec.Struct, frozen=True):
    """One tool call as the audit index holds it."""

    session_id: str
    call_id: str
    user: str
    channel: str
    tool: str
    input_summary: str
    action_hash: str
    verdict: str
    tier: str
    reason: str
    approver: str
    outcome: str
    proposed_at: str
    decided_at: str
    finished_at: str
    sandbox: str = ""
    """The sandbox profile it ran under, in words ("" when it never started)."""


def summarize(tool_input: dict[str, Any]) -> str:
    """A one-line, bounded summary of a tool's input."""
    text = json.dumps(tool_input, sort_keys=True, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= SUMMARY_LENGTH else text[: SUMMARY_LENGTH - 1] + "…"


def _stamp(event: Any) -> str:
    value = getattr(event, "timestamp", None)
    return value.astimezone(dt.UTC).isoformat() if isinstance(value, dt.datetime) else ""


def _set(**values: Any) -> Update:
    def update(current: Row | None) -> Row | None:
        if current is None:
            return None  # a decision or outcome for a call never proposed: nothing to do
        return {**current, **values}

    return update


class AuditIndex(TrackedView):
    """The audit-index projection."""

    NAME = "AuditIndex"
    TABLES = (CALLS, ASKERS, REFUSALS, CONTAINMENT)

    def __init__(self, app: TetherApplication, env: dict[str, str]) -> None:
        super().__init__(app, env)
        self._askers: dict[str, Row] = {}
        """The askers of the batch being applied, by session: not committed yet."""

    def consume(self, notifications: Sequence[Any]) -> None:
        """As :meth:`TrackedView.consume`; one batch at a time per instance (its follower
        holds a lock; another process opens its own)."""
        self._askers = {}
        super().consume(notifications)

    def changes(self, event: Any, position: int) -> list[Change]:
        if isinstance(event, RefusedMessage.Event):
            e_: Any = event
            row = {"position": position, "channel": e_.channel, "user_name": e_.user,
                   "kind": e_.kind, "reason": e_.reason, "size": e_.size,
                   "excerpt": e_.excerpt, "at": _stamp(e_)}
            return [Change(REFUSALS.name, (position,), lambda _current: row)]
        if not isinstance(event, Session.Event) or isinstance(event, Session.Created):
            return []
        sid = self.app.session_id_of(event) or ""
        at = _stamp(event)
        match event:
            case Session.UserMessageReceived():
                asker = {"session_id": sid, "user_name": event.user, "channel": event.channel}
                self._askers[sid] = asker
                return [Change(ASKERS.name, (sid,), lambda _row: asker)]
            case Session.ToolCallProposed():
                return [Change(CALLS.name, (sid, event.call_id),
                               self._proposed(event, sid, at, position))]
            case Session.ToolCallDecided():
                approver = "user" if event.tier == "human" else event.tier
                return [Change(CALLS.name, (sid, event.call_id), _set(
                    verdict=event.decision, tier=event.tier, reason=event.reason,
                    approver=approver, decided_at=at))]
            case Session.ToolCallStarted():
                described = (event.sandbox.describe() if event.sandbox is not None
                             else "no process")
                row = {"session_id": sid, "call_id": event.call_id, "sandbox": described}
                return [Change(CALLS.name, (sid, event.call_id), _set(outcome="running")),
                        Change(CONTAINMENT.name, (sid, event.call_id), lambda _row: row)]
            case Session.ToolCallInterrupted():
                return [Change(CALLS.name, (sid, event.call_id), _set(
                    outcome="interrupted (outcome unknown)", finished_at=at))]
            case Session.ToolCallExecuted():
                outcome = "failed" if event.is_error else "executed"
                return [Change(CALLS.name, (sid, event.call_id),
                               _set(outcome=outcome, finished_at=at))]
            case Session.ToolCallRefused():
                return [Change(CALLS.name, (sid, event.call_id),
                               _set(outcome="refused", finished_at=at))]
        return []

    def _proposed(self, event: Session.ToolCallProposed, sid: str, at: str,
                  position: int) -> Callable[[Row | None], Row]:
        """The call's row as proposed, naming who asked for the session's turn."""
        asked = self._askers.get(sid) or self.recorder_row(ASKERS.name, (sid,)) or {}

        def propose(current: Row | None) -> Row:
            return {
                "session_id": sid, "call_id": event.call_id,
                "user_name": asked.get("user_name", ""), "channel": asked.get("channel", ""),
                "tool": event.tool, "input_summary": summarize(event.tool_input),
                "action_hash": event.action_hash, "verdict": "", "tier": "", "reason": "",
                "approver": "", "outcome": "pending", "proposed_at": at,
                "decided_at": "", "finished_at": "", "position": position,
            }

        return propose

    def recorder_row(self, table: str, key: tuple[Any, ...]) -> Row | None:
        """A row as stored now (read outside the applying transaction: the asker row of a
        session is written by an earlier event, committed by an earlier batch or planned
        in this one)."""
        names = {t.name: t for t in self.TABLES}
        where = dict(zip(names[table].key, key, strict=True))
        rows = self.rows(table, where)
        return rows[0] if rows else None

    def refusals(self, user: str | None = None) -> list[Refused]:
        """Refused messages, oldest first (of one user, or all)."""
        rows = self.rows(REFUSALS.name, {"user_name": user} if user else None, "position")
        return [Refused(at=r["at"], channel=r["channel"], user=r["user_name"], kind=r["kind"],
                        reason=r["reason"], size=r["size"], excerpt=r["excerpt"])
                for r in rows]

    def query(
        self,
        *,
        session: str | None = None,
        user: str | None = None,
        tool: str | None = None,
        verdict: str | None = None,
        tier: str | None = None,
        since: str | None = None,
        until: str | None = None,
    ) -> list[AuditEntry]:
        """Calls matching every given filter. Times are ISO 8601 and inclusive at the
        precision given: ``--until 2026-11-22`` includes that whole day."""
        where: Row = {}
        for column, value in (("session_id", session), ("user_name", user), ("tool", tool),
                              ("verdict", verdict), ("tier", tier)):
            if value:
                where[column] = value
        rows = self.rows(CALLS.name, where, order="position")
        contained = {(r["session_id"], r["call_id"]): r["sandbox"]
                     for r in self.rows(CONTAINMENT.name,
                                        {"session_id": session} if session else None)}
        out = []
        for r in rows:
            if since and r["proposed_at"][: len(since)] < since:
                continue
            if until and r["proposed_at"][: len(until)] > until:
                continue
            out.append(AuditEntry(
                session_id=r["session_id"], call_id=r["call_id"], user=r["user_name"],
                channel=r["channel"], tool=r["tool"], input_summary=r["input_summary"],
                action_hash=r["action_hash"], verdict=r["verdict"], tier=r["tier"],
                reason=r["reason"], approver=r["approver"], outcome=r["outcome"],
                proposed_at=r["proposed_at"], decided_at=r["decided_at"],
                finished_at=r["finished_at"],
                sandbox=contained.get((r["session_id"], r["call_id"]), ""),
            ))
        return out
