"""AnthropicProvider against the local scripted server: real HTTP, the real SDK."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from actors.ports import (
    MessageDone,
    ModelEvent,
    ModelRequest,
    ProviderError,
    TextDelta,
    ToolInputDelta,
    ToolUseStart,
)
from adapters.anthropic_provider import AnthropicProvider
from adapters.fake_llm import EXHAUSTED_TEXT, FakeLLM, parse_script
from events.messages import TextBlock, ToolUseBlock, Usage

SCRIPT = """
responses:
  - match: "read the readme"
    chunk: 4
    blocks:
      - text: "I will read it now."
      - tool_use: {name: read_file, input: {path: README.md, limit: 40, tags: [a, b]}}
    usage: {input_tokens: 123, output_tokens: 45}
  - match: "file says"
    chunk: 3
    blocks:
      - text: "The README describes Tether."
  - match: "cut"
    truncate: true
    blocks: [{text: "this answer never finishes"}]
  - match: "slow"
    chunk: 1
    delay_ms: 1000
    blocks: [{text: "a very slow answer that nobody waits for"}]
"""


def _request(text: str) -> ModelRequest:
    return ModelRequest(
        model="claude-test",
        system="You are a test.",
        messages=[{"role": "user", "content": text}],
        tools=[
            {
                "name": "read_file",
                "description": "Read a file",
                "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
            }
        ],
        max_tokens=512,
    )


def _collect(provider: AnthropicProvider, request: ModelRequest) -> list[ModelEvent]:
    async def run() -> list[ModelEvent]:
        try:
            return [event async for event in provider.stream(request)]
        finally:
            await provider.aclose()  # release pooled connections before the loop ends

    return asyncio.run(run())


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    with FakeLLM(parse_script(SCRIPT)) as server:
        yield server


@pytest.fixture
def provider(fake: FakeLLM) -> AnthropicProvider:
    return AnthropicProvider(api_key=None, base_url=fake.base_url, max_retries=0)


def test_text_streams_as_several_deltas(fake: FakeLLM, provider: AnthropicProvider) -> None:
    events = _collect(provider, _request("what does the file says?"))
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 1
    assert "".join(d.text for d in deltas) == "The README describes Tether."
    done = events[-1]
    assert isinstance(done, MessageDone)
    assert done.content == [TextBlock(text="The README describes Tether.")]
    assert done.stop_reason == "end_turn"
    assert sum(isinstance(e, MessageDone) for e in events) == 1


def test_tool_use_reassembles_and_usage_passes_through(
    fake: FakeLLM, provider: AnthropicProvider
) -> None:
    events = _collect(provider, _request("please read the readme"))
    starts = [e for e in events if isinstance(e, ToolUseStart)]
    assert len(starts) == 1
    assert starts[0].name == "read_file"
    assert starts[0].index == 1
    pieces = [e for e in events if isinstance(e, ToolInputDelta)]
    assert len(pieces) > 1
    assert all(p.index == 1 for p in pieces)
    done = events[-1]
    assert isinstance(done, MessageDone)
    assert done.stop_reason == "tool_use"
    assert done.usage == Usage(input_tokens=123, output_tokens=45)
    assert done.content == [
        TextBlock(text="I will read it now."),
        ToolUseBlock(
            id=starts[0].id,
            name="read_file",
            input={"path": "README.md", "limit": 40, "tags": ["a", "b"]},
        ),
    ]


def test_the_request_sent_is_recorded(fake: FakeLLM, provider: AnthropicProvider) -> None:
    _collect(provider, _request("please read the readme"))
    [sent] = fake.requests
    assert sent["model"] == "claude-test"
    assert sent["system"] == "You are a test."
    assert sent["messages"] == [{"role": "user", "content": "please read the readme"}]
    assert sent["tools"][0]["name"] == "read_file"
    assert sent["max_tokens"] == 512
    assert sent["stream"] is True


def test_match_picks_the_response_for_the_conversation(
    fake: FakeLLM, provider: AnthropicProvider
) -> None:
    first = _collect(provider, _request("please read the readme"))[-1]
    assert isinstance(first, MessageDone)
    [_, tool_use] = first.content
    assert isinstance(tool_use, ToolUseBlock)
    follow_up = ModelRequest(
        model="claude-test",
        system="",
        messages=[
            {"role": "user", "content": "please read the readme"},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": tool_use.id,
                        "name": "read_file",
                        "input": tool_use.input,
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": tool_use.id,
                        "content": "the file says: Tether",
                    }
                ],
            },
        ],
    )
    second = _collect(provider, follow_up)[-1]
    assert isinstance(second, MessageDone)
    assert second.content == [TextBlock(text="The README describes Tether.")]
    assert "system" not in fake.requests[1]  # an empty system prompt is not sent


def test_exhausted_script_gives_a_plain_reply(fake: FakeLLM) -> None:
    provider = AnthropicProvider(api_key=None, base_url=fake.base_url)
    done = _collect(provider, _request("nothing matches this"))[-1]
    assert isinstance(done, MessageDone)
    assert done.content == [TextBlock(text=EXHAUSTED_TEXT)]
    assert fake.exhausted == 1


def test_exhausted_error_becomes_provider_error_without_retries() -> None:
    with FakeLLM(parse_script("on_exhausted: error\nresponses: []")) as fake:
        provider = AnthropicProvider(api_key=None, base_url=fake.base_url)  # default retries
        with pytest.raises(ProviderError, match="model API error 500 \\(api_error\\)"):
            _collect(provider, _request("hi"))
        assert len(fake.requests) == 1  # x-should-retry: false is obeyed


def test_http_error_becomes_provider_error() -> None:
    script = parse_script(
        "responses:\n  - error: {status: 529, type: overloaded_error, message: Overloaded}\n"
    )
    with FakeLLM(script) as fake:
        provider = AnthropicProvider(api_key=None, base_url=fake.base_url, max_retries=0)
        with pytest.raises(ProviderError, match="529 \\(overloaded_error\\): Overloaded"):
            _collect(provider, _request("hi"))


def test_truncated_stream_is_an_error(fake: FakeLLM, provider: AnthropicProvider) -> None:
    seen: list[ModelEvent] = []

    async def run() -> None:
        try:
            async for event in provider.stream(_request("cut it short")):
                seen.append(event)
        finally:
            await provider.aclose()

    with pytest.raises(ProviderError, match="ended before message_stop"):
        asyncio.run(run())
    assert seen  # the deltas did arrive, but no MessageDone
    assert not any(isinstance(e, MessageDone) for e in seen)


def test_connection_refused_is_a_provider_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    provider = AnthropicProvider(api_key=None, base_url=f"http://127.0.0.1:{port}", max_retries=0)
    with pytest.raises(ProviderError, match="cannot reach the model API"):
        _collect(provider, _request("hi"))


def test_cancelling_the_consumer_closes_the_connection(
    fake: FakeLLM, provider: AnthropicProvider
) -> None:
    async def run() -> list[ModelEvent]:
        seen: list[ModelEvent] = []
        first = asyncio.Event()

        async def consume() -> None:
            async for event in provider.stream(_request("a slow one")):
                seen.append(event)
                first.set()

        task = asyncio.create_task(consume())
        await first.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await provider.aclose()
        return seen

    seen = asyncio.run(run())
    assert len(seen) == 1  # the server pauses 1 s between deltas: we left after the first
    assert fake.wait_for_disconnects(1, timeout=5)
    assert fake.completed == 0


def test_provider_works_across_event_loops(fake: FakeLLM, provider: AnthropicProvider) -> None:
    for _ in range(2):
        done = _collect(provider, _request("nothing scripted"))[-1]
        assert isinstance(done, MessageDone)
    assert fake.exhausted == 2


def test_repr_hides_the_key() -> None:
    provider = AnthropicProvider(api_key="sk-secret", base_url=None)
    assert "sk-secret" not in repr(provider)
