"""The session manager actor: finds or creates the actor for every user message.

Bound to ``<ns>.inbox`` (UserMessages of engine-role publishers: in-process connectors,
whose ``user`` is trusted), ``<ns>.inbox.<principal>`` (connectors' UserMessages: the
``user`` becomes the principal the subject names, the one NATS authenticated), both in
queue group ``engine``, ``<ns>.manager`` (list, kill, fork, tree requests of engine-role
programs) and ``<ns>.manager.<principal>`` (a connector's: as that principal, about the
sessions it may decide for). It answers only request inboxes (``_INBOX.…``). It starts
a session's actors on first use, including sessions recovered from the store after a
restart, and forwards each message over NATS to ``<ns>.session.<id>``. A message names its
session by id or by name (finished sessions too: a message to one resumes it). At most
``max_sessions`` sessions are active at once; a new or resumed one beyond that is refused,
saying what to do. Each second (Tick) it passes the time on to its sessions (idle
timeouts, the safety net); every minute it drops from memory the sessions finished for an
hour (they stay in the store).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Callable
from typing import Any

import msgspec

from tether.actors.authority import may_decide, refusal_reason
from tether.actors.conversation import history_at, resolve_node
from tether.actors.middleware import Gate, MiddlewareSettings, Refusal
from tether.actors.model.redact import Redactor
from tether.actors.naming import name_from_prompt
from tether.actors.paths import inside
from tether.actors.ports import Clock, Ids, SystemClock
from tether.actors.runtime import (
    REQUEST_INBOX,
    ActorHandle,
    ActorSystem,
    AskResult,
    Envelope,
    TetherActor,
    Then,
    Tick,
)
from tether.actors.session import ForkOf, NewSession, SessionTick
from tether.events.application import TetherApplication
from tether.events.forest import ForestError
from tether.events.inbox import RefusedMessage
from tether.events.lifecycle import ACTIVE, FINISHED
from tether.events.messages import (
    Accepted,
    BranchTo,
    ChannelMessage,
    EditNode,
    ErrorReply,
    ForkSession,
    Generate,
    Killed,
    KillSession,
    ListSessions,
    SessionList,
    SessionSummary,
    TextBlock,
    TreeCommand,
    TreeQuery,
    UndoFiles,
    UserMessage,
)
from tether.events.session import Session, Turn
from tether.events.ttsr import RuleLog

log = logging.getLogger(__name__)

SessionSpawner = Callable[[str, NewSession | None], list[ActorHandle]]
"""Starts the actors of one session (its session actor and TTSR monitor)."""

CLEANUP_EVERY = 60
"""Ticks (seconds) between two clean-ups."""


class SessionLimits(msgspec.Struct, kw_only=True, frozen=True):
    """How many sessions may be active, how long finished ones stay in memory, how many
    finished sessions can be resumed by name, and a new session's budget."""

    max_sessions: int = 5
    keep_finished: float = 3600.0
    resumable: int = 50
    budget_usd: float = 0.0
    mask_secrets: bool = True
    """Mask the secrets a user message holds (the redactor's shapes) before anything of it
    is stored, named after or sent to the model."""
    approvers: dict[str, list[str]] = {}
    """Per channel (or ``"*"``), who besides a session's owner may act on it through a
    connector's manager requests (:mod:`actors.authority`)."""


class KillAll(msgspec.Struct):
    """In-process, at shutdown: kill every active session."""

    reason: str


