"""What a tool call's result becomes for the model: text as it is, other blocks in a
line, an output schema checked, errors described. Pure."""

from __future__ import annotations

import json
from typing import Any

from mcp import types
from mcp.shared.exceptions import McpError

from tether.actors.ports import ToolOutput

#: Most characters of a result returned to the model.
DEFAULT_MAX_OUTPUT_CHARS = 30_000


def schema_problem(structured: dict[str, Any] | None, schema: dict[str, Any]) -> str:
    """Why ``structured`` (a result's structured content) breaks the output ``schema``
    ('' when it does not). ``$ref`` resolves within the schema only, as in the SDK."""
    from jsonschema import SchemaError, ValidationError, validate
    from referencing import Registry
    from referencing.exceptions import Unresolvable

    if structured is None:
        return "it returned no structured content although its output schema asks for it"
    try:
        validate(structured, schema, registry=Registry())
    except ValidationError as exc:
        return f"its structured content does not match its output schema: {exc.message}"
    except (SchemaError, Unresolvable) as exc:
        return f"its output schema cannot be checked: {exc}"
    return ""


def describe_error(exc: BaseException, connect_timeout: float) -> str:
    """One line for a failed connection: the innermost error of an exception group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return f"no answer within {connect_timeout:g} s"
    if isinstance(exc, McpError):
        return exc.error.message
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def render_result(result: types.CallToolResult, max_chars: int = DEFAULT_MAX_OUTPUT_CHARS
                  ) -> ToolOutput:
    """A tool result as the model sees it: text blocks as they are, other blocks one line
    each, structured content as JSON when there is nothing else; cut at ``max_chars``."""
    parts = [describe_block(block) for block in result.content]
    if not parts and result.structuredContent is not None:
        parts = [json.dumps(result.structuredContent, ensure_ascii=False)]
    text = "\n".join(parts) or "(no output)"
    if len(text) > max_chars:
        text = (f"{text[:max_chars]}\n[output truncated: {len(text)} characters, the first "
                f"{max_chars} shown]")
    return ToolOutput(text, bool(result.isError))


def describe_block(block: types.ContentBlock) -> str:
    """A content block as text: a text block's text, else one line saying what it is."""
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent | types.AudioContent):
        size = len(block.data) * 3 // 4
        return f"[{block.type} block: {block.mimeType}, about {size} bytes, not shown]"
    if isinstance(block, types.ResourceLink):
        about = f": {block.description}" if block.description else ""
        return f"[resource link {block.uri} ({block.name}){about}]"
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, types.TextResourceContents):
            return f"[resource {resource.uri}]\n{resource.text}"
        size = len(resource.blob) * 3 // 4
        return f"[resource {resource.uri}: {resource.mimeType or 'binary'}, about {size} " \
               "bytes, not shown]"
    return f"[{getattr(block, 'type', type(block).__name__)} block, not shown]"
