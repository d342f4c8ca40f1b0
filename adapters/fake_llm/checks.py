"""What the stand-in checks of a request, as the real API would refuse it, and what it
reads of one (the last user text, which a response's ``match`` looks for)."""

from __future__ import annotations

from typing import Any

from tether.adapters.fake_llm.script import (
    Response,
)


def _content_text(content: Any) -> list[str]:
    """Text of a message's content: a string, or text / tool_result blocks."""
    if isinstance(content, str):
        return [content]
    out: list[str] = []
    if isinstance(content, list):
        for block in content:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                out.append(block["text"])
            elif kind == "tool_result":
                out.extend(_content_text(block.get("content", "")))
    return out


def last_user_text(body: dict[str, Any]) -> str:
    """The text of the request's last user message (text blocks and tool_result content,
    joined by newlines); empty when there is none."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return ""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return "\n".join(_content_text(message.get("content")))
    return ""


TOOL_CHOICE_TYPES = ("auto", "any", "tool", "none")


def _tool_names(body: dict[str, Any]) -> list[str] | None:
    """Names of the tools the request defines; None when it defines none (``tools``
    missing or an empty list)."""
    tools = body.get("tools")
    if not isinstance(tools, list) or not tools:
        return None
    return [str(t.get("name")) for t in tools if isinstance(t, dict)]


def _tool_choice_problem(body: dict[str, Any]) -> str | None:
    """What is wrong with the request's ``tool_choice`` (absent: nothing)."""
    if "tool_choice" not in body:
        return None
    choice = body["tool_choice"]
    if not isinstance(choice, dict) or choice.get("type") not in TOOL_CHOICE_TYPES:
        return f"tool_choice.type: must be one of {', '.join(TOOL_CHOICE_TYPES)}"
    kind = choice["type"]
    names = _tool_names(body)
    if kind in ("any", "tool") and names is None:
        return f"tool_choice: `{kind}` may only be specified while providing tools"
    if kind == "tool":
        name = choice.get("name")
        if not isinstance(name, str) or not name:
            return "tool_choice.name: Field required"
        if names is not None and name not in names:
            return f"tool_choice.name: tool `{name}` is not among the request's tools"
    return None


def header_problem(content_type: str | None, version: str | None) -> str | None:
    """What the real Messages API would refuse in a request's headers, or None: the body
    must be declared JSON (``Content-Type: application/json``) and the API's version named
    (``anthropic-version``)."""
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    if kind != "application/json":
        sent = repr(kind) if kind else "none"
        return f"Content-Type must be application/json, not {sent}"
    if not version:
        return "anthropic-version: header is required"
    return None


def request_problem(body: dict[str, Any]) -> str | None:
    """What the real Messages API would refuse in this request, or None.

    Checked: ``messages`` is a non-empty list starting with a user message; roles are
    ``user`` or ``assistant``; text blocks are not empty; every tool_use of an assistant
    message is answered by a tool_result in the next message, which must be a user one;
    every tool_result answers a tool_use of the message just before it; a request whose
    messages hold a tool_use or tool_result block defines ``tools`` (a non-empty list);
    ``tool_choice``, when given, is an object whose ``type`` is auto, any, tool or none,
    ``any`` and ``tool`` come with tools, and ``tool`` names one of them.
    """
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    problem = _tool_choice_problem(body)
    if problem is not None:
        return problem
    has_tools = _tool_names(body) is not None
    if not isinstance(messages[0], dict) or messages[0].get("role") != "user":
        return "messages: the first message must use the user role"
    previous_uses: set[str] = set()
    every_use: set[str] = set()
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            return f"messages.{index}: role must be user or assistant"
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list) or not blocks:
            return f"messages.{index}: content must be a non-empty string or list"
        uses = {
            str(b.get("id")) for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"
        }
        ids = [str(b.get("id")) for b in blocks
               if isinstance(b, dict) and b.get("type") == "tool_use"]
        repeated = sorted({i for i in ids if i in every_use or ids.count(i) > 1})
        if repeated:
            return f"messages.{index}: `tool_use` ids must be unique: {', '.join(repeated)}"
        every_use.update(ids)
        results = {
            str(b.get("tool_use_id"))
            for b in blocks
            if isinstance(b, dict) and b.get("type") == "tool_result"
        }
        for block in blocks:
            if isinstance(block, dict) and block.get("type") == "text" and not block.get("text"):
                return f"messages.{index}: text content blocks must be non-empty"
        if (uses or results) and not has_tools:
            return (
                f"messages.{index}: Requests which include `tool_use` or `tool_result` "
                "blocks must define tools."
            )
        if previous_uses:
            missing = previous_uses - results
            if message["role"] != "user" or missing:
                return (
                    f"messages.{index}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(sorted(missing or previous_uses))}"
                )
        extra = results - previous_uses
        if extra:
            return (
                f"messages.{index}: unexpected `tool_use_id` found in `tool_result` blocks: "
                f"{', '.join(sorted(extra))}"
            )
        previous_uses = uses if message["role"] == "assistant" else set()
    return None


def tool_choice_problem(body: dict[str, Any], response: Response) -> str | None:
    """Why the real API could not answer ``body`` with ``response``, given the request's
    ``tool_choice`` (a script problem), or None.

    ``none``: the model never calls a tool, so no tool_use block may be scripted. ``any``:
    at least one tool_use block. ``tool``: a tool_use block calling the named tool. A
    response that is an HTTP ``error`` has no blocks and is always possible.
    """
    choice = body.get("tool_choice")
    if response.error is not None or not isinstance(choice, dict):
        return None
    kind = choice.get("type")
    called = response.tool_names
    if kind == "none" and called:
        return (
            "the request's tool_choice is `none` (the real API never returns tool_use then) "
            f"but the scripted response calls {', '.join(called)}"
        )
    if kind == "any" and not called and response.stream_error is None:
        return "the request's tool_choice is `any` but the scripted response calls no tool"
    if kind == "tool" and choice.get("name") not in called and response.stream_error is None:
        return (
            f"the request's tool_choice is tool `{choice.get('name')}` but the scripted "
            "response does not call it"
        )
    return None
