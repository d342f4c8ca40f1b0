"""The coordinator's pure core: ``decide(state, input, now)`` opens, answers, refuses,
cancels and expires interactions, recording on their aggregates and listing the messages
for the shell to send.

No clock, bus, thread or file is touched here: time comes in as ``now`` (every input ends
with the interactions whose deadline it reached expiring), and a new interaction's id
comes in with its request (:class:`NewRequest`).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

import msgspec
from eventsourcing.domain import Aggregate

from tether.actors.authority import may_decide, refusal_reason
from tether.actors.chat.interactions import texts
from tether.actors.chat.interactions.state import (
    PRIORITY,
    Effect,
    Kind,
    NewRequest,
    Outcome,
    Reply,
    Request,
    Send,
    State,
    Waiting,
)
from tether.actors.engine_tools import read_plan_reply
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
    QuestionRequest,
)

log = logging.getLogger("tether.actors.chat.interactions")

__all__ = ["decide"]


def decide(state: State, message: Any, now: dt.datetime) -> Outcome:
    """What ``message`` changes at ``now``: ``state.pending`` is changed in place, the
    aggregates holding new events and the effects are returned. Any input, :class:`Tick`
    included, then expires what is due at ``now``."""
    step = _Step(state, now)
    match message:
        case NewRequest():
            _open(step, message.request, message.interaction_id)
        case InteractionAnswer():
            _answer(step, message)
        case PlanAnswer():
            _plan_answer(step, message)
        case ChatText():
            _text(step, message)
        case CancelInteractions():
            _cancel(step, message)
    _expire(step)
    return Outcome(step.aggregates, step.effects)


class _Step:
    """One decision in progress: what it records and what it asks to be done."""

    def __init__(self, state: State, now: dt.datetime) -> None:
        self.state = state
        self.now = now
        self.pending = state.pending
        self.aggregates: list[Aggregate] = []
        self.effects: list[Effect] = []

    def record(self, aggregate: Aggregate) -> None:
        if not any(a is aggregate for a in self.aggregates):
            self.aggregates.append(aggregate)

    def tell(self, request: Request, text: str, kind: str = "approval") -> None:
        """A notice to the chat ``request`` was asked in (kind approval, question, plan)."""
        self.effects.append(Send(
            self.state.subjects.channel_out(request.channel),
            ChannelMessage(session_id=request.session_id, kind=texts.NOTICE[kind], text=text)))

    def error(self, channel: str, session_id: str, text: str) -> None:
        self.effects.append(Send(self.state.subjects.channel_out(channel), ChannelMessage(
            session_id=session_id, kind="error", text=text)))

    def tell_session(self, session_id: str, text: str) -> None:
        """Tell the chat of one of the session's pending interactions (as an approval
        notice); with none pending, only the log hears it."""
        known = next((w.request for w in self.pending.values()
                      if w.request.session_id == session_id), None)
        if known is not None:
            self.tell(known, text)
        else:
            log.info("session %s: %s", session_id, text)

    def first(self, wanted: Callable[[Waiting], bool]) -> str | None:
        """The id of the pending interaction ``wanted`` accepts that comes first by kind
        (approval, question, plan review), then by age."""
        candidates = [(PRIORITY[w.kind], w.order, i) for i, w in self.pending.items()
                      if wanted(w)]
        return min(candidates)[2] if candidates else None

    def may(self, user: str, waiting: Waiting) -> bool:
        request = waiting.request
        return may_decide(user, request.owner, request.home_channel or request.channel,
                          self.state.approvers)


# --- opening ----------------------------------------------------------------------------


def _open(step: _Step, request: Request, interaction_id: str) -> None:
    """Store the interaction, acknowledge it, and put it to the chat."""
    timeout = step.state.timeout
    kind: Kind
    if isinstance(request, ApprovalRequest):
        kind, tool, summary, reason, text = (
            "approval", request.tool, request.summary, request.reason, "")
    elif isinstance(request, QuestionRequest):
        kind, tool, summary, reason, text = (
            "question", "AskUserQuestion", request.question[:200], "", request.question)
    else:
        kind, tool, summary, reason, text = (
            "plan_review", "ExitPlanMode", request.plan[:200], request.source, request.plan)
    deadline = None if kind == "plan_review" else step.now + dt.timedelta(seconds=timeout)
    interaction = Interaction(
        interaction_id=interaction_id, session_id=request.session_id,
        call_id=request.call_id, tool=tool, summary=summary, reason=reason,
        channel=request.channel, deadline=deadline.isoformat() if deadline else "",
        kind=kind, text=text,
    )
    step.record(interaction)
    step.pending[interaction_id] = Waiting(interaction, request, kind, step.state.opened,
                                           deadline)
    step.state.opened += 1
    step.effects.append(Reply(InteractionOpened(interaction_id=interaction_id,
                                                call_id=request.call_id)))
    step.tell(request, texts.prompt(request, interaction_id, timeout), kind)


# --- answers ----------------------------------------------------------------------------


def _answer(step: _Step, answer: InteractionAnswer) -> None:
    """/approve or /deny, for the session's pending approval."""
    mine = {i: w for i, w in step.pending.items()
            if w.request.session_id == answer.session_id and w.kind == "approval"}
    chosen = answer.interaction_id if answer.interaction_id in mine else None
    if chosen is None and answer.interaction_id and answer.approved:
        # An approval must name what it approves: a wrong or expired id approves nothing.
        step.tell_session(answer.session_id, f"no pending approval "
                                             f"{answer.interaction_id!r}; nothing was "
                                             "approved")
        return
    if chosen is None:
        if answer.interaction_id:  # "/deny not now": the first word was part of the why
            answer = msgspec.structs.replace(
                answer, reason=f"{answer.interaction_id} {answer.reason}".strip())
        chosen = next((i for i, w in mine.items()
                       if answer.call_id and w.request.call_id == answer.call_id), None)
    if chosen is None:
        step.tell_session(answer.session_id, "nothing is waiting for approval")
        return
    if _refused(step, chosen, answer.user, answer.channel, "approve or deny the calls of",
                f"/{'approve' if answer.approved else 'deny'} {chosen} "
                f"{answer.reason}".strip()):
        return
    _approve(step, chosen, answer.approved, answer.user, answer.reason)


