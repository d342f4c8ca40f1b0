"""The session's model calls, run on the bus's I/O loop: each sends what it got back to
the actor as a message (never raising into the loop). ``ref`` is the actor's reference,
or anything with its ``tell``."""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Protocol

import pykka

from tether.actors.ports import MessageDone, ModelRequest, Provider, ProviderError, answer_of
from tether.actors.session.inputs import CompactionDone, ModelDelta, ModelFailed, TitleDone
from tether.events.messages import Usage

log = logging.getLogger(__name__)


class Inbox(Protocol):
    """Where a pump tells what came back (it raises ``pykka.ActorDeadError`` once the actor
    has stopped)."""

    def tell(self, message: Any) -> None: ...


async def pump_model(provider: Provider, request: ModelRequest, generation: int,
                     ref: Inbox) -> None:
    """Stream one model call into the actor as ModelDelta messages (ModelFailed: why not)."""
    done = False
    try:
        async for event in provider.stream(request):
            ref.tell(ModelDelta(generation, event))
            done = done or isinstance(event, MessageDone)
        if not done:
            ref.tell(ModelFailed(generation, "model stream ended before the message was complete"))
    except ProviderError as exc:
        ref.tell(ModelFailed(generation, str(exc), exc.transient))
    except pykka.ActorDeadError:
        pass
    except Exception as exc:  # a provider bug must fail the turn, not vanish
        log.exception("model call failed")
        with contextlib.suppress(pykka.ActorDeadError):
            ref.tell(ModelFailed(generation, f"{type(exc).__name__}: {exc}"))


async def pump_title(provider: Provider, request: ModelRequest,
                     ref: Inbox) -> None:
    """Ask for a title; the answer comes back as TitleDone."""
    try:
        text, usage = await answer_of(provider, request)
        result = TitleDone(text, usage)
    except Exception as exc:  # a title is a nicety: say why, never fail the session
        result = TitleDone(error=f"{type(exc).__name__}: {exc}")
    with contextlib.suppress(pykka.ActorDeadError):
        ref.tell(result)


async def pump_compaction(provider: Provider, memory: ModelRequest, summary: ModelRequest,
                          generation: int, ref: Inbox) -> None:
    """Make the memory call, then the summary call; the answers come back as
    CompactionDone (a failure of either says why)."""
    usage = Usage()
    try:
        facts, used = await answer_of(provider, memory)
        usage = used
        text, used = await answer_of(provider, summary)
        usage = Usage(usage.input_tokens + used.input_tokens,
                      usage.output_tokens + used.output_tokens)
        result = CompactionDone(generation, facts, text, usage)
    except Exception as exc:  # the turn goes on uncompacted; say why
        result = CompactionDone(generation, usage=usage, error=f"{type(exc).__name__}: {exc}")
    with contextlib.suppress(pykka.ActorDeadError):
        ref.tell(result)
