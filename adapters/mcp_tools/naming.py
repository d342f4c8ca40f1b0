"""How an MCP server's tools are named for the model: ``<server>__<tool>``, made valid,
cut and hashed when too long, clashes settled; a tool whose input schema JSON cannot carry
is left out (:func:`name_tools`). Pure."""

from __future__ import annotations

import hashlib
import logging
import math
import re
from collections.abc import Iterable
from typing import Any, NamedTuple

from mcp import types

log = logging.getLogger(__name__)


#: What the Messages API accepts as a tool name.
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


#: Between a server's name and its tool's name.
SEPARATOR = "__"


#: A server's tool group is ``mcp_<server>``.
GROUP_PREFIX = "mcp_"


#: Hex digits of the hash that ends a shortened or disambiguated tool name.
NAME_HASH = 8


def group_name(server: str) -> str:
    """The tool group of ``server``."""
    return f"{GROUP_PREFIX}{server}"


def tool_name(server: str, tool: str) -> str | None:
    """``<server>__<tool>`` with characters the Messages API refuses replaced by ``_``,
    and, when that is longer than 64 characters, cut to end in ``_`` and a hash of
    ``tool`` (:func:`hashed_name`). None for an empty ``tool`` (or a ``server`` that is not
    a valid name itself)."""
    if not tool:
        return None
    name = f"{server}{SEPARATOR}{re.sub(r'[^A-Za-z0-9_-]', '_', tool)}"
    if len(name) > 64:
        name = hashed_name(name, tool)
    return name if TOOL_NAME.match(name) else None


def hashed_name(name: str, tool: str) -> str:
    """``name`` cut so that ``_`` and the first :data:`NAME_HASH` hex digits of the
    SHA-256 of ``tool`` (the server's own name, so the result is stable) fit in 64."""
    suffix = "_" + hashlib.sha256(tool.encode("utf-8")).hexdigest()[:NAME_HASH]
    return name[:64 - len(suffix)] + suffix


class McpTool(NamedTuple):
    """One tool of an MCP server: the name the model calls, its server, the server's own
    name for it, its Messages API definition and its output schema (None if it has none)."""

    name: str
    server: str
    remote: str
    definition: dict[str, Any]
    output_schema: dict[str, Any] | None = None


def name_tools(server: str, listed: Iterable[types.Tool]) -> dict[str, McpTool]:
    """The tools a server listed under their namespaced names (module docstring): names
    valid as they are first, so a changed name never takes one of theirs; a changed name
    that is taken gets a hash (:func:`hashed_name`); what still clashes is left out, and
    so is a tool whose input schema holds NaN or infinity (:func:`not_json`; a client
    may parse them from a server's reply, and the request would send them as null or
    fail). Every change and omission is logged."""
    tools: dict[str, McpTool] = {}
    marked = [(not TOOL_NAME.match(f"{server}{SEPARATOR}{t.name}"), t) for t in listed]
    for changed, tool in sorted(marked, key=lambda pair: pair[0]):  # stable: list order kept
        name = tool_name(server, tool.name)
        if name is None:
            log.warning("MCP server %s: a tool without a usable name (%r) is left out",
                        server, tool.name)
            continue
        unsendable = not_json(tool.inputSchema, "inputSchema")
        if unsendable is not None:
            log.warning("MCP server %s: tool %r is left out: its %s is not a number JSON "
                        "can carry (NaN or infinity), so no request could define it",
                        server, tool.name, unsendable)
            continue
        if changed and name in tools:
            name = hashed_name(name, tool.name)
        if name in tools:
            log.warning("MCP server %s: tool %r is left out: its name %s is taken by %r",
                        server, tool.name, name, tools[name].remote)
            continue
        if name != f"{server}{SEPARATOR}{tool.name}":
            log.info("MCP server %s: tool %r is offered as %s", server, tool.name, name)
        tools[name] = _define(server, name, tool)
    return tools


def not_json(value: Any, path: str) -> str | None:
    """Where in ``value`` (``path`` and the keys and indexes down to it) a float that JSON
    cannot carry (NaN or infinity) lies; None if there is none."""
    if isinstance(value, float):
        return None if math.isfinite(value) else path
    if isinstance(value, dict):
        items: Iterable[tuple[Any, Any]] = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = not_json(item, f"{path}[{key!r}]" if isinstance(key, str) else f"{path}[{key}]")
        if found is not None:
            return found
    return None


def _define(server: str, name: str, tool: types.Tool) -> McpTool:
    schema = dict(tool.inputSchema) if isinstance(tool.inputSchema, dict) else {}
    schema.setdefault("type", "object")
    description = tool.description or tool.title or f"{tool.name} (MCP server {server})"
    output = tool.outputSchema if isinstance(tool.outputSchema, dict) else None
    return McpTool(name, server, tool.name, {
        "name": name, "description": description, "input_schema": schema}, output)
