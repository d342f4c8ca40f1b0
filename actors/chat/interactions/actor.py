"""The interaction coordinator actor: the shell around the coordinator's pure core.

Bound to ``<ns>.interactions``. It draws a new interaction's id, feeds each message to
:func:`actors.chat.interactions.decide` with the injected clock's time, saves what the
decision recorded in one save, then sends its messages and its reply. The host tells it
:class:`Tick` every second, so deadlines pass without other traffic.
"""

from __future__ import annotations

from typing import Any

from tether.actors.authority import Approvers
from tether.actors.chat.interactions.decide import decide
from tether.actors.chat.interactions.state import (
    DEFAULT_TIMEOUT,
    NewRequest,
    Reply,
    Send,
    State,
)
from tether.actors.ports import Clock, Ids
from tether.actors.runtime import ActorSystem, Envelope, TetherActor
from tether.events.application import TetherApplication
from tether.events.messages import ApprovalRequest, PlanReviewRequest, QuestionRequest


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
        self.state = State(subjects=self.subjects, timeout=timeout,
                           approvers=approvers or {})

    def handle(self, message: Any, envelope: Envelope | None) -> None:
        # Requests come from this process's sessions and answers through them (the
        # manager authenticated who typed them): from the bus, where anyone may publish on
        # a bus without credentials, nothing is taken.
        if self.refused_from_the_bus(message, envelope):
            return
        if isinstance(message, ApprovalRequest | QuestionRequest | PlanReviewRequest):
            message = NewRequest(message, self.ids.new()[:8])
        outcome = decide(self.state, message, self.clock.now())
        if outcome.aggregates:
            self.app.save(*outcome.aggregates)
        for effect in outcome.effects:
            match effect:
                case Send():
                    self.send(effect.subject, effect.message)
                case Reply():
                    self.reply(envelope, effect.message)