def _approve(step: _Step, interaction_id: str, approved: bool, by: str, why: str) -> None:
    waiting = step.pending[interaction_id]
    reason = why or ("approved" if approved else "denied")
    verdict = "approved" if approved else "denied"
    waiting.interaction.answer(approved=approved, by=by, reason=reason)
    _settle(step, interaction_id, verdict, by, f"{verdict} by {by}: {reason}")
    step.tell(waiting.request, f"approval {interaction_id}: {verdict} by {by}")


def _plan_answer(step: _Step, answer: PlanAnswer) -> None:
    """/proceed, /clean, /default or /adjust, for the session's pending plan review."""
    chosen = step.first(lambda w: w.request.session_id == answer.session_id
                        and w.kind == "plan_review")
    if chosen is None:
        step.tell_session(answer.session_id, "no plan is waiting for review")
        return
    if _refused(step, chosen, answer.user, answer.channel, "review the plans of",
                f"/{answer.choice} {answer.feedback}".strip()):
        return
    _choose(step, chosen, answer.choice, answer.feedback, answer.user)


def _choose(step: _Step, interaction_id: str, choice: str, feedback: str, by: str) -> None:
    waiting = step.pending[interaction_id]
    waiting.interaction.choose(choice=choice, feedback=feedback, by=by)
    _settle(step, interaction_id, choice, by, f"{choice} chosen by {by}", answer=feedback)
    step.tell(waiting.request, f"plan {interaction_id}: {texts.CHOSEN[choice]} ({by})",
              "plan_review")


