"""The script the stand-in plays: its YAML shape, decoded strictly (``parse_script``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import msgspec.yaml

DEFAULT_CHUNK = 12


EXHAUSTED_TEXT = "(script exhausted)"


class ScriptError(ValueError):
    """A fake-LLM script could not be read or is not valid; the message names the problem."""


class ToolUseSpec(msgspec.Struct, forbid_unknown_fields=True):
    """A tool call the fake model makes: tool ``name`` and its ``input`` object; ``id``
    when given (a model that repeats an id), else one minted by the server."""

    name: str
    input: dict[str, Any] = {}
    id: str | None = None


class Block(msgspec.Struct, forbid_unknown_fields=True):
    """One content block of a scripted response: exactly one of ``text``, ``thinking``
    or ``tool_use``."""

    text: str | None = None
    thinking: str | None = None
    tool_use: ToolUseSpec | None = None

    def __post_init__(self) -> None:
        given = [v for v in (self.text, self.thinking, self.tool_use) if v is not None]
        if len(given) != 1:
            raise ValueError("a block needs exactly one of `text`, `thinking` or `tool_use`")


class UsageSpec(msgspec.Struct, forbid_unknown_fields=True):
    """Token usage reported for a scripted response."""

    input_tokens: Annotated[int, msgspec.Meta(ge=0)] = 0
    output_tokens: Annotated[int, msgspec.Meta(ge=0)] = 0


class ErrorSpec(msgspec.Struct, forbid_unknown_fields=True):
    """An HTTP error answer (fault injection), in the Anthropic error format."""

    status: Annotated[int, msgspec.Meta(ge=400, le=599)] = 500
    type: str = "api_error"
    message: str = "scripted error"


class StreamErrorSpec(msgspec.Struct, forbid_unknown_fields=True):
    """An ``error`` event sent in the middle of a stream, after the response's blocks, as
    the real API does when it fails after answering HTTP 200 (fault injection). There is no
    ``status``: the stream's status is already 200. A request without ``stream`` gets the
    HTTP error the type implies (``overloaded_error`` 529, ``rate_limit_error`` 429...,
    500 for an unknown type)."""

    type: str = "api_error"
    message: str = "scripted error"


ERROR_STATUS: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


class Response(msgspec.Struct, forbid_unknown_fields=True):
    """One scripted model response (see the module docstring for the meaning of fields).

    Exactly one outcome: ``blocks`` streamed to the end (non-empty), ``error`` (an HTTP
    error, no blocks), or ``stream_error`` (``blocks``, possibly none, then an error event;
    not with ``truncate``, which is another way to end early)."""

    blocks: list[Block] = []
    match: str | None = None
    chunk: Annotated[int, msgspec.Meta(ge=1)] = DEFAULT_CHUNK
    delay_ms: Annotated[int, msgspec.Meta(ge=0)] = 0
    truncate: bool = False
    usage: UsageSpec | None = None
    error: ErrorSpec | None = None
    stream_error: StreamErrorSpec | None = None

    def __post_init__(self) -> None:
        if self.error is not None and self.stream_error is not None:
            raise ValueError("a response has either `error` or `stream_error`, not both")
        if self.error is not None and self.blocks:
            raise ValueError("a response has either `blocks` or `error`, not both")
        if self.stream_error is not None and self.truncate:
            raise ValueError(
                "a response has either `truncate` or `stream_error`, not both "
                "(each ends the stream early)"
            )
        if self.error is None and self.stream_error is None and not self.blocks:
            raise ValueError(
                "a response needs a non-empty `blocks` list (or an `error` or `stream_error`)"
            )

    @property
    def tool_names(self) -> list[str]:
        """Names of the tools its tool_use blocks call, in order."""
        return [b.tool_use.name for b in self.blocks if b.tool_use is not None]


class Script(msgspec.Struct, forbid_unknown_fields=True):
    """A whole script: the responses in order and what to do when they run out."""

    responses: list[Response]
    on_exhausted: Literal["reply", "error"] = "reply"


def parse_script(text: str) -> Script:
    """Decode a YAML script strictly; raise :class:`ScriptError` naming the problem."""
    try:
        return msgspec.yaml.decode(text, type=Script)
    except msgspec.ValidationError as exc:
        raise ScriptError(f"invalid fake-LLM script: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise ScriptError(f"fake-LLM script is not valid YAML: {exc}") from exc


def load_script(path: str | Path) -> Script:
    """Read and decode the script file at ``path``; errors are :class:`ScriptError` with the
    path in the message (also for a missing or unreadable file)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScriptError(f"{path}: cannot read fake-LLM script: {exc}") from exc
    try:
        return parse_script(text)
    except ScriptError as exc:
        raise ScriptError(f"{path}: {exc}") from exc
