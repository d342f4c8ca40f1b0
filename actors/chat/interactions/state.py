"""What the coordinator's core decides over, and what a decision gives back.

:class:`State` is every interaction still waiting for an answer, with the settings that
shape the decisions (the timeout, the approvers, the subjects). A decision
(:func:`actors.chat.interactions.decide`) changes it in place and returns an
:class:`Outcome`: the aggregates holding new events (saved together, first) and the
effects for the shell to perform, in order.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from tether.actors import core
from tether.actors.authority import Approvers
from tether.actors.core import Reply, Send
from tether.events.interactions import Interaction
from tether.events.messages import ApprovalRequest, PlanReviewRequest, QuestionRequest
from tether.events.subjects import Subjects

DEFAULT_TIMEOUT = 300.0
"""Seconds an approval or a question waits before it counts as a no."""

Kind = Literal["approval", "question", "plan_review"]
Request = ApprovalRequest | QuestionRequest | PlanReviewRequest

PRIORITY: dict[str, int] = {"approval": 0, "question": 1, "plan_review": 2}
"""Which pending interaction of a chat plain text goes to first."""


@dataclass
class Waiting:
    """One interaction put to a chat and not settled yet."""

    interaction: Interaction
    request: Request
    kind: Kind
    order: int
    """Its place among those opened (older first, after the kind's priority)."""
    deadline: dt.datetime | None
    """When no answer makes it a no; None: it waits (plan reviews)."""


@dataclass
class State:
    """The coordinator's pending interactions, by id, and its settings."""

    subjects: Subjects
    timeout: float = DEFAULT_TIMEOUT
    approvers: Approvers = field(default_factory=dict)
    pending: dict[str, Waiting] = field(default_factory=dict)
    opened: int = 0
    """How many interactions were opened (the next one's ``order``)."""


class NewRequest(msgspec.Struct, frozen=True):
    """Input: open ``request`` as ``interaction_id`` (the shell draws the id)."""

    request: Request
    interaction_id: str


Effect = Send | Reply


Outcome = core.Outcome[Effect]
"""What one input decided: the Interaction and RefusedMessage aggregates holding new
events, and the effects (:class:`actors.core.Outcome`)."""
