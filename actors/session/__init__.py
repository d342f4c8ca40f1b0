"""One agent session: a pure core that decides, and an actor shell that performs.

:func:`decide` takes the session's :class:`State`, one input and the time, and returns a
:class:`Outcome`: the events recorded and the effects to perform. :class:`SessionActor`
feeds it the session's messages, saves each decision's events in one save, and performs
the effects. The parts of the core: :mod:`.intake` (messages, commands, generate),
:mod:`.turn` (model calls, streaming, the barrier), :mod:`.tools` (the tool loop),
:mod:`.review` (approvals, questions, plan review), :mod:`.compaction`, :mod:`.tree`,
:mod:`.endings` (turn ends, timers, titles, restarts).
"""

from tether.actors.session.actor import SessionActor
from tether.actors.session.config import ForkOf, NewSession, SessionConfig
from tether.actors.session.decide import decide
from tether.actors.session.effects import Effect, Outcome
from tether.actors.session.inputs import SessionTick
from tether.actors.session.state import Env, Phase, State, TurnState

__all__ = [
    "Effect",
    "Env",
    "ForkOf",
    "NewSession",
    "Outcome",
    "Phase",
    "SessionActor",
    "SessionConfig",
    "SessionTick",
    "State",
    "TurnState",
    "decide",
]
