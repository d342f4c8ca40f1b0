"""Calling an MCP tool on its server's connection: never raising, never hanging.

:class:`Calls` waits for the server's connection, sends the call once (twice only when
the first certainly did not reach the server), pings the server while the call waits,
sends a cancellation after ``call_timeout`` and turns every outcome into a ``ToolOutput``
(the package docstring, "Calls").
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import anyio
from mcp import ClientSession, types
from mcp.shared.exceptions import McpError

from tether.actors.ports import ToolOutput
from tether.adapters.config import McpSettings
from tether.adapters.mcp_tools.connection import Connections, Server
from tether.adapters.mcp_tools.naming import McpTool
from tether.adapters.mcp_tools.results import describe_error, render_result, schema_problem

log = logging.getLogger(__name__)


#: Seconds between two pings of a server while a call to it waits.
PING_INTERVAL = 5.0


#: Most seconds spent sending the cancellation of a call that timed out.
CANCEL_GRACE = 5.0


class _NotSent(Exception):
    """The call never reached the server; it may be sent on a fresh connection."""


class Calls:
    """Runs calls of the tools of ``connections``' servers, on the manager's loop."""

    def __init__(self, settings: McpSettings, connections: Connections, *,
                 max_output_chars: int, ping_interval: float) -> None:
        self.settings = settings
        self.connections = connections
        self.max_output_chars = max_output_chars
        self.ping_interval = ping_interval

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolOutput:
        """Run one call on the loop: connect if needed, send once (twice only when the
        first certainly did not reach the server)."""
        server = self.connections.server_of(name)
        if server is None:
            return ToolOutput(f"unknown MCP tool {name!r}", True)
        if server.refusal:
            return ToolOutput(f"{name} was not run: MCP server {server.name} is not started: "
                              f"{server.refusal}", True)
        for attempt in (1, 2):
            problem = await self.connections.connected(server)
            if problem:
                return ToolOutput(f"{name} was not run: {problem}", True)
            tool = server.tools.get(name)
            if tool is None:
                offered = ", ".join(sorted(server.tools)) or "none"
                return ToolOutput(f"MCP server {server.name} has no tool {name!r} "
                                  f"(its tools: {offered})", True)
            try:
                return await self._send(server, tool, arguments)
            except _NotSent as exc:
                if attempt == 2:
                    return ToolOutput(f"{name} was not run: {exc}", True)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _send(self, server: Server, tool: McpTool, arguments: dict[str, Any]
                    ) -> ToolOutput:
        """Send one call on the live session and wait for its result, the loss of the
        connection (noticed by the transport or a failed ping) or the timeout, whichever
        comes first. Raises :class:`_NotSent` when the call certainly did not leave."""
        session, lost, refused = server.session, server.lost, server.refused
        timeout = self.settings.call_timeout
        assert session is not None
        request = types.ClientRequest(types.CallToolRequest(
            params=types.CallToolRequestParams(name=tool.remote, arguments=arguments)))
        sent: list[int] = []

        async def send() -> types.CallToolResult:
            sent.extend(_next_request_id(session))
            # Not ClientSession.call_tool: it checks the output schema itself and raises,
            # which would lose the result of a call that ran.
            return await session.send_request(request, types.CallToolResult)

        call = asyncio.ensure_future(send())
        watch = asyncio.ensure_future(lost.wait())
        pinger = asyncio.ensure_future(self._ping(server, session, lost))
        try:
            await asyncio.wait({call, watch}, timeout=timeout,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
            pinger.cancel()
        if call.done():
            try:
                return self._outcome(server, tool, call, lost, sent, refused)
            except _NotSent as exc:
                server.error = str(exc)
                lost.set()  # the supervisor reconnects
                raise
        call.cancel()
        if lost.is_set():
            if any(ident in refused for ident in sent):
                raise _NotSent(f"MCP server {server.name} refused the connection")
            return self._lost(server, tool)
        await self._cancel(server, session, sent, f"no answer within {timeout:g} s")
        return ToolOutput(f"{tool.name} did not answer within {timeout:g} s; it may still be "
                          "running on the MCP server", True)

    async def _ping(self, server: Server, session: ClientSession, lost: asyncio.Event
                    ) -> None:
        """Ping the server every ``ping_interval`` seconds until cancelled; when a ping
        shows the connection is gone, say why in ``server.error`` and set ``lost``. Any
        answer, even an error, shows the server is there."""
        while not lost.is_set():
            await asyncio.sleep(self.ping_interval)
            try:
                await session.send_ping()
            except McpError as exc:
                if not _gone(exc):
                    continue
                problem = exc.error.message
            except Exception as exc:
                problem = describe_error(exc, self.settings.connect_timeout)
            else:
                continue
            if not lost.is_set():
                server.error = f"a ping failed: {problem}"
                lost.set()
            return

    async def _cancel(self, server: Server, session: ClientSession, sent: list[int],
                      reason: str) -> None:
        """Best effort: tell the server to stop the request ``sent`` names."""
        if not sent:
            return
        note = types.ClientNotification(types.CancelledNotification(
            params=types.CancelledNotificationParams(requestId=sent[0], reason=reason)))
        try:
            await asyncio.wait_for(session.send_notification(note), CANCEL_GRACE)
        except Exception as exc:
            log.info("MCP server %s: the cancellation of request %s was not sent: %s",
                     server.name, sent[0], describe_error(exc, CANCEL_GRACE))

    def _outcome(self, server: Server, tool: McpTool,
                 call: asyncio.Future[types.CallToolResult], lost: asyncio.Event,
                 sent: list[int], refused: set[int | str]) -> ToolOutput:
        """The finished call as a result; raises :class:`_NotSent` when it never left."""
        exc = call.exception()
        if exc is None:
            return self._result(tool, call.result())
        never_left = any(ident in refused for ident in sent)
        if isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError) or (
                never_left and isinstance(exc, McpError) and _gone(exc)):
            why = "refused the connection" if never_left else "had closed the connection"
            raise _NotSent(f"MCP server {server.name} {why}")
        if isinstance(exc, McpError):
            return self._mcp_error(server, tool, exc, lost)
        return ToolOutput(f"{tool.name} failed: {type(exc).__name__}: {exc}", True)

    def _result(self, tool: McpTool, result: types.CallToolResult) -> ToolOutput:
        """A result as the model sees it; one that breaks the tool's output schema is an
        error result saying that the tool ran (so the model does not run it again)."""
        output = render_result(result, self.max_output_chars)
        if result.isError or tool.output_schema is None:
            return output
        problem = schema_problem(result.structuredContent, tool.output_schema)
        if not problem:
            return output
        return ToolOutput(f"{tool.name} ran, but {problem}; it is not run again by itself. "
                          f"What it returned:\n{output.content}", True)

    def _mcp_error(self, server: Server, tool: McpTool, exc: McpError,
                   lost: asyncio.Event) -> ToolOutput:
        """A JSON-RPC error answer, or the SDK's word for a lost connection."""
        code, message = exc.error.code, exc.error.message
        if code == types.CONNECTION_CLOSED:
            lost.set()
            return self._lost(server, tool)
        if _session_terminated(exc):  # HTTP 404: the server forgot the session
            raise _NotSent(f"MCP server {server.name} no longer knew the session")
        return ToolOutput(f"MCP server {server.name} refused {tool.name}: {message}", True)

    def _lost(self, server: Server, tool: McpTool) -> ToolOutput:
        """The result of a call whose connection ended under it: it may have run."""
        why = f" ({server.error})" if server.error else ""
        then = ("Tether is stopping" if self.connections.closing else
                "Tether is reconnecting, call it again if it should run")
        return ToolOutput(
            f"the connection to MCP server {server.name} was lost during {tool.name}{why}: "
            f"the call may or may not have run, so it is not run again by itself; {then}", True)


def _next_request_id(session: ClientSession) -> list[int]:
    """The id the session's next request will get, as a list of one (empty if unknown).

    The SDK offers no public way to learn a request's id; ``BaseSession.send_request``
    takes ``_request_id`` before its first ``await``, so it is read just before calling it.
    """
    ident = getattr(session, "_request_id", None)
    return [ident] if isinstance(ident, int) else []


def _session_terminated(exc: McpError) -> bool:
    """Whether the SDK reports that the HTTP server answered 404 (it no longer knows the
    session, so the request was not run)."""
    # The SDK's streamable HTTP transport makes this error up itself with code 32600 (not
    # types.INVALID_REQUEST, -32600) and no named constant: its message is the one signal.
    return exc.error.message == "Session terminated"


def _gone(exc: McpError) -> bool:
    """Whether ``exc`` says the connection is gone rather than that the server answered."""
    return exc.error.code == types.CONNECTION_CLOSED or _session_terminated(exc)

