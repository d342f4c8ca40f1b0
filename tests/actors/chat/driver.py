"""The interaction coordinator's pure core driven by hand: requests, answers and time in,
stored events and messages out.

No actor, bus or store: :class:`Desk` holds the core's state and feeds
:func:`actors.chat.interactions.decide` as the shell would, drawing ids ``i1``, ``i2``...
and moving its own clock. Each feed returns what it decided as plain values.
"""

from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import dataclass, field
from typing import Any

from tether.actors.authority import Approvers
from tether.actors.chat.interactions import (
    Effect,
    NewRequest,
    Reply,
    Send,
    State,
    Tick,
    decide,
)
from tether.events.inbox import RefusedMessage
from tether.events.messages import (
    ApprovalRequest,
    ChannelMessage,
    ChatText,
    InteractionAnswer,
    InteractionSettled,
    PlanAnswer,
    PlanReviewRequest,
    QuestionRequest,
)
from tether.events.subjects import Subjects

NOW = dt.datetime(2026, 11, 28, 12, 0, tzinfo=dt.UTC)
SUBJECTS = Subjects()
SID = "s1"
OWNER = "ana"
CHAT = "test"


@dataclass
class Fed:
    """What one input decided."""

    events: list[Any] = field(default_factory=list)
    effects: list[Effect] = field(default_factory=list)

    def recorded(self, kind: type) -> list[Any]:
        """The events of one class (``Interaction.Answered``...), in order."""
        return [e for e in self.events if isinstance(e, kind)]

    def refusals(self) -> list[RefusedMessage.Refused]:
        return self.recorded(RefusedMessage.Refused)

    def told(self, channel: str = CHAT) -> list[tuple[str, str]]:
        """(kind, text) of each message sent to ``channel``'s chat."""
        return [(e.message.kind, e.message.text) for e in self.effects
                if isinstance(e, Send) and e.subject == SUBJECTS.channel_out(channel)
                and isinstance(e.message, ChannelMessage)]

    def settled(self) -> list[InteractionSettled]:
        """The outcomes sent, each checked to go to its own session's subject."""
        found = [e for e in self.effects if isinstance(e, Send)
                 and isinstance(e.message, InteractionSettled)]
        assert all(e.subject == SUBJECTS.session(e.message.session_id) for e in found)
        return [e.message for e in found]

    def replies(self) -> list[Any]:
        return [e.message for e in self.effects if isinstance(e, Reply)]


class Desk:
    """The coordinator's core, its clock moved by hand."""

    def __init__(self, timeout: float = 300.0, approvers: Approvers | None = None) -> None:
        self.state = State(subjects=SUBJECTS, timeout=timeout, approvers=approvers or {})
        self.now = NOW
        self._ids = itertools.count(1)

    def feed(self, message: Any) -> Fed:
        """Decide ``message`` now; the events are taken as the shell's save would."""
        if isinstance(message, ApprovalRequest | QuestionRequest | PlanReviewRequest):
            message = NewRequest(message, f"i{next(self._ids)}")
        outcome = decide(self.state, message, self.now)
        fed = Fed(events=outcome.events, effects=list(outcome.effects))
        for aggregate in outcome.aggregates:
            aggregate.collect_events()
        return fed

    def advance(self, seconds: float) -> Fed:
        """Move the clock on and tick, as the host does every second."""
        self.now += dt.timedelta(seconds=seconds)
        return self.feed(Tick())

    @property
    def pending(self) -> list[str]:
        return sorted(self.state.pending)

    def outcome(self, interaction_id: str) -> str:
        return self.state.pending[interaction_id].interaction.outcome

    # --- what a session sends -----------------------------------------------------------

    def approval(self, sid: str = SID, call: str = "c1", channel: str = CHAT,
                 owner: str = OWNER, home: str = "") -> Fed:
        return self.feed(ApprovalRequest(
            session_id=sid, call_id=call, tool="run_shell", summary="git push origin main",
            reason="it needs approval by a person (tier 3)", channel=channel, owner=owner,
            home_channel=home))

    def question(self, sid: str = SID, call: str = "q1", channel: str = CHAT,
                 owner: str = OWNER, home: str = "") -> Fed:
        return self.feed(QuestionRequest(
            session_id=sid, call_id=call, question="Which colour?", options=["blue", "red"],
            channel=channel, owner=owner, home_channel=home))

    def plan(self, sid: str = SID, call: str = "p1", channel: str = CHAT,
             owner: str = OWNER, home: str = "") -> Fed:
        return self.feed(PlanReviewRequest(
            session_id=sid, call_id=call, plan="1. write hello.txt", source="file",
            channel=channel, owner=owner, home_channel=home))

    def approve(self, interaction_id: str, user: str = OWNER, sid: str = SID,
                channel: str = CHAT, call: str = "") -> Fed:
        return self.feed(InteractionAnswer(session_id=sid, approved=True, user=user,
                                           interaction_id=interaction_id, call_id=call,
                                           channel=channel))

    def deny(self, words: str, user: str = OWNER, sid: str = SID, channel: str = CHAT,
             call: str = "c1") -> Fed:
        """``/deny WORDS`` as the session sends it: the first word as the id."""
        first, _, why = words.partition(" ")
        return self.feed(InteractionAnswer(session_id=sid, approved=False, user=user,
                                           interaction_id=first, reason=why.strip(),
                                           call_id=call, channel=channel))

    def text(self, text: str, user: str = OWNER, sid: str = SID, channel: str = CHAT) -> Fed:
        return self.feed(ChatText(session_id=sid, channel=channel, text=text, user=user))

    def choose(self, choice: Any, feedback: str = "", user: str = OWNER, sid: str = SID,
               channel: str = CHAT) -> Fed:
        return self.feed(PlanAnswer(session_id=sid, choice=choice, user=user,
                                    feedback=feedback, channel=channel))

