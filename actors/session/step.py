"""One decision in progress: the state it changes and the effects it gathers, with the
small helpers every part of the session's core shares."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from eventsourcing.domain import Aggregate

from tether.actors import engine_tools
from tether.actors.model.context import context_window
from tether.actors.model.pricing import cost_usd
from tether.actors.modes import plan_file_for
from tether.actors.session.effects import Ask, Effect, Reply, Send
from tether.actors.session.state import State
from tether.events.conversation import Conversation
from tether.events.lifecycle import refusal
from tether.events.messages import GenerationEvent, StreamDelta

log = logging.getLogger("tether.actors.session")


class Step:
    """A decision being made about one input at time ``now``."""

    def __init__(self, state: State, now: dt.datetime) -> None:
        self.state = state
        self.now = now
        self.env = state.env
        self.config = state.env.config
        self.subjects = state.env.subjects
        self.session_id = state.env.session_id
        self.session = state.session
        self.turn = state.turn
        self.effects: list[Effect] = []
        self.recorded: list[Aggregate] = []
        """Aggregates besides the session that got events (a refusal)."""

    # --- effects ------------------------------------------------------------------------

    def send(self, subject: str, message: Any) -> None:
        self.effects.append(Send(subject, message))

    def reply(self, message: Any) -> None:
        self.effects.append(Reply(message))

    def ask(self, subject: str, message: Any, reply_type: type, tag: str,
            timeout: float = 0.0) -> None:
        self.effects.append(Ask(subject, message, reply_type, tag,
                                timeout or self.config.ask_timeout))

    def emit(self, event: type[GenerationEvent], /, **fields: Any) -> None:
        """Publish one generation event of the running turn."""
        self.turn.gen_seq += 1
        self.send(self.subjects.generation(self.session_id), event(
            session_id=self.session_id, turn=self.turn.gen_turn, seq=self.turn.gen_seq,
            **fields))

    def publish(self, kind: Any, text: str = "", block: int = 0) -> None:
        """Publish one delta of the running model call on the session's stream."""
        turn = self.turn
        turn.seq += 1
        start = kind == "turn_start"
        self.send(self.subjects.stream(self.session_id), StreamDelta(
            session_id=self.session_id, generation=turn.generation, seq=turn.seq, kind=kind,
            text=text, block=block, channel=self.session.channel if start else "",
            turn=self.session.completed_turns if start else 0))

    # --- reading the state --------------------------------------------------------------

    @property
    def conversation(self) -> Conversation:
        """The session's tree and its place on it (derived as its events apply)."""
        return self.session.conversation

    def active(self) -> None:
        """Something happened mid-turn (the safety net counts from now)."""
        self.turn.last_activity = self.now

    def set_status(self, status: str, reason: str) -> bool:
        """Move to ``status`` if the lifecycle allows it; else log and refuse."""
        why = refusal(self.session.status, status)
        if why is not None:
            log.warning("session %s: refused to become %s (%s): %s", self.session_id, status,
                        reason, why)
            return False
        self.session.change_status(status=status, reason=reason)
        return True

    def turn_cost(self) -> float:
        return cost_usd(self.config.model, self.turn.turn_usage)

    def plan_file(self) -> str:
        return plan_file_for(self.session.workspace, self.session_id)

    def window(self) -> int:
        return context_window(self.config.model, self.config.context_window)

    def lazy(self) -> dict[str, str]:
        """The tool groups when tools load lazily, else nothing."""
        return self.env.tools.groups() if self.config.lazy_tools else {}

    def root_prompt(self) -> str:
        """The system prompt whose root the session's messages hang under."""
        return self.session.system_prompt or self.config.system_prompt

    def system_text(self) -> str:
        """The system prompt as sent: the assembled prompt with the mode's instructions."""
        return engine_tools.system_prompt(self.root_prompt(), self.session.mode,
                                          self.plan_file())

    def aggregates(self) -> list[Aggregate]:
        """The aggregates with events to save, the session first."""
        return [a for a in (self.session, *self.recorded) if a.pending_events]
