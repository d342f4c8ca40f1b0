"""The interaction coordinator actor: asks a session's chat to approve a tool call.

Bound to ``<ns>.interactions``. An ApprovalRequest opens an Interaction (stored), tells
the chat what is asked and how to answer (``/approve ID`` or ``/deny ID why``; any other
text rejects it, with the text as the reason), and is answered with an ApprovalResult
when the first answer comes. No answer within the timeout is a deny. Time is the injected
clock; the host sends :class:`Tick` every second (tests send it after moving the clock).
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import msgspec

from actors.ports import Clock, Ids
from actors.runtime import ActorSystem, Envelope, TetherActor
from events.application import TetherApplication
from events.interactions import Interaction
from events.messages import (
    ApprovalRequest,
    ApprovalResult,
    CancelInteractions,
    ChannelMessage,
    InteractionAnswer,
)

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 300.0


class Tick(msgspec.Struct):
    """Time passed: look for interactions that expired."""


class _Pending:
    def __init__(self, interaction: Interaction, request: ApprovalRequest,
                 envelope: Envelope | None, deadline: dt.datetime) -> None:
        self.interaction = interaction
        self.request = request
        self.envelope = envelope
        self.deadline = deadline


class InteractionCoordinatorActor(TetherActor):
    """Pending approvals, per session, first answer wins."""

    def __init__(
        self,
        system: ActorSystem,
        *,
        app: TetherApplication,
        clock: Clock,
        ids: Ids,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        super().__init__(system)
        self.app = app
        self.clock = clock
        self.ids = ids
        self.timeout = timeout
        self.pending: dict[str, _Pending] = {}

    def handle(self, message: Any, envelope: Envelope | None) -> None:
        if isinstance(message, ApprovalRequest):
            self._open(message, envelope)
        elif isinstance(message, InteractionAnswer):
            self._answer(message)
        elif isinstance(message, CancelInteractions):
            self._cancel(message)
        self._expire()

    def _open(self, request: ApprovalRequest, envelope: Envelope | None) -> None:
        interaction_id = self.ids.new()[:8]
        deadline = self.clock.now() + dt.timedelta(seconds=self.timeout)
        interaction = Interaction(
            interaction_id=interaction_id, session_id=request.session_id,
            call_id=request.call_id, tool=request.tool, summary=request.summary,
            reason=request.reason, channel=request.channel, deadline=deadline.isoformat(),
        )
        self.app.save(interaction)
        self.pending[interaction_id] = _Pending(interaction, request, envelope, deadline)
        self._tell(request, (
            f"approval {interaction_id}: may I run {request.tool} {request.summary}? "
            f"({request.reason}) Reply /approve {interaction_id} or /deny {interaction_id} "
            f"[why]; any other message says no. No answer in {self.timeout:g} s is a no."
        ))

    def _answer(self, answer: InteractionAnswer) -> None:
        mine = {i: p for i, p in self.pending.items()
                if p.request.session_id == answer.session_id}
        chosen = answer.interaction_id if answer.interaction_id in mine else None
        if chosen is None and answer.interaction_id and answer.approved:
            # An approval must name what it approves: a wrong or expired id approves nothing.
            self._tell_session(answer, f"no pending approval {answer.interaction_id!r}; "
                                       "nothing was approved")
            return
        if chosen is None:
            if answer.interaction_id:  # "/deny not now": the first word was part of the why
                answer = msgspec.structs.replace(
                    answer, reason=f"{answer.interaction_id} {answer.reason}".strip())
            chosen = next((i for i, p in mine.items()
                           if answer.call_id and p.request.call_id == answer.call_id), None)
        if chosen is None:
            self._tell_session(answer, "nothing is waiting for approval")
            return
        interaction_id, pending = chosen, mine[chosen]
        reason = answer.reason or ("approved" if answer.approved else "denied")
        by = answer.user
        pending.interaction.answer(approved=answer.approved, by=by, reason=reason)
        verdict = "approved" if answer.approved else "denied"
        self._settle(interaction_id, ApprovalResult(
            call_id=pending.request.call_id, approved=answer.approved, by=by,
            reason=f"{verdict} by {by}: {reason}",
        ))
        self._tell(pending.request, f"approval {interaction_id}: {verdict} by {by}")

    def _cancel(self, message: CancelInteractions) -> None:
        for interaction_id, pending in list(self.pending.items()):
            if pending.request.session_id == message.session_id:
                pending.interaction.cancel(reason=message.reason)
                self._settle(interaction_id, ApprovalResult(
                    call_id=pending.request.call_id, approved=False, by="tether",
                    reason=f"cancelled: {message.reason}",
                ))
                self._tell(pending.request, f"approval {interaction_id} was cancelled: "
                                            f"{message.reason}")

    def _expire(self) -> None:
        now = self.clock.now()
        for interaction_id, pending in list(self.pending.items()):
            if now >= pending.deadline:
                pending.interaction.expire()
                self._settle(interaction_id, ApprovalResult(
                    call_id=pending.request.call_id, approved=False, by="timeout",
                    reason=f"no answer within {self.timeout:g} s",
                ))
                self._tell(pending.request, f"approval {interaction_id} expired: no answer "
                                            f"within {self.timeout:g} s, so no")

    def _settle(self, interaction_id: str, result: ApprovalResult) -> None:
        pending = self.pending.pop(interaction_id)
        self.app.save(pending.interaction)
        self.reply(pending.envelope, result)

    def _tell_session(self, answer: InteractionAnswer, text: str) -> None:
        known = next((p.request for p in self.pending.values()
                      if p.request.session_id == answer.session_id), None)
        if known is not None:
            self._tell(known, text)
        else:
            log.info("session %s: %s", answer.session_id, text)

    def _tell(self, request: ApprovalRequest, text: str) -> None:
        self.send(self.subjects.channel_out(request.channel),
                  ChannelMessage(session_id=request.session_id, kind="approval", text=text))
