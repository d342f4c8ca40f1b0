"""The interaction coordinator: what a session asks of its chat, and the answers.

Three kinds of request open an Interaction (stored) and are acknowledged with
InteractionOpened: an approval of a tool call, a question from the model, a plan review.
The chat is told what is asked and how to answer; the first answer settles it, and the
session hears the outcome as InteractionSettled on its own subject.

Plain text in a chat goes to the chat's pending approvals first (a no, the text being the
reason), then to its questions (the answer), then to its plan reviews (feedback: approving
a plan takes /proceed, /clean or /default). Approvals and questions not answered within
the timeout are a no; plan reviews wait. Time is the injected clock; the host sends
:class:`Tick` every second.

Only the session's owner and the approvers named for its home channel (the one it was
started on; :mod:`actors.authority`) may answer: anyone else's answer or text is refused,
recorded as a RefusedMessage (``tether audit --refused``) and told to the chat it came
from; what was asked stays pending.

:mod:`.decide` is the pure core (inputs and the time in; events and messages out), over
:mod:`.state`, with the chat's words in :mod:`.texts`; :mod:`.actor` is its shell.
"""

from tether.actors.chat.interactions.actor import InteractionCoordinatorActor
from tether.actors.chat.interactions.decide import decide
from tether.actors.chat.interactions.state import (
    DEFAULT_TIMEOUT,
    Effect,
    NewRequest,
    Outcome,
    Reply,
    Send,
    State,
    Waiting,
)
from tether.actors.runtime import Tick

__all__ = ["DEFAULT_TIMEOUT", "Effect", "InteractionCoordinatorActor", "NewRequest",
           "Outcome", "Reply", "Send", "State", "Tick", "Waiting", "decide"]
