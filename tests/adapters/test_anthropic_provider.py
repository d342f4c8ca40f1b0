"""AnthropicProvider against the local scripted server: real HTTP, the real SDK."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tether.actors.ports import (
    MessageDone,
    ModelEvent,
    ModelRequest,
    ProviderError,
    TextDelta,
    ToolInputDelta,
    ToolUseStart,
)
from tether.adapters.anthropic_provider import (
    AnthropicProvider,
    _Block,
    _check_new_call,
    _check_storable,
)
from tether.adapters.fake_llm import EXHAUSTED_TEXT, FakeLLM, parse_script
from tether.events.codec import without_lone_surrogates
from tether.events.messages import TextBlock, ToolUseBlock, Usage

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
  - match: "overload me"
    chunk: 4
    blocks: [{text: "half an answer"}]
    stream_error: {type: overloaded_error, message: Overloaded}
  - match: "refuse midway"
    blocks: [{text: "started"}]
    stream_error: {type: invalid_request_error, message: "prompt is too long"}
  - match: "no tools now"
    blocks: [{text: "Just text."}]
  - match: "sneaky tool"
    blocks: [{tool_use: {name: read_file, input: {path: x}}}]
"""

TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]


def _request(text: str) -> ModelRequest:
    return ModelRequest(
        model="claude-test",
        system="You are a test.",
        messages=[{"role": "user", "content": text}],
        tools=TOOLS,
        max_tokens=512,
    )


def _history_with_tool_blocks(last: str) -> list[dict[str, Any]]:
    """A conversation holding a tool_use and its tool_result, then a user message."""
    return [
        {"role": "user", "content": "read it"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "done"},
                {"type": "text", "text": last},
            ],
        },
    ]


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


def test_the_body_is_the_one_the_sdk_s_create_would_send(fake: FakeLLM,
                                                         provider: AnthropicProvider) -> None:
    """The provider encodes the body itself (msgspec) and hands the SDK the bytes: the
    server receives, value for value, what ``messages.create(stream=True, ...)`` sends for
    the same request, with the headers the SDK sends either way."""
    import anthropic

    request = ModelRequest(model="claude-test", system="You are a test. \u00e9\u6f22 \U0001f600",
                           messages=_history_with_tool_blocks("and now? \"quoted\" \\ \u2028"),
                           tools=TOOLS, max_tokens=512, tool_choice={"type": "auto"})
    _collect(provider, request)

    async def by_create() -> None:
        async with anthropic.AsyncAnthropic(api_key="local", base_url=fake.base_url,
                                            max_retries=0) as client:
            stream = await client.messages.create(
                stream=True, model=request.model, max_tokens=request.max_tokens,
                messages=request.messages, system=request.system, tools=request.tools,
                tool_choice=request.tool_choice)  # type: ignore[arg-type]
            async with stream:
                async for _ in stream:
                    pass

    asyncio.run(by_create())
    ours, theirs = fake.requests
    assert ours == theirs
    assert list(ours) == ["model", "max_tokens", "messages", "stream", "system", "tools",
                          "tool_choice"]


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
        tools=TOOLS,  # the API refuses tool blocks in a request that defines no tools
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
        with pytest.raises(ProviderError, match="529 \\(overloaded_error\\): Overloaded") as info:
            _collect(provider, _request("hi"))
        assert info.value.transient


def test_truncated_stream_is_an_error(fake: FakeLLM, provider: AnthropicProvider) -> None:
    seen: list[ModelEvent] = []

    async def run() -> None:
        try:
            async for event in provider.stream(_request("cut it short")):
                seen.append(event)
        finally:
            await provider.aclose()

    with pytest.raises(ProviderError, match="ended before message_stop") as info:
        asyncio.run(run())
    assert info.value.transient  # a dropped connection: worth retrying
    assert seen  # the deltas did arrive, but no MessageDone
    assert not any(isinstance(e, MessageDone) for e in seen)


