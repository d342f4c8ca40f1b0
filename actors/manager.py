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

from actors.naming import name_from_prompt
from actors.ports import Ids
from actors.runtime import ActorHandle, ActorSystem, AskResult, Envelope, TetherActor
from actors.session import NewSession
from events.application import TetherApplication
from events.messages import (
    Accepted,
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
    ) -> None:
        super().__init__(system)
        self.app = app
        self.spawn = spawn
        self.list_sessions = list_sessions
        self.ids = ids
        self.default_workspace = default_workspace
        self.live: dict[str, list[ActorHandle]] = {}
        self.names: set[str] = set()
        self.pending_kills: dict[str, Envelope | None] = {}

    def recover(self) -> None:
        self.names = {s.name for s in self.list_sessions()}

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
            sid = self.ids.new()
            workspace = message.workspace or self.default_workspace
            name = name_from_prompt(message.text, self.names)
            self.names.add(name)
            new = NewSession(
                name=name, workspace=os.path.abspath(workspace), channel=message.channel
            )
            self.live[sid] = self.spawn(sid, new)
        forwarded = UserMessage(
            text=message.text,
            channel=message.channel,
            session_id=sid,
            user=message.user,
            workspace=message.workspace,
        )
        self.send(self.subjects.session(sid), forwarded)
        self.reply(envelope, Accepted(session_id=sid))

    def _on_kill(self, message: KillSession, envelope: Envelope | None) -> None:
        sid = message.session_id
        if sid not in self.live:
            self.reply(envelope, Killed(session_id=sid, found=False))
            return
        self.pending_kills[sid] = envelope
        self.ask_async(self.subjects.session(sid), message, Killed, tag=f"kill:{sid}", timeout=5)

    def _on_killed(self, result: AskResult) -> None:
        kind, _, sid = result.tag.partition(":")
        if kind != "kill":
            return
        envelope = self.pending_kills.pop(sid, None)
        for handle in self.live.pop(sid, []):
            self.system.forget(handle)
        self.reply(envelope, Killed(session_id=sid, found=True))

    def on_stop(self) -> None:
        for handles in self.live.values():
            for handle in handles:
                self.system.forget(handle)
        self.live.clear()
