"""MCP servers as tool groups, through the official ``mcp`` Python SDK.

:class:`McpTools` keeps one long-lived ``mcp.ClientSession`` per server named in the
``[mcp.servers.NAME]`` settings, all on an asyncio event loop of its own (thread ``mcp``):
a local process spoken to over stdio (``mcp.client.stdio.stdio_client``) or a streamable
HTTP endpoint (``mcp.client.streamable_http.streamable_http_client``). Each server is one
tool group, ``mcp_<name>``; its tools are named ``<name>__<tool>`` (:func:`tool_name`:
characters the Messages API does not allow in a tool name become ``_``, a name longer
than 64 characters is cut and ends in a hash of the tool's own name). A tool whose name
is valid as it is always keeps it; a changed name that clashes with another gets the hash
too; only a tool listed twice under one name is left out. Every change is logged.

Processes. A stdio server runs inside the sandbox for its whole life
(:mod:`adapters.mcp_tools.stdio`): its folder the only writable place, no network unless its
table says ``network = true``; plainly with ``sandbox = "off"``. Where no sandbox can be
built it is not started at all, and each call of one of its tools answers why.

Connections. One supervisor task per server connects, lists the server's tools, then
waits until the connection is lost (the process exits, an HTTP request or a ping fails)
and connects again after a pause: ``retry_first`` (1 s) at first, doubling up to
``retry_max`` (60 s) while attempts fail or connections drop again within
``stable_after`` (30 s); a connection that stayed up that long starts the rhythm afresh.
The next call to one of its tools cuts a pause short. A server that cannot be started
does not stop anything: it is logged, retried in that rhythm, and its group is not
offered until it has answered once (its tools are unknown until then). Once listed, a
server's tools stay offered while it is away, so a session's loaded tools do not vanish;
a call then waits at most ``connect_timeout`` for the connection.

Calls. :meth:`McpTools.execute` (blocking, from any thread) never raises and never
hangs: a call gets ``call_timeout`` seconds, after which the server is sent a
cancellation for it (best effort). While a call waits, the server is pinged every
``ping_interval`` seconds: the SDK does not fail a streamable HTTP request whose server
died (it keeps trying to resume the response stream), so a ping that fails is what ends
the connection. A connection lost during a call is an error result saying the call may
or may not have run, and the call is never sent again by itself. Only a call that
certainly did not reach the server (the connection was already closed, the HTTP server
refused the connection, or it no longer knew the session) is sent once more on a fresh
connection. Text blocks of a result are returned as they are, other blocks described in
a line; ``isError`` becomes ``is_error``; a result that does not match the tool's output
schema is an error result that says the tool ran.

:class:`WithMcpTools` serves the built-in tools and the MCP groups through the one
``ToolExecutor`` port. Every call still goes through the gatekeeper first: the session
asks it before running any tool (docs/security.md, "MCP tools").

The package, by concern: :mod:`.manager` (``McpTools``, its loop and the port),
:mod:`.connection` (keeping each server connected), :mod:`.calls` (one call, never
hanging), :mod:`.naming`, :mod:`.results`, :mod:`.stdio` and :mod:`.executor`.
"""

from __future__ import annotations

from tether.adapters.mcp_tools.executor import WithMcpTools
from tether.adapters.mcp_tools.manager import McpServerStatus, McpTools
from tether.adapters.mcp_tools.naming import McpTool, group_name, hashed_name, name_tools, tool_name
from tether.adapters.mcp_tools.results import render_result, schema_problem

__all__ = ["McpServerStatus", "McpTool", "McpTools", "WithMcpTools", "group_name", "hashed_name",
           "name_tools", "render_result", "schema_problem", "tool_name"]