def _stream_until_error(
    provider: AnthropicProvider, request: ModelRequest
) -> tuple[list[ModelEvent], ProviderError]:
    seen: list[ModelEvent] = []

    async def run() -> None:
        try:
            async for event in provider.stream(request):
                seen.append(event)
        finally:
            await provider.aclose()

    with pytest.raises(ProviderError) as info:
        asyncio.run(run())
    return seen, info.value


def test_overloaded_error_mid_stream_is_transient(
    fake: FakeLLM, provider: AnthropicProvider
) -> None:
    seen, error = _stream_until_error(provider, _request("overload me please"))
    assert str(error) == "model API error (overloaded_error, mid-stream): Overloaded"
    assert error.transient
    assert "".join(e.text for e in seen if isinstance(e, TextDelta)) == "half an answer"
    assert not any(isinstance(e, MessageDone) for e in seen)


def test_invalid_request_error_mid_stream_is_not_transient(
    fake: FakeLLM, provider: AnthropicProvider
) -> None:
    _, error = _stream_until_error(provider, _request("refuse midway"))
    assert str(error) == ("model API error (invalid_request_error, mid-stream): prompt is too long")
    assert not error.transient


MESSAGE_START = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"m",'
    b'"type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,'
    b'"stop_sequence":null,"usage":{"input_tokens":%s,"output_tokens":1}}}\n\n'
)


@contextlib.contextmanager
def _one_chunk_server(chunk: bytes) -> Iterator[str]:
    """A server answering one request with ``chunk`` as the only chunk of a streamed
    body, then closing the connection (no last chunk); yields its base URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            received = b""
            while b"\r\n\r\n" not in received:
                received += conn.recv(65536)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n" % (len(chunk), chunk)
            )

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        thread.join(timeout=5)
        listener.close()


def test_connection_dropped_mid_body_is_transient() -> None:
    """A peer that closes a chunked body midway (not a clean end): the SDK lets the HTTP
    library's error through; the provider makes it a transient ProviderError."""
    with _one_chunk_server(MESSAGE_START % b"1") as url:
        provider = AnthropicProvider(api_key=None, base_url=url)
        _, error = _stream_until_error(provider, _request("hi"))
        assert error.transient
        assert "model stream failed" in str(error)


@pytest.mark.parametrize("count", [b"-1000000", b"100000000000000000000000", b"2.5"],
                         ids=["negative", "past-64-bits", "fraction"])
def test_a_token_count_that_is_not_one_is_refused(count: bytes) -> None:
    """A negative count would give the session's budget back, a huge one spend it (and
    one past 64 bits could not be stored): the call fails, as for any endpoint error."""
    with _one_chunk_server(MESSAGE_START % count) as url:
        provider = AnthropicProvider(api_key=None, base_url=url)
        _, error = _stream_until_error(provider, _request("hi"))
        assert "model reported input_tokens that is not a count" in str(error)
        assert not error.transient


def test_tool_blocks_without_tools_are_refused_and_not_transient(
    fake: FakeLLM, provider: AnthropicProvider
) -> None:
    request = ModelRequest(
        model="claude-test", system="", messages=_history_with_tool_blocks("no tools now")
    )
    _, error = _stream_until_error(provider, request)
    assert str(error).startswith("model API error 400 (invalid_request_error): messages.1: ")
    assert "must define tools" in str(error)
    assert not error.transient
    assert fake.requests == []  # refused before anything was served
    assert fake.remaining == 8


def test_tool_choice_none_is_sent_and_recorded(fake: FakeLLM, provider: AnthropicProvider) -> None:
    request = ModelRequest(
        model="claude-test",
        system="",
        messages=_history_with_tool_blocks("no tools now"),
        tools=TOOLS,
        tool_choice={"type": "none"},
    )
    done = _collect(provider, request)[-1]
    assert isinstance(done, MessageDone)
    assert done.content == [TextBlock(text="Just text.")]
    [sent] = fake.requests
    assert sent["tool_choice"] == {"type": "none"}
    assert sent["tools"][0]["name"] == "read_file"