def _text(step: _Step, message: ChatText) -> None:
    """Plain text: the chat's approvals first, then its questions, then its plan
    reviews; when the chat has none, the sending session's own."""
    def mine(w: Waiting) -> bool:
        return step.may(message.user, w)

    chosen = step.first(lambda w: w.request.channel == message.channel and mine(w)) \
        or step.first(lambda w: w.request.session_id == message.session_id and mine(w))
    if chosen is None:
        asked = step.first(lambda w: w.request.session_id == message.session_id)
        if asked is not None:  # there is something to answer, but not for this sender
            _refused(step, asked, message.user, message.channel,
                     texts.ANSWER[step.pending[asked].kind], message.text)
            return
        # It was settled (or expired) while the text was on its way.
        step.error(message.channel, message.session_id, texts.TOO_LATE)
        return
    waiting = step.pending[chosen]
    if waiting.kind == "approval":
        _approve(step, chosen, False, message.user, message.text)
    elif waiting.kind == "question":
        waiting.interaction.reply(answer=message.text, by=message.user)
        _settle(step, chosen, "answered", message.user, f"answered by {message.user}",
                answer=message.text)
        step.tell(waiting.request, f"question {chosen}: answered by {message.user}",
                  "question")
    else:
        choice, feedback = read_plan_reply(message.text)
        _choose(step, chosen, choice, feedback, message.user)


def _refused(step: _Step, interaction_id: str, user: str, channel: str, what: str,
             text: str) -> bool:
    """Whether ``user`` may not decide ``interaction_id``; if not, the refusal is
    recorded and told to ``channel`` (the answer's chat)."""
    waiting = step.pending[interaction_id]
    if step.may(user, waiting):
        return False
    reason = refusal_reason(user, what, waiting.request.session_id)
    log.warning("interaction %s: %s", interaction_id, reason)
    step.record(RefusedMessage(channel=channel or waiting.request.channel, user=user,
                               kind="not_approver", reason=reason,
                               size=len(text.encode()), excerpt=text))
    if channel:
        step.error(channel, waiting.request.session_id, reason)
    return True


# --- endings ----------------------------------------------------------------------------


def _cancel(step: _Step, message: CancelInteractions) -> None:
    """The session failed or was killed: every interaction it waits on is cancelled."""
    for interaction_id, waiting in list(step.pending.items()):
        if waiting.request.session_id == message.session_id:
            waiting.interaction.cancel(reason=message.reason)
            _settle(step, interaction_id, "cancelled", "tether",
                    f"cancelled: {message.reason}")
            step.tell(waiting.request, f"{texts.NOTICE[waiting.kind]} {interaction_id} was "
                                       f"cancelled: {message.reason}", waiting.kind)


def _expire(step: _Step) -> None:
    """Approvals and questions whose deadline ``now`` reached: a no."""
    timeout = step.state.timeout
    for interaction_id, waiting in list(step.pending.items()):
        if waiting.deadline is not None and step.now >= waiting.deadline:
            waiting.interaction.expire()
            _settle(step, interaction_id, "expired", "timeout",
                    f"no answer within {timeout:g} s")
            step.tell(waiting.request, f"{texts.NOTICE[waiting.kind]} {interaction_id} "
                                       f"expired: no answer within {timeout:g} s, so no",
                      waiting.kind)


def _settle(step: _Step, interaction_id: str, outcome: Any, by: str, reason: str,
            answer: str = "") -> None:
    """No longer pending: record its ending and tell the session the outcome."""
    waiting = step.pending.pop(interaction_id)
    step.record(waiting.interaction)
    request = waiting.request
    step.effects.append(Send(step.state.subjects.session(request.session_id),
                             InteractionSettled(
        session_id=request.session_id, call_id=request.call_id,
        interaction_id=interaction_id, kind=waiting.kind,
        outcome=outcome, by=by, reason=reason, answer=answer,
    )))
