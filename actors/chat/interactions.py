"""The interaction coordinator actor: what a session asks of its chat, and the answers.

Bound to ``<ns>.interactions``. Three kinds of request open an Interaction (stored) and
are acknowledged with InteractionOpened: an approval of a tool call, a question from the
model, a plan review. The chat is told what is asked and how to answer; the first answer
settles it, and the session hears the outcome as InteractionSettled on its own subject.

Plain text in a chat goes to the chat's pending approvals first (a no, the text being the
reason), then to its questions (the answer), then to its plan reviews (feedback: approving
a plan takes /proceed, /clean or /default). Approvals and questions not answered within
the timeout are a no; plan reviews wait. Time is the injected clock; the host sends
:class:`Tick` every second.

Only the session's owner and the approvers named for its home channel (the one it was
started on; :mod:`actors.authority`) may answer: anyone else's answer or text is refused,
recorded as a RefusedMessage (``tether audit --refused``) and told to the chat it came
from; what was asked stays pending.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
from typing import Any

import msgspec

from tether.actors.authority import Approvers, may_decide, refusal_reason
from tether.actors.engine_tools import read_plan_reply
from tether.actors.ports import Clock, Ids
from tether.actors.runtime import ActorSystem, Envelope, TetherActor, Tick
from tether.events.application import TetherApplication
from tether.events.inbox import RefusedMessage
from tether.events.interactions import Interaction
from tether.events.messages import (
    ApprovalRequest,
    CancelInteractions,
    ChannelMessage,
    ChatText,
    InteractionAnswer,
    InteractionOpened,
    InteractionSettled,
    PlanAnswer,
    PlanReviewRequest,
    QuestionRequest,
)

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 300.0
PRIORITY = {"approval": 0, "question": 1, "plan_review": 2}
"""Which pending interaction of a chat plain text goes to first."""

Request = ApprovalRequest | QuestionRequest | PlanReviewRequest

__all__ = ["InteractionCoordinatorActor", "Tick"]


class _Pending:
    def __init__(self, interaction: Interaction, request: Request, kind: str, order: int,
                 deadline: dt.datetime | None) -> None:
        self.interaction = interaction
        self.request = request
        self.kind = kind
        self.order = order
        self.deadline = deadline


class InteractionCoordinatorActor(TetherActor):
    """Pending approvals, questions and plan reviews, per chat; first answer wins."""

    def __init__(
        self,
        system: ActorSystem,
        *,
        app: TetherApplication,
        clock: Clock,
        ids: Ids,
        timeout: float = DEFAULT_TIMEOUT,
        approvers: Approvers | None = None,
    ) -> None:
        super().__init__(system)
        self.app = app
        self.clock = clock
        self.ids = ids
        self.timeout = timeout
        self.approvers: Approvers = approvers or {}
        self.pending: dict[str, _Pending] = {}
        self._order = itertools.count()

    def handle(self, message: Any, envelope: Envelope | None) -> None:
        if isinstance(message, ApprovalRequest | QuestionRequest | PlanReviewRequest):
            self._open(message, envelope)
        elif isinstance(message, InteractionAnswer):
            self._answer(message)
        elif isinstance(message, PlanAnswer):
            self._plan_answer(message)
        elif isinstance(message, ChatText):
            self._text(message)
        elif isinstance(message, CancelInteractions):
            self._cancel(message)
        self._expire()

    # --- opening ------------------------------------------------------------------------

    def _open(self, request: Request, envelope: Envelope | None) -> None:
        interaction_id = self.ids.new()[:8]
        now = self.clock.now()
        if isinstance(request, ApprovalRequest):
            kind, tool, summary, reason, text = (
                "approval", request.tool, request.summary, request.reason, "")
            prompt = (
                f"approval {interaction_id}: may I run {request.tool} {request.summary}? "
                f"({request.reason}) Reply /approve {interaction_id} or /deny "
                f"{interaction_id} [why]; any other message says no. No answer in "
                f"{self.timeout:g} s is a no."
            )
        elif isinstance(request, QuestionRequest):
            kind, tool, summary, reason, text = (
                "question", "AskUserQuestion", request.question[:200], "", request.question)
            options = "".join(f"\n  - {o}" for o in request.options)
            prompt = (f"question {interaction_id}: {request.question}{options}\nReply with "
                      f"your answer (no answer in {self.timeout:g} s counts as none).")
        else:
            kind, tool, summary, reason, text = (
                "plan_review", "ExitPlanMode", request.plan[:200], request.source,
                request.plan)
            prompt = (f"plan {interaction_id} is ready for review:\n\n{request.plan}\n\n"
                      "Reply /proceed to implement it, /clean to implement it with a fresh "
                      "context, /default to implement it with every escalated call asked, "
                      "or /adjust (or any other text) with what to change.")
        deadline = None if kind == "plan_review" else now + dt.timedelta(seconds=self.timeout)
        interaction = Interaction(
            interaction_id=interaction_id, session_id=request.session_id,
            call_id=request.call_id, tool=tool, summary=summary, reason=reason,
            channel=request.channel, deadline=deadline.isoformat() if deadline else "",
            kind=kind, text=text,
        )
        self.app.save(interaction)
        self.pending[interaction_id] = _Pending(interaction, request, kind,
                                                next(self._order), deadline)
        self.reply(envelope, InteractionOpened(interaction_id=interaction_id,
                                               call_id=request.call_id))
        self._tell(request, prompt, "approval" if kind == "approval" else kind)

    # --- answers ------------------------------------------------------------------------

    def _answer(self, answer: InteractionAnswer) -> None:
        """/approve or /deny, for the session's pending approval."""
        mine = {i: p for i, p in self.pending.items()
                if p.request.session_id == answer.session_id and p.kind == "approval"}
        chosen = answer.interaction_id if answer.interaction_id in mine else None
        if chosen is None and answer.interaction_id and answer.approved:
            # An approval must name what it approves: a wrong or expired id approves nothing.
            self._tell_session(answer.session_id, f"no pending approval "
                                                  f"{answer.interaction_id!r}; nothing was "
                                                  "approved")
            return
        if chosen is None:
            if answer.interaction_id:  # "/deny not now": the first word was part of the why
                answer = msgspec.structs.replace(
                    answer, reason=f"{answer.interaction_id} {answer.reason}".strip())
            chosen = next((i for i, p in mine.items()
                           if answer.call_id and p.request.call_id == answer.call_id), None)
        if chosen is None:
            self._tell_session(answer.session_id, "nothing is waiting for approval")
            return
        if self._refused(chosen, answer.user, answer.channel, "approve or deny the calls of",
                         f"/{'approve' if answer.approved else 'deny'} {chosen} "
                         f"{answer.reason}".strip()):
            return
        self._decide(chosen, answer.approved, answer.user, answer.reason)

    def _decide(self, interaction_id: str, approved: bool, by: str, why: str) -> None:
        pending = self.pending[interaction_id]
        reason = why or ("approved" if approved else "denied")
        verdict = "approved" if approved else "denied"
        pending.interaction.answer(approved=approved, by=by, reason=reason)
        self._settle(interaction_id, verdict, by, f"{verdict} by {by}: {reason}")
        self._tell(pending.request, f"approval {interaction_id}: {verdict} by {by}")

    def _plan_answer(self, answer: PlanAnswer) -> None:
        chosen = self._first(lambda p: p.request.session_id == answer.session_id
                             and p.kind == "plan_review")
        if chosen is None:
            self._tell_session(answer.session_id, "no plan is waiting for review")
            return
        if self._refused(chosen, answer.user, answer.channel, "review the plans of",
                         f"/{answer.choice} {answer.feedback}".strip()):
            return
        self._choose(chosen, answer.choice, answer.feedback, answer.user)

    def _choose(self, interaction_id: str, choice: str, feedback: str, by: str) -> None:
        pending = self.pending[interaction_id]
        pending.interaction.choose(choice=choice, feedback=feedback, by=by)
        self._settle(interaction_id, choice, by, f"{choice} chosen by {by}", answer=feedback)
        said = {"proceed": "proceed", "clean_proceed": "proceed with a fresh context",
                "default": "proceed in the default mode", "adjust": "adjust"}[choice]
        self._tell(pending.request, f"plan {interaction_id}: {said} ({by})", "plan_review")

    def _text(self, message: ChatText) -> None:
        """Plain text: the chat's approvals first, then its questions, then its plan
        reviews; when the chat has none, the sending session's own."""
        def mine(p: _Pending) -> bool:
            return self._may(message.user, p)

        chosen = self._first(lambda p: p.request.channel == message.channel and mine(p)) \
            or self._first(lambda p: p.request.session_id == message.session_id and mine(p))
        if chosen is None:
            asked = self._first(lambda p: p.request.session_id == message.session_id)
            if asked is not None:  # there is something to answer, but not for this sender
                what = {"approval": "answer the approvals of",
                        "question": "answer the questions of",
                        "plan_review": "review the plans of"}[self.pending[asked].kind]
                self._refused(asked, message.user, message.channel, what, message.text)
                return
        if chosen is None:  # it was settled (or expired) while the text was on its way
            self.send(self.subjects.channel_out(message.channel), ChannelMessage(
                session_id=message.session_id, kind="error",
                text="nothing was waiting for an answer any more, so your message was not "
                     "used; send it again"))
            return
        pending = self.pending[chosen]
        if pending.kind == "approval":
            self._decide(chosen, False, message.user, message.text)
        elif pending.kind == "question":
            pending.interaction.reply(answer=message.text, by=message.user)
            self._settle(chosen, "answered", message.user, f"answered by {message.user}",
                         answer=message.text)
            self._tell(pending.request, f"question {chosen}: answered by {message.user}",
                       "question")
        else:
            choice, feedback = read_plan_reply(message.text)
            self._choose(chosen, choice, feedback, message.user)

    def _may(self, user: str, pending: _Pending) -> bool:
        request = pending.request
        return may_decide(user, request.owner, request.home_channel or request.channel,
                          self.approvers)

    def _refused(self, interaction_id: str, user: str, channel: str, what: str,
                 text: str) -> bool:
        """Whether ``user`` may not decide ``interaction_id``; if not, the refusal is
        recorded and told to ``channel`` (the answer's chat)."""
        pending = self.pending[interaction_id]
        if self._may(user, pending):
            return False
        reason = refusal_reason(user, what, pending.request.session_id)
        log.warning("interaction %s: %s", interaction_id, reason)
        self.app.save(RefusedMessage(channel=channel or pending.request.channel, user=user,
                                     kind="not_approver", reason=reason,
                                     size=len(text.encode()), excerpt=text))
        if channel:
            self.send(self.subjects.channel_out(channel), ChannelMessage(
                session_id=pending.request.session_id, kind="error", text=reason))
        return True

    def _first(self, wanted: Any) -> str | None:
        """The id of the pending interaction ``wanted`` accepts that comes first by kind
        (approval, question, plan review), then by age."""
        candidates = [(PRIORITY[p.kind], p.order, i) for i, p in self.pending.items()
                      if wanted(p)]
        return min(candidates)[2] if candidates else None

    # --- endings ------------------------------------------------------------------------

    def _cancel(self, message: CancelInteractions) -> None:
        for interaction_id, pending in list(self.pending.items()):
            if pending.request.session_id == message.session_id:
                pending.interaction.cancel(reason=message.reason)
                self._settle(interaction_id, "cancelled", "tether",
                             f"cancelled: {message.reason}")
                self._tell(pending.request, f"{_noun(pending.kind)} {interaction_id} was "
                                            f"cancelled: {message.reason}", pending.kind)

    def _expire(self) -> None:
        now = self.clock.now()
        for interaction_id, pending in list(self.pending.items()):
            if pending.deadline is not None and now >= pending.deadline:
                pending.interaction.expire()
                self._settle(interaction_id, "expired", "timeout",
                             f"no answer within {self.timeout:g} s")
                self._tell(pending.request, f"{_noun(pending.kind)} {interaction_id} expired: "
                                            f"no answer within {self.timeout:g} s, so no",
                           pending.kind)

    def _settle(self, interaction_id: str, outcome: Any, by: str, reason: str,
                answer: str = "") -> None:
        pending = self.pending.pop(interaction_id)
        self.app.save(pending.interaction)
        request = pending.request
        self.send(self.subjects.session(request.session_id), InteractionSettled(
            session_id=request.session_id, call_id=request.call_id,
            interaction_id=interaction_id, kind=pending.kind,  # type: ignore[arg-type]
            outcome=outcome, by=by, reason=reason, answer=answer,
        ))

    # --- telling the chat ---------------------------------------------------------------

    def _tell_session(self, session_id: str, text: str) -> None:
        known = next((p.request for p in self.pending.values()
                      if p.request.session_id == session_id), None)
        if known is not None:
            self._tell(known, text)
        else:
            log.info("session %s: %s", session_id, text)

    def _tell(self, request: Request, text: str, kind: str = "approval") -> None:
        notice: Any = {"plan_review": "plan"}.get(kind, kind)
        self.send(self.subjects.channel_out(request.channel),
                  ChannelMessage(session_id=request.session_id, kind=notice, text=text))


def _noun(kind: str) -> str:
    return {"plan_review": "plan"}.get(kind, kind)