def test_tool_choice_is_not_sent_when_none(fake: FakeLLM, provider: AnthropicProvider) -> None:
    _collect(provider, _request("no tools now"))
    assert "tool_choice" not in fake.requests[0]


def test_a_tool_call_scripted_under_tool_choice_none_is_a_script_problem(
    fake: FakeLLM, provider: AnthropicProvider
) -> None:
    request = ModelRequest(
        model="claude-test",
        system="",
        messages=[{"role": "user", "content": "sneaky tool"}],
        tools=TOOLS,
        tool_choice={"type": "none"},
    )
    _, error = _stream_until_error(provider, request)
    assert "fake LLM script problem" in str(error) and "tool_choice is `none`" in str(error)
    [problem] = fake.script_errors
    assert "calls read_file" in problem


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


@pytest.mark.parametrize(("tool_id", "name", "raw"), [
    ("toolu_01\x00A", "read_file", '{}'),  # a NUL in the id (PostgreSQL keys refuse it)
    ("t" * 3000, "read_file", '{}'),  # an id too long to index
    ("toolu_01", "read file; rm -rf /", '{}'),
    ("toolu_01", "read_file", '{"n": -' + "9" * 4300 + "}"),  # json reads it, msgspec not
    ("toolu_01", "read_file", '{"s": "\\ud800"}'),  # a lone surrogate cannot be encoded
    ("toolu_01", "read_file", '{"n": NaN}'),  # stored as null: history and record differ
    ("toolu_01", "read_file", '{"n": 1e400}'),  # Infinity, the same
    ("toolu_02", "read_file", '{}'),  # the id of another call of the message
], ids=["nul-id", "long-id", "odd-name", "huge-negative", "lone-surrogate", "nan",
        "infinity", "repeated-id"])
def test_a_tool_call_the_store_could_not_hold_as_it_is_is_refused(
        tool_id: str, name: str, raw: str) -> None:
    """Stored, such a call would stop the read models on it, hide it from the audit or
    keep its session from loading or sending again: it is refused at the edge, as
    invalid JSON is."""
    earlier = {0: _Block("tool_use", "toolu_02", "read_file")}
    with pytest.raises(ProviderError, match=r"is not one|cannot be stored|two tool calls"):
        _check_new_call(earlier, tool_id, name)
        _check_storable(name, json.loads(raw))


def test_a_plain_tool_call_passes() -> None:
    _check_new_call({}, "toolu_01Ab-c.d:e", "mcp__files__read")
    _check_storable("mcp__files__read", {"x": 1.5, "y": [1, "z", None, True], "big": 2**70})


def test_text_with_a_lone_surrogate_can_be_sent_and_stored() -> None:
    assert without_lone_surrogates("plain") == "plain"
    assert without_lone_surrogates("a\ud800b") == "a\ufffdb"
    assert without_lone_surrogates("\ud83d\ude00") == "\U0001f600"  # a pair is joined


def test_a_tool_call_reusing_the_id_of_an_earlier_call_is_refused() -> None:
    """A model that sends the id of a call of the conversation again is refused before
    anything runs: the audit keeps one row per call id, and the API would refuse the next
    request. The model stand-in sends the id as a model would (through the real SDK)."""
    script = parse_script(
        "responses:\n  - blocks: [{tool_use: {id: toolu_seen, name: read_file, "
        "input: {path: b.txt}}}]\n")
    request = _request("read a.txt")
    request.messages += [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_seen",
                                           "name": "read_file", "input": {"path": "a.txt"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_seen",
                                      "content": "a"}]},
    ]
    with FakeLLM(script) as fake:
        provider = AnthropicProvider(api_key=None, base_url=fake.base_url)
        with pytest.raises(ProviderError, match="of an earlier call of the conversation"):
            _collect(provider, request)
    with pytest.raises(ProviderError, match="earlier call"):
        _check_new_call({}, "toolu_seen", "read_file", earlier={"toolu_seen"})
    _check_new_call({}, "toolu_new", "read_file", earlier={"toolu_seen"})
