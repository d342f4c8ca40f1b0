"""The model provider port (:class:`actors.ports.Provider`), as every implementation must
keep it: a stream of deltas that ends with one ``MessageDone``, or a ``ProviderError`` that
says whether trying again is worth it.

:class:`ProviderContract` is abstract; :class:`TestAnthropicProvider` runs it on the real
Anthropic SDK against the project's model stand-in, which plays each test's script.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tether.actors.ports import (
    MessageDone,
    ModelEvent,
    ModelRequest,
    Provider,
    ProviderError,
    TextDelta,
    ToolInputDelta,
    ToolUseStart,
)
from tether.adapters.anthropic_provider import AnthropicProvider
from tether.adapters.fake_llm import FakeLLM, parse_script
from tether.events.messages import TextBlock, ToolUseBlock

pytestmark = pytest.mark.slow  # a model server per test

REQUEST = ModelRequest(model="claude-sonnet-4-6", system="You are terse.",
                       messages=[{"role": "user", "content": "hello"}], max_tokens=256)

Stream = Callable[[str, ModelRequest], list[ModelEvent]]
"""Plays a script and returns what the provider streamed for the request."""


class ProviderContract:
    """Text and tool calls streamed as deltas, one final message whose content is what
    streamed, and failures typed by whether a retry may help."""

    @pytest.fixture
    def stream(self) -> Stream:
        raise NotImplementedError

    def test_text_streams_in_order_then_one_message_done(self, stream: Stream) -> None:
        events = stream('responses:\n  - blocks: [{text: "Hello there, friend."}]\n',
                        REQUEST)
        done = events[-1]
        assert isinstance(done, MessageDone)
        assert sum(isinstance(e, MessageDone) for e in events) == 1
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        assert [b.text for b in done.content if isinstance(b, TextBlock)] == [text]
        assert text == "Hello there, friend."
        assert done.stop_reason == "end_turn" and done.usage.output_tokens > 0

    def test_a_tool_call_streams_its_name_then_its_input(self, stream: Stream) -> None:
        script = ('responses:\n  - blocks:\n      - tool_use: {name: read_file, '
                  'input: {path: a.py}}\n')
        request = ModelRequest(model=REQUEST.model, system=REQUEST.system,
                               messages=REQUEST.messages, max_tokens=256,
                               tools=[{"name": "read_file", "description": "read",
                                       "input_schema": {"type": "object"}}])
        events = stream(script, request)
        start = next(e for e in events if isinstance(e, ToolUseStart))
        partial = "".join(e.partial_json for e in events if isinstance(e, ToolInputDelta))
        done = events[-1]
        assert isinstance(done, MessageDone) and done.stop_reason == "tool_use"
        (call,) = [b for b in done.content if isinstance(b, ToolUseBlock)]
        assert (start.name, start.id) == ("read_file", call.id)
        assert json.loads(partial) == call.input == {"path": "a.py"}

    def test_an_overloaded_model_is_a_transient_error(self, stream: Stream) -> None:
        script = ('responses:\n  - stream_error: {type: overloaded_error, '
                  'message: "Overloaded"}\n')
        with pytest.raises(ProviderError) as raised:
            stream(script, REQUEST)
        assert raised.value.transient

    def test_a_refused_request_is_an_error_not_worth_retrying(self, stream: Stream) -> None:
        script = ('responses:\n  - stream_error: {type: invalid_request_error, '
                  'message: "bad request"}\n')
        with pytest.raises(ProviderError) as raised:
            stream(script, REQUEST)
        assert not raised.value.transient and "bad request" in str(raised.value)


def _collect(provider: Provider, request: ModelRequest) -> list[ModelEvent]:
    async def run() -> list[ModelEvent]:
        return [event async for event in provider.stream(request)]

    return asyncio.run(run())


class TestAnthropicProvider(ProviderContract):
    @pytest.fixture
    def stream(self) -> Iterator[Stream]:
        servers: list[FakeLLM] = []

        def play(script: str, request: ModelRequest) -> list[ModelEvent]:
            server = FakeLLM(parse_script(script)).start()
            servers.append(server)
            provider: Any = AnthropicProvider(api_key=None, base_url=server.base_url)
            return _collect(provider, request)

        yield play
        for server in servers:
            server.stop()