class SessionManagerActor(TetherActor):
    """Owns the set of live session actors of this process."""

    binds_message_sessions = False
    """A request may name its session by name: the lines about one carry its resolved id,
    given with each line (``extra``), never the name as sent."""

    def __init__(
        self,
        system: ActorSystem,
        *,
        app: TetherApplication,
        spawn: SessionSpawner,
        list_sessions: Callable[[], list[SessionSummary]],
        summary: Callable[[str], SessionSummary | None] | None = None,
        ids: Ids,
        default_workspace: str,
        gate: Gate | None = None,
        clock: Clock | None = None,
        redactor: Redactor | None = None,
        limits: SessionLimits | None = None,
    ) -> None:
        super().__init__(system)
        self.limits = limits or SessionLimits()
        self.ticks = 0
        self.finished_since: dict[str, dt.datetime] = {}
        self.redactor = redactor or Redactor()
        self.gate = gate or Gate(MiddlewareSettings())
        self.clock = clock or SystemClock()
        self.app = app
        self.spawn = spawn
        self.list_sessions = list_sessions
        self.summary = summary or (lambda sid: next(
            (r for r in list_sessions() if r.session_id == sid), None))
        self.ids = ids
        self.default_workspace = default_workspace
        self.live: dict[str, list[ActorHandle]] = {}
        self._names: set[str] | None = None
        self.pending_kills: dict[str, list[Envelope | None]] = {}

    def recover(self) -> None:
        # Nothing to read here: recovering must not depend on the database being up (a
        # manager that cannot recover stops, and with it the whole engine's front door).
        self._names = None

    def _taken_names(self) -> set[str]:
        if self._names is None:
            self._names = {s.name for s in self.list_sessions()}
        return self._names

    def handle(self, message: Any, envelope: Envelope | None) -> None:
        if envelope is not None and envelope.reply and not envelope.reply.startswith(
                REQUEST_INBOX):
            # Connectors may publish here: the engine answers only request inboxes, never
            # a subject the sender names (a session's, say).
            envelope = msgspec.structs.replace(envelope, reply="")
        if envelope is not None and not isinstance(message, UserMessage):
            principal = self.subjects.principal_of(envelope.subject, "manager")
            if principal is not None:
                message = self._as_principal(message, principal, envelope)
                if message is None:
                    return
        if isinstance(message, UserMessage):
            authenticated = self._authenticate(message, envelope)
            if authenticated is not None:
                self._on_user_message(*authenticated)
        elif isinstance(message, ListSessions):
            self.reply(envelope, SessionList(sessions=self.list_sessions()))
        elif isinstance(message, KillSession):
            self._on_kill(message, envelope)
        elif isinstance(message, ForkSession):
            self._on_fork(message, envelope)
        elif isinstance(message, TreeQuery | BranchTo | EditNode | Generate | TreeCommand
                        | UndoFiles):
            self._forward(message, envelope)
        elif isinstance(message, AskResult):
            self._on_killed(message)
        elif isinstance(message, Tick):
            self._on_tick()
        elif isinstance(message, KillAll):
            for sid, handles in self.live.items():
                handles[-1].tell(KillSession(session_id=sid, reason=message.reason))

    def _authenticate(self, message: UserMessage, envelope: Envelope | None
                      ) -> tuple[UserMessage, Envelope | None] | None:
        """Who a user message is from, decided before anything else looks at it.

        On a principal's inbox (``<ns>.inbox.<principal>``, where a connector may publish
        only its own): that principal, whatever ``user`` says; and a reply goes only to a
        request inbox (``_INBOX.…``), never to a subject the sender names. On the bare
        ``<ns>.inbox`` (engine-role publishers, which authenticate their users
        themselves) or in process: ``user`` as given. Anywhere else (``<ns>.manager``,
        which connectors may publish on too): refused with ``bad_request``. (Replies go
        only to request inboxes, ``_INBOX.…``, whatever the subject: :meth:`handle`.)
        """
        if envelope is None or envelope.subject == self.subjects.inbox:
            return message, envelope
        principal = self.subjects.principal_of(envelope.subject)
        if principal is None:
            self.reply(envelope, ErrorReply(error="bad_request", reason=(
                f"user messages go to {self.subjects.inbox}.<principal>, not "
                f"{envelope.subject}")))
            return None
        # ``origin`` routes the session's endings (with its last lines of output) and
        # waiting notices: a connector may not send them to another channel or chat (the
        # HTTP connector drops it for the same reason).
        return msgspec.structs.replace(message, user=principal, origin=""), envelope

    def _budget(self, asked: float) -> float:
        """A new session's budget: what its first message asked for, never above the
        configured one (a sender may lower the operator's cap, not lift it)."""
        cap = self.limits.budget_usd
        if not asked:
            return cap
        return min(asked, cap) if cap else asked

    def _as_principal(self, message: Any, principal: str, envelope: Envelope) -> Any:
        """A connector's manager request (``<ns>.manager.<principal>``): its ``user``
        fields say ``principal``, and a request about a session is refused (None, after
        answering, recording and logging why) unless ``principal`` may decide for it:
        its owner or an approver named for its home channel. Listing is open."""
        if "user" in message.__struct_fields__:
            message = msgspec.structs.replace(message, user=principal)
        if isinstance(message, ListSessions):
            return message
        ref = message.session_id
        sid = ref if ref in self.live else self._resolve(ref)
        session = self.app.session(sid) if sid else None
        if session is None or may_decide(principal, session.owner, session.home_channel,
                                         self.limits.approvers):
            return message  # an unknown session is answered as such further on
        what = {"KillSession": "kill", "ForkSession": "fork",
                "TreeQuery": "read the conversation of",
                "UndoFiles": "undo the file changes of"}.get(
            type(message).__name__, "change the conversation of")
        reason = refusal_reason(principal, what, session.name)
        log.warning("manager: %s", reason, extra={"session_id": session.session_id})
        self.app.save(RefusedMessage(channel="manager", user=principal, kind="not_approver",
                                     reason=reason, size=envelope.size,
                                     excerpt=type(message).__name__))
        self.reply(envelope, ErrorReply(error="not_allowed", reason=reason))
        return None

    def _on_user_message(self, message: UserMessage, envelope: Envelope | None) -> None:
        size = envelope.size if envelope is not None else 0
        refusal = self.gate.check(message, size, self.clock.now().timestamp())
        if refusal is not None:
            self._refuse(message, refusal, size, envelope)
            return
        if self.limits.mask_secrets:
            message = msgspec.structs.replace(message, text=self.redactor.text(message.text))
        sid = message.session_id
        if sid and sid not in self.live:
            found = self._resolve(sid)
            if found is None:
                reason = (f"no session {sid!r} (by id or name); leave session_id empty to "
                          "start a new one")
                self._error(message.channel, envelope, "unknown_session", reason, sid)
                return
            sid = found
        if sid:
            row = self.summary(sid)
            if row is not None and row.status in FINISHED and not self._room(
                    message.channel, envelope, f"resume {row.name}"):
                return
            if sid not in self.live:
                self.live[sid] = self.spawn(sid, None)
        elif not sid:
            if not self._room(message.channel, envelope, "start a new session"):
                return
            workspace = self._workspace(message.workspace)
            if workspace is None:
                reason = (
                    f"workspace {message.workspace!r} is not inside the engine's workspace "
                    f"{self.default_workspace}"
                )
                self.reply(envelope, ErrorReply(error="bad_workspace", reason=reason))
                self.send(
                    self.subjects.channel_out(message.channel),
                    ChannelMessage(session_id="", kind="error", text=reason),
                )
                return
            sid = self.ids.new()
            names = self._taken_names()
            name = name_from_prompt(message.text, names)
            names.add(name)
            new = NewSession(name=name, workspace=workspace, channel=message.channel,
                             multi_turn=not message.single_turn, origin=message.origin,
                             owner=message.user,
                             budget_usd=self._budget(message.budget_usd))
            self.live[sid] = self.spawn(sid, new)
        forwarded = msgspec.structs.replace(message, session_id=sid)
        # The session answers the original requester (Accepted) once the message is stored.
        self.send(self.subjects.session(sid), forwarded, reply=envelope.reply if envelope else "")

    def _forward(self, message: TreeQuery | BranchTo | EditNode | Generate | TreeCommand
                 | UndoFiles, envelope: Envelope | None) -> None:
        """A request for one session (its tree, a branch, an edit, a generation), to its
        actor, started first when it is not live; the session answers the requester.
        Generating in a finished session resumes it, so it needs room like a message."""
        ref = message.session_id
        sid = ref if ref in self.live else self._resolve(ref)
        if sid is None:
            self._error("", envelope, "unknown_session", f"no session {ref!r} (by id or name)")
            return
        if sid not in self.live:
            row = self.summary(sid)
            if isinstance(message, Generate) and row is not None and (
                    row.status in FINISHED) and not self._room("", envelope,
                                                               f"resume {row.name}"):
                return
            self.live[sid] = self.spawn(sid, None)
        self.send(self.subjects.session(sid), msgspec.structs.replace(message, session_id=sid),
                  reply=envelope.reply if envelope else "")

    def _error(self, channel: str, envelope: Envelope | None, error: str, reason: str,
               session_id: str = "") -> None:
        self.reply(envelope, ErrorReply(error=error, reason=reason))
        if channel:
            self.send(self.subjects.channel_out(channel),
                      ChannelMessage(session_id=session_id, kind="error", text=reason))

    def _resolve(self, ref: str) -> str | None:
        """The id of the session ``ref`` names: a stored id, else the name of an active
        session or of one of the ``resumable`` most recently active finished ones."""
        if self.app.session(ref) is not None:
            return ref
        listed = self.list_sessions()
        rows = [r for r in listed if r.name == ref]
        finished = [r.session_id for r in listed if r.status in FINISHED]
        resumable = set(finished[: self.limits.resumable])
        for row in rows:  # most recently active first
            if row.status in ACTIVE or row.session_id in resumable:
                return row.session_id
        return None

    def _room(self, channel: str, envelope: Envelope | None, what: str) -> bool:
        """Whether another session may become active; if not, refuse saying why."""
        rows = {r.session_id: r.status for r in self.list_sessions()}
        active = {sid for sid, status in rows.items() if status in ACTIVE}
        active |= {sid for sid in self.live if sid not in rows}  # not in the view yet
        limit = self.limits.max_sessions
        if len(active) < limit:
            return True
        self._error(channel, envelope, "session_limit", (
            f"cannot {what}: {len(active)} sessions are active and the limit is {limit}. "
            "Finish or kill one (`tether kill NAME`), or raise max_sessions."))
        return False

    def _on_fork(self, message: ForkSession, envelope: Envelope | None) -> None:
        """A new session with the source's history (and TTSR injections) up to an event."""
        source_id = self._resolve(message.session_id)
        source = None if source_id is None else self.app.session(
            source_id, version=message.at_version or None)
        if source is not None and source.version < message.at_version:
            source = None  # the event asked for does not exist (yet)
        if source_id is None or source is None:
            where = f" at event {message.at_version}" if message.at_version else ""
            self._error(message.channel, envelope, "unknown_session",
                        f"no session {message.session_id!r}{where} to fork")
            return
        if not self._room(message.channel, envelope, f"fork {source.name}"):
            return
        sid = self.ids.new()
        names = self._taken_names()
        name = name_from_prompt(f"{source.name} fork", names)
        names.add(name)
        history, fired, only = source.history, source.fired_rules, None
        if message.at_node:
            found = self._node_path(source_id, message.at_node)
            if isinstance(found, str):
                self._error(message.channel, envelope, "tree", found)
                return
            history = found
            fired = self._rules_on_path(source_id, history)
            only = set(fired)
        elif source.pending_tool_calls():  # forked mid-turn: drop the unanswered request
            last = max(i for i, t in enumerate(history) if t.role == "assistant")
            history = history[:last]
        self._copy_rule_log(source_id, sid, before_turn=source.completed_turns, only=only)
        self.live[sid] = started = self.spawn(sid, NewSession(
            name=name, workspace=source.workspace, channel=message.channel,
            # The source's owner keeps it: a fork request says nothing NATS vouched for;
            # and its budget (a lowered one stays lowered).
            budget_usd=source.budget_usd or self.limits.budget_usd, owner=source.owner,
            fork=ForkOf(source_id=source_id, at_version=source.version,
                        history=history, fired_rules=fired)))
        accepted = Accepted(session_id=sid, name=name)
        # Answered by the new session's thread once it has stored itself, so the fork
        # can be read as soon as it is named.
        started[-1].tell(Then(lambda: self.reply(envelope, accepted)))

    def _node_path(self, session_id: str, wanted: str) -> list[Turn] | str:
        """The history of a session standing at node ``wanted`` of ``session_id``'s tree,
        or why there is none."""
        found = self.app.tree(session_id)
        if found is None or not found[0].nodes:
            return f"session {session_id} has no conversation tree yet"
        tree = found[0]
        try:
            return history_at(tree, resolve_node(tree, wanted))
        except (LookupError, ForestError) as exc:
            return str(exc)

    def _rules_on_path(self, source_id: str, history: list[Turn]) -> list[str]:
        """The rules that fired before the point a fork at a node starts from: those
        whose reminders are in ``history`` (a path of the source's tree), and, when the
        path starts from a compaction's summary, every rule that fired before that
        compaction (its reminders are summarized away)."""
        on_path = {b.text for t in history if t.role == "user" for b in t.content
                   if isinstance(b, TextBlock)}
        fired: list[str] = []
        so_far: list[str] = []
        for event in self.app.session_events(source_id):
            if isinstance(event, Session.TtsrInterrupted | Session.TtsrReminderAdded):
                so_far.extend(r for r in event.rules if r not in so_far)
                if event.reminder in on_path:
                    fired.extend(r for r in event.rules if r not in fired)
            elif isinstance(event, Session.HistoryCompacted) and event.summary in on_path:
                fired.extend(r for r in so_far if r not in fired)
        return fired

    def _copy_rule_log(self, source_id: str, target_id: str, before_turn: int,
                       only: set[str] | None = None) -> None:
        """The fork keeps the injections of the turns it copied (``only``: of these rules
        alone), so ``once`` and ``after-gap`` rules count them."""
        source = self.app.rule_log(source_id)
        copied = [(n, t) for n, t in (source.injections if source else [])
                  if t < before_turn and (only is None or n in only)]
        if not copied:
            return
        log = RuleLog(session_id=target_id)
        for name, turn in copied:
            log.trigger(rules=[name], source="fork", offset=0, generation=0, turn=turn)
        self.app.save(log)

    def _on_tick(self) -> None:
        for handles in self.live.values():
            handles[-1].tell(SessionTick())
        self.ticks += 1
        if self.ticks % CLEANUP_EVERY == 0:
            self.clean_up()

    def clean_up(self) -> None:
        """Drop from memory the sessions finished for ``keep_finished`` seconds (their
        actors stop; they stay in the store and resume on their next message)."""
        now = self.clock.now()
        statuses = {r.session_id: r.status for r in self.list_sessions()}
        for sid in list(self.live):
            if statuses.get(sid) not in FINISHED:
                self.finished_since.pop(sid, None)
                continue
            since = self.finished_since.setdefault(sid, now)
            if (now - since).total_seconds() >= self.limits.keep_finished:
                for handle in self.live.pop(sid):
                    self.system.forget(handle)
                del self.finished_since[sid]
                log.info("session %s finished over %g s ago: dropped from memory", sid,
                         self.limits.keep_finished, extra={"session_id": sid})

    def _refuse(
        self, message: UserMessage, refusal: Refusal, size: int, envelope: Envelope | None
    ) -> None:
        """Not stored as a user message, but recorded for the audit trail and answered."""
        self.app.save(RefusedMessage(
            channel=message.channel, user=message.user, kind=refusal.kind,
            reason=refusal.reason, size=size, excerpt=self.redactor.text(message.text[:1000]),
        ))
        self.reply(envelope, ErrorReply(error=refusal.kind, reason=refusal.reason))
        self.send(
            self.subjects.channel_out(message.channel),
            ChannelMessage(session_id=message.session_id, kind="error", text=refusal.reason),
        )

    def _workspace(self, requested: str) -> str | None:
        """The workspace for a new session: the engine's, or a folder inside it."""
        root = os.path.realpath(self.default_workspace)
        if not requested:
            return root
        path = os.path.realpath(os.path.join(root, requested))
        return path if inside(path, root) else None

    def _on_kill(self, message: KillSession, envelope: Envelope | None) -> None:
        sid = message.session_id
        if sid not in self.live:
            sid = self._resolve(sid) or sid  # a name
            message = msgspec.structs.replace(message, session_id=sid)
        if sid not in self.live:
            self.reply(envelope, Killed(session_id=sid, found=False))
            return
        waiting = self.pending_kills.setdefault(sid, [])
        waiting.append(envelope)
        if len(waiting) == 1:
            self.ask_async(
                self.subjects.session(sid), message, Killed, tag=f"kill:{sid}", timeout=5
            )

    def _on_killed(self, result: AskResult) -> None:
        kind, _, sid = result.tag.partition(":")
        if kind != "kill":
            return
        if result.error:
            log.warning("session %s did not confirm its kill (%s); stopping it", sid,
                        result.error, extra={"session_id": sid})
        for handle in self.live.pop(sid, []):
            self.system.forget(handle)
        for envelope in self.pending_kills.pop(sid, []):
            self.reply(envelope, Killed(session_id=sid, found=True))

    def on_stop(self) -> None:
        for handles in self.live.values():
            for handle in handles:
                self.system.forget(handle)
        self.live.clear()
