"""The model provider backed by the ``anthropic`` SDK (Messages API, streaming).

:class:`AnthropicProvider` implements :class:`actors.ports.Provider`: ``stream(request)``
yields ``TextDelta`` / ``ToolUseStart`` / ``ToolInputDelta`` as the server sends them and
ends with one ``MessageDone`` holding the whole message, or raises ``ProviderError``.

Contract details the SDK does not give for free:

- a stream that ends without ``message_stop`` raises ``ProviderError`` (the SDK accepts a
  cut-short body silently), transient: the connection was cut, a retry may succeed;
- every failure (connection refused, timeout, HTTP 4xx/5xx, an ``error`` event in the
  middle of a stream, a broken or malformed stream) becomes ``ProviderError`` with a
  message fit for the user; API keys never appear in it;
- ``ProviderError.transient`` is decided by the API's error type when the body names one
  (see :func:`is_transient`), else by the HTTP status; this matters for an ``error``
  event sent after HTTP 200, which the SDK raises as ``APIStatusError`` with status 200;
- the request's body is encoded once, by msgspec, and handed to the SDK as bytes
  (``client.post("/v1/messages", content=...)``): ``messages.create`` would deep-copy the
  whole conversation and encode it with the json module at every call, which costs more
  than the rest of the call once a session holds a few hundred messages; the SDK still
  sends it (authentication, headers, retries) and parses the stream into its typed events.
  What ``create`` adds is left out: its OpenTelemetry span (and ``traceparent`` header)
  and its warning for a deprecated model;
- the stream runs inside ``async with``, so cancelling the consuming task (or closing the
  generator) closes the HTTP connection at once;
- ``import anthropic`` takes seconds, so it happens on first use, not at import time;
- the ``AsyncAnthropic`` client is created lazily, once per running event loop.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from typing import Any

import msgspec

from tether.actors.ports import (
    MessageDone,
    ModelEvent,
    ModelRequest,
    ProviderError,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolUseStart,
)
from tether.events.codec import without_lone_surrogates
from tether.events.messages import ContentBlock, TextBlock, ToolUseBlock, Usage

__all__ = [
    "LOCAL_API_KEY",
    "PERMANENT_ERROR_TYPES",
    "TRANSIENT_ERROR_TYPES",
    "AnthropicProvider",
    "is_transient",
]

_BODY = msgspec.json.Encoder()
"""Encodes a request's body (the API's JSON). A value it cannot encode (a lone surrogate,
a key that is not a string) fails the call as a ``ProviderError``, as the SDK's encoder
did. NaN and infinity it writes as null, where the SDK's encoder refused them: none
reaches a request (a model's tool input holding one is refused, :func:`_check_storable`;
an MCP tool whose schema holds one is left out, ``mcp_tools.naming.not_json``)."""

LOCAL_API_KEY = "local"
"""Placeholder key used against a local server (the SDK refuses to run without one)."""

TRANSIENT_ERROR_TYPES = frozenset(
    {"overloaded_error", "rate_limit_error", "api_error", "timeout_error"}
)
"""API error types worth retrying (with any type whose name contains ``timeout``)."""

PERMANENT_ERROR_TYPES = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "billing_error",
        "permission_error",
        "not_found_error",
        "request_too_large",
    }
)
"""API error types a retry cannot fix."""


def is_transient(status: int, error_type: str) -> bool:
    """Whether an API error is worth retrying.

    ``error_type`` (the body's ``error.type``, empty when unknown) decides when it is in
    :data:`TRANSIENT_ERROR_TYPES` (or names a timeout) or :data:`PERMANENT_ERROR_TYPES`.
    Otherwise the HTTP ``status`` does: 408, 429, 529 and 5xx are transient. An error of
    another type sent mid-stream (``status`` below 400, the stream having answered 200)
    is not: nothing says a retry would help.
    """
    if error_type in TRANSIENT_ERROR_TYPES or "timeout" in error_type:
        return True
    if error_type in PERMANENT_ERROR_TYPES:
        return False
    return status in (408, 429, 529) or status >= 500


class _Block:
    """A content block being assembled from stream events."""

    def __init__(self, kind: str, tool_id: str = "", name: str = "") -> None:
        self.kind = kind
        self.tool_id = tool_id
        self.name = name
        self.parts: list[str] = []


class AnthropicProvider:
    """Streams model responses through ``anthropic.AsyncAnthropic``.

    ``api_key`` None with ``base_url`` set uses the placeholder ``"local"`` (a local
    Anthropic-compatible server); both None lets the SDK read ``ANTHROPIC_API_KEY`` and
    ``ANTHROPIC_BASE_URL``. ``max_retries`` is passed to the SDK (it retries connection
    errors, 408/409/429 and 5xx with backoff before the first event arrives; it obeys an
    ``x-should-retry`` response header). The default is 0: the session retries transient
    errors itself (``ProviderError.transient``) and records each retry.

    The SDK client keeps a connection pool tied to its event loop: call :meth:`aclose` on
    that loop before it ends (a provider moved to a new loop makes a new client and drops
    the old one, whose pooled connections are then only closed by the garbage collector).
    """

    def __init__(
        self,
        api_key: str | None,
        base_url: str | None,
        timeout: float = 600.0,
        *,
        max_retries: int = 0,
    ) -> None:
        if api_key is None and base_url is not None:
            api_key = LOCAL_API_KEY
        self._api_key = api_key
        self._base_url = base_url
        self._timeout = timeout
        self._max_retries = max_retries
        self._client: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:  # never show the key
        return f"AnthropicProvider(base_url={self._base_url!r}, timeout={self._timeout})"

    def prepare(self) -> None:
        """Import the SDK now (about 3 s), off the I/O loop, so the first model call does
        not freeze the loop that carries every NATS message of the process."""
        import anthropic  # noqa: F401

    def _client_for_loop(self) -> Any:
        """The SDK client for the running loop, created on first use in that loop."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            import anthropic

            try:
                self._client = anthropic.AsyncAnthropic(
                    api_key=self._api_key,
                    base_url=self._base_url,
                    timeout=self._timeout,
                    max_retries=self._max_retries,
                )
            except Exception as exc:
                raise ProviderError(f"cannot set up the Anthropic client: {exc}") from exc
            self._loop = loop
        return self._client

    async def aclose(self) -> None:
        """Close the SDK client (its connection pool) if it belongs to the running loop."""
        client, loop = self._client, self._loop
        self._client, self._loop = None, None
        if client is not None and loop is asyncio.get_running_loop():
            await client.close()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream one response: deltas as they arrive, then ``MessageDone``.

        Sends ``tools`` when non-empty and ``tool_choice`` when not None. Raises
        ``ProviderError`` on any failure, including a stream that stops before
        ``message_stop`` or carries an ``error`` event (``transient`` as documented in the
        module). Cancelling the consumer closes the connection.
        """
        import anthropic

        client = self._client_for_loop()
        params: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_tokens,
            "messages": request.messages,
            "stream": True,
        }
        if request.system:
            params["system"] = request.system
        if request.tools:
            params["tools"] = request.tools
        if request.tool_choice is not None:
            params["tool_choice"] = request.tool_choice

        blocks: dict[int, _Block] = {}
        earlier: set[str] | None = None
        """The ids of the calls in the request's messages (read at the first call)."""
        stop_reason = ""
        usage = Usage()
        saw_start = False
        saw_stop = False
        events = 0
        try:
            # The raw event stream: the SDK's stream() helper also builds a snapshot of
            # the whole message at every event (pydantic models), which costs more than
            # the call's own work on a short reply; the blocks are gathered here anyway.
            # Leaving the context (or cancelling the task in it) closes the connection.
            opened = client.post("/v1/messages", content=_BODY.encode(params),
                                 cast_to=anthropic.types.Message, stream=True,
                                 stream_cls=anthropic.AsyncStream[
                                     anthropic.types.RawMessageStreamEvent])
            async with await opened as stream:
                async for event in stream:
                    kind = event.type
                    if kind == "message_start":
                        saw_start = True
                        usage = _usage(event.message.usage, usage)
                    elif kind == "content_block_start":
                        block = event.content_block
                        if event.index in blocks:  # the first would vanish unrecorded
                            raise ProviderError(
                                f"model sent two content blocks at index {event.index}")
                        if block.type == "tool_use":
                            if earlier is None:
                                earlier = _call_ids(request.messages)
                            _check_new_call(blocks, block.id, block.name, earlier)
                            blocks[event.index] = _Block("tool_use", block.id, block.name)
                            yield ToolUseStart(index=event.index, id=block.id, name=block.name)
                        elif block.type == "text":
                            blocks[event.index] = _Block("text")
                            if block.text:
                                text = without_lone_surrogates(block.text)
                                blocks[event.index].parts.append(text)
                                yield TextDelta(index=event.index, text=text)
                        elif block.type == "thinking" and block.thinking:
                            yield ThinkingDelta(index=event.index,
                                                text=without_lone_surrogates(block.thinking))
                        # other block kinds (server tools...) are not forwarded
                    elif kind == "content_block_delta":
                        delta = event.delta
                        target = blocks.get(event.index)
                        if delta.type == "text_delta" and target is not None:
                            text = without_lone_surrogates(delta.text)
                            target.parts.append(text)
                            yield TextDelta(index=event.index, text=text)
                        elif delta.type == "thinking_delta":
                            yield ThinkingDelta(index=event.index,
                                                text=without_lone_surrogates(delta.thinking))
                        elif (delta.type == "input_json_delta" and target is not None
                              and target.kind == "tool_use"):
                            target.parts.append(delta.partial_json)
                            yield ToolInputDelta(index=event.index, partial_json=delta.partial_json)
                    elif kind == "message_delta":
                        stop_reason = without_lone_surrogates(
                            event.delta.stop_reason or stop_reason)
                        usage = _usage(event.usage, usage)
                    elif kind == "message_stop":
                        saw_stop = True
                    elif kind == "content_block_stop":
                        pass
                    else:
                        continue  # an event kind this code does not know (a newer API)
                    events += 1
        except ProviderError:
            raise
        except anthropic.APIStatusError as exc:
            status = int(getattr(exc, "status_code", 0) or 0)
            kind, _ = _error_fields(exc)
            raise ProviderError(_status_message(exc), transient=is_transient(status, kind)) from exc
        except anthropic.APITimeoutError as exc:
            raise ProviderError(f"model API timed out ({self._where()})", transient=True) from exc
        except anthropic.APIConnectionError as exc:
            cause = exc.__cause__ or exc
            raise ProviderError(
                f"cannot reach the model API ({self._where()}): {cause}", transient=True
            ) from exc
        except Exception as exc:
            # The SDK lets the HTTP library's transport errors through while a body is read
            # (e.g. the peer closed a chunked body midway): a dropped connection, transient.
            raise ProviderError(
                f"model stream failed ({self._where()}): {type(exc).__name__}: {exc}",
                transient=_is_transport_error(exc),
            ) from exc

        if not saw_stop:
            raise ProviderError(
                "model stream ended before message_stop "
                f"(after {events} events{'' if saw_start else ', no message_start'}): "
                "the connection was cut short; the response is incomplete",
                transient=True,
            )
        content: list[ContentBlock] = []
        for index in sorted(blocks):
            block_state = blocks[index]
            if block_state.kind == "text":
                text = "".join(block_state.parts)
                if text.strip():  # the API refuses empty text blocks in a later request
                    content.append(TextBlock(text=text))
                continue
            raw = "".join(block_state.parts)
            try:
                tool_input = json.loads(raw) if raw.strip() else {}
            except ValueError as exc:
                raise ProviderError(
                    f"model sent invalid JSON for tool {block_state.name!r}: {exc}"
                ) from exc
            if not isinstance(tool_input, dict):
                raise ProviderError(f"model sent a non-object input for tool {block_state.name!r}")
            _check_storable(block_state.name, tool_input)
            content.append(
                ToolUseBlock(id=block_state.tool_id, name=block_state.name, input=tool_input)
            )
        yield MessageDone(content=content, stop_reason=stop_reason or "end_turn", usage=usage)

    def _where(self) -> str:
        return self._base_url or "the default Anthropic endpoint"


_TOOL_NAME_OR_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
"""What a tool-use id and a tool name from the endpoint may be (the API's ids are like
``toolu_01A…``, its tool names ``^[a-zA-Z0-9_-]{1,64}$``): they become keys of the
records and the read models."""


def _check_new_call(blocks: dict[int, _Block], tool_id: str, name: str,
                    earlier: Collection[str] = ()) -> None:
    """Refuse (ProviderError) a tool call whose id or name is not one (they become keys of
    the records and the read models: a NUL, an id too long to index, would break them),
    or whose id another call of the message has, or a call of the conversation sent
    (``earlier``): the audit could not tell them apart, and the API refuses the next
    request."""
    if any(b.kind == "tool_use" and b.tool_id == tool_id for b in blocks.values()):
        raise ProviderError(f"model sent two tool calls with the id {tool_id!r}")
    if tool_id in earlier:
        raise ProviderError(f"model sent a tool call with the id {tool_id!r} of an earlier "
                            "call of the conversation")
    for what, value in (("id", tool_id), ("name", name)):
        if not _TOOL_NAME_OR_ID.fullmatch(value):
            raise ProviderError(f"model sent a tool call whose {what} is not one "
                                f"({value[:40]!r}{'...' if len(value) > 40 else ''})")


def _call_ids(messages: Sequence[Mapping[str, Any]]) -> set[str]:
    """The ids of the tool calls in ``messages`` (Messages API dicts; only the assistant's
    hold calls)."""
    return {str(block.get("id")) for message in messages
            if message.get("role") == "assistant"
            and isinstance(content := message.get("content"), list)
            for block in content
            if isinstance(block, dict) and block.get("type") == "tool_use"}


def _check_storable(name: str, tool_input: dict[str, Any]) -> None:
    """Refuse (ProviderError) a tool input the store would not hold as it is: one it could
    write but not read back (an integer past what it decodes), not write at all (a lone
    surrogate), or would write changed (NaN and Infinity, which JSON has not, become
    null: the session's history would then differ from its record, and the next request
    could not be sent)."""
    try:
        stored = msgspec.json.decode(msgspec.json.encode(tool_input))
    except (msgspec.DecodeError, UnicodeEncodeError, ValueError, OverflowError) as exc:
        raise ProviderError(f"model sent an input for tool {name!r} that cannot be "
                            f"stored: {exc}") from exc
    if stored != tool_input:
        raise ProviderError(f"model sent an input for tool {name!r} that cannot be "
                            "stored as it is (NaN or Infinity)")


MAX_TOKEN_COUNT = 2**31 - 1
"""The largest token count a response may report: more is no model's (and a count past
64 bits could not be stored)."""


def _usage(sdk_usage: Any, current: Usage) -> Usage:
    """Merge an SDK usage object into ``current`` (message_delta counts are cumulative).
    A count that is not a whole number from 0 to :data:`MAX_TOKEN_COUNT` is refused
    (ProviderError): a negative one would give the budget back, a huge one spend it."""
    if sdk_usage is None:
        return current
    counts = []
    for name, kept in (("input_tokens", current.input_tokens),
                       ("output_tokens", current.output_tokens)):
        value = getattr(sdk_usage, name, None)
        if value is None:
            counts.append(kept)
        elif isinstance(value, int) and not isinstance(value, bool) and (
                0 <= value <= MAX_TOKEN_COUNT):
            counts.append(value)
        else:
            raise ProviderError(f"model reported {name} that is not a count: {value!r:.40}")
    return Usage(input_tokens=counts[0], output_tokens=counts[1])


def _is_transport_error(exc: BaseException) -> bool:
    """Whether ``exc`` is an HTTP transport error (connection dropped or broken) of the
    SDK's HTTP library (``httpx`` or its fork ``httpx2``, depending on the SDK version)."""
    return any(
        cls.__name__ == "TransportError" and cls.__module__.split(".")[0] in ("httpx", "httpx2")
        for cls in type(exc).__mro__
    )


def _error_fields(exc: Any) -> tuple[str, str]:
    """``(error.type, error.message)`` of an APIStatusError's body (empty when absent)."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            return str(error.get("type", "") or ""), str(error.get("message", "") or "")
    return "", ""


def _status_message(exc: Any) -> str:
    """The user's message for an APIStatusError: ``model API error 529 (overloaded_error):
    Overloaded`` for an HTTP error, ``model API error (overloaded_error, mid-stream):
    Overloaded`` for an ``error`` event after the stream answered 200."""
    status = int(getattr(exc, "status_code", 0) or 0)
    kind, message = _error_fields(exc)
    if not message:
        body = getattr(exc, "body", None)
        if status < 400 and isinstance(body, str) and body.strip():
            message = body.strip()  # a mid-stream error event whose data is not JSON
        else:
            message = str(getattr(exc, "message", "")) or str(exc)
    if status < 400:
        label = f"{kind}, mid-stream" if kind else "mid-stream"
        return f"model API error ({label}): {message}"
    label = f" ({kind})" if kind else ""
    return f"model API error {status or '?'}{label}: {message}"
