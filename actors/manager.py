"""The session manager actor: finds or creates the actor for every user message.

Bound to ``<ns>.inbox`` (connectors' UserMessages, queue group ``engine``) and
``<ns>.manager`` (list and kill requests). It starts a session's actors on first use,
including sessions recovered from the store after a restart, and forwards each message
over NATS to ``<ns>.session.<id>``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from actors.middleware import Gate, MiddlewareSettings, Refusal
from actors.naming import name_from_prompt
from actors.ports import Clock, Ids, SystemClock
from actors.redact import Redactor
from actors.runtime import ActorHandle, ActorSystem, AskResult, Envelope, TetherActor
from actors.session import NewSession
from events.application import TetherApplication
from events.inbox import RefusedMessage
from events.messages import (
    ChannelMessage,
    ErrorReply,
    Killed,
    KillSession,
    ListSessions,
    SessionList,
    SessionSummary,
    UserMessage,
)

log = logging.getLogger(__name__)

SessionSpawner = Callable[[str, NewSession | None], list[ActorHandle]]
"""Starts the actors of one session (its session actor and TTSR monitor)."""


class SessionManagerActor(TetherActor):
    """Owns the set of live session actors of this process."""

    def __init__(
        self,
        system: ActorSystem,
        *,
        app: TetherApplication,
        spawn: SessionSpawner,
        list_sessions: Callable[[], list[SessionSummary]],
        ids: Ids,
        default_workspace: str,
        gate: Gate | None = None,
        clock: Clock | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        super().__init__(system)
        self.redactor = redactor or Redactor()
        self.gate = gate or Gate(MiddlewareSettings())
        self.clock = clock or SystemClock()
        self.app = app
        self.spawn = spawn
        self.list_sessions = list_sessions
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
        if isinstance(message, UserMessage):
            self._on_user_message(message, envelope)
        elif isinstance(message, ListSessions):
            self.reply(envelope, SessionList(sessions=self.list_sessions()))
        elif isinstance(message, KillSession):
            self._on_kill(message, envelope)
        elif isinstance(message, AskResult):
            self._on_killed(message)

    def _on_user_message(self, message: UserMessage, envelope: Envelope | None) -> None:
        size = envelope.size if envelope is not None else 0
        refusal = self.gate.check(message, size, self.clock.now().timestamp())
        if refusal is not None:
            self._refuse(message, refusal, size, envelope)
            return
        sid = message.session_id
        if sid and sid not in self.live:
            if self.app.session(sid) is None:
                reason = f"no session {sid!r}; leave session_id empty to start a new one"
                self.reply(envelope, ErrorReply(error="unknown_session", reason=reason))
                self.send(
                    self.subjects.channel_out(message.channel),
                    ChannelMessage(session_id=sid, kind="error", text=reason),
                )
                return
            self.live[sid] = self.spawn(sid, None)
        elif not sid:
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
            new = NewSession(name=name, workspace=workspace, channel=message.channel)
            self.live[sid] = self.spawn(sid, new)
        forwarded = UserMessage(
            text=message.text,
            channel=message.channel,
            session_id=sid,
            user=message.user,
            workspace=message.workspace,
        )
        # The session answers the original requester (Accepted) once the message is stored.
        self.send(self.subjects.session(sid), forwarded, reply=envelope.reply if envelope else "")

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
        return path if path == root or path.startswith(root + os.sep) else None

    def _on_kill(self, message: KillSession, envelope: Envelope | None) -> None:
        sid = message.session_id
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
                        result.error)
        for handle in self.live.pop(sid, []):
            self.system.forget(handle)
        for envelope in self.pending_kills.pop(sid, []):
            self.reply(envelope, Killed(session_id=sid, found=True))

    def on_stop(self) -> None:
        for handles in self.live.values():
            for handle in handles:
                self.system.forget(handle)
        self.live.clear()
