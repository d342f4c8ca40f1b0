"""The session shell's pumps turn a model call into the core's inputs, a failure too
(what the core then decides: tests/actors/session/)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from tether.actors.ports import MessageDone, ModelEvent, ModelRequest, ProviderError
from tether.actors.session.inputs import CompactionDone
from tether.actors.session.pumps import pump_compaction
from tether.events.messages import TextBlock, Usage


class Scripted:
    """A provider answering each call with the next text, or raising the next error."""

    def __init__(self, *answers: str | ProviderError) -> None:
        self.answers = list(answers)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        answer = self.answers.pop(0)
        if isinstance(answer, ProviderError):
            raise answer
        yield MessageDone([TextBlock(answer)], "end_turn", Usage(10, 2))


class Inbox:
    def __init__(self) -> None:
        self.told: list[Any] = []

    def tell(self, message: Any) -> None:
        self.told.append(message)


def compact(provider: Scripted) -> list[Any]:
    inbox = Inbox()
    request = ModelRequest(model="m", messages=[], system="", tools=[], max_tokens=10)
    asyncio.run(pump_compaction(provider, request, request, 7, inbox))  # type: ignore[arg-type]
    return inbox.told


def test_both_answers_come_back_with_what_they_used() -> None:
    assert compact(Scripted("- tabs", "They talked.")) == [
        CompactionDone(7, "- tabs", "They talked.", Usage(20, 4))]


def test_a_failed_call_comes_back_as_the_compaction_s_error() -> None:
    (done,) = compact(Scripted(ProviderError(
        "model API error 400 (invalid_request_error): too long")))
    assert done.generation == 7 and "too long" in done.error and not done.summary
