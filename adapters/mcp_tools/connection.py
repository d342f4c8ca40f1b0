"""Keeping each MCP server connected, on the manager's loop.

:class:`Connections` holds the configured servers (:class:`Server`) and runs one
supervisor task per server: it connects (stdio in the sandbox, or streamable HTTP), lists
the server's tools and holds the connection until it is lost, then connects again after a
pause that doubles while attempts fail (the package docstring, "Connections"). Callers
wait for a connection with :meth:`Connections.connected`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterable
from typing import Any, TextIO

import anyio
import httpx
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import ClientSession, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from tether.adapters.config import McpServer, McpSettings
from tether.adapters.mcp_tools.naming import SEPARATOR, McpTool, group_name, name_tools
from tether.adapters.mcp_tools.results import describe_error
from tether.adapters.mcp_tools.stdio import refusal, stdio_parameters
from tether.adapters.sandbox import Sandbox
from tether.adapters.tools.shell import Unconfined

log = logging.getLogger(__name__)


#: Seconds before the first retry of a server that could not be reached; it doubles up
#: to :data:`RETRY_MAX`.
RETRY_FIRST = 1.0


RETRY_MAX = 60.0


#: Seconds a connection must stay up before a loss starts the retry rhythm afresh.
STABLE_AFTER = 30.0


#: Most pages of ``tools/list`` read from one server.
MAX_TOOL_PAGES = 50


#: Seconds :meth:`Connections.shutdown` lets connections close before cancelling them.
STOP_GRACE = 5.0


class Server:
    """One configured server. Touched on the manager's loop only, apart from ``tools`` and
    ``listed`` (replaced whole under the connections' lock) and ``attempted``."""

    def __init__(self, name: str, config: McpServer) -> None:
        self.name = name
        self.config = config
        self.prefix = f"{name}{SEPARATOR}"
        self.group = group_name(name)
        self.tools: dict[str, McpTool] = {}
        self.listed = False
        self.session: ClientSession | None = None
        # The ids of this connection's requests its HTTP client could not send.
        self.refused: set[int | str] = set()
        self.lost = asyncio.Event()
        self.wake = asyncio.Event()
        self.settled = asyncio.Condition()
        self.attempts = 0
        self.connects = 0
        self.error = ""
        self.reported = ""
        self.task: asyncio.Task[None] | None = None
        self.attempted = threading.Event()
        # Why it is not started at all ('' when it is): no sandbox for a stdio server.
        self.refusal = ""

    def live(self) -> bool:
        """Connected, and the connection not known to be lost."""
        return self.session is not None and not self.lost.is_set()


class _HttpClient(httpx.AsyncClient):
    """An HTTP client that remembers the JSON-RPC ids of the requests it could not send
    because the connection could not be opened: those certainly did not reach the
    server. (The SDK reports them only as a closed connection.)"""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.refused: set[int | str] = set()

    async def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        """``httpx.AsyncClient.send``, noting the id of a POST that could not connect."""
        try:
            return await super().send(request, **kwargs)
        except (httpx.ConnectError, httpx.ConnectTimeout):
            if request.method == "POST":
                ident = _jsonrpc_id(request.content)
                if ident is not None:
                    self.refused.add(ident)
            raise


def _jsonrpc_id(body: bytes) -> int | str | None:
    """The id of the JSON-RPC request in ``body`` (None for anything else)."""
    try:
        message = json.loads(body)
    except ValueError:
        return None
    ident = message.get("id") if isinstance(message, dict) else None
    return ident if isinstance(ident, int | str) and not isinstance(ident, bool) else None


class Connections:
    """The servers of ``settings`` and their connections. Runs on the manager's loop,
    apart from ``servers``' ``tools`` and ``listed`` (replaced whole under ``lock``) and
    ``attempted``. Once ``closing`` is set, supervisors stop reconnecting."""

    def __init__(self, settings: McpSettings, *, sandbox: Sandbox | Unconfined, cwd: str,
                 log_dir: str | None, retry_first: float, retry_max: float,
                 stable_after: float) -> None:
        self.settings = settings
        self.sandbox = sandbox
        self.cwd = cwd
        self.log_dir = log_dir
        self.retry_first = retry_first
        self.retry_max = retry_max
        self.stable_after = stable_after
        self.servers = {name: Server(name, config) for name, config in settings.servers.items()}
        for server in self.servers.values():
            server.refusal = refusal(server.config, sandbox)
        self.lock = threading.Lock()
        self.closing = False

    def server_of(self, tool: str) -> Server | None:
        """The server ``tool`` is named after (None for anything else)."""
        return next((s for s in self.servers.values() if tool.startswith(s.prefix)), None)

    async def begin(self, server: Server) -> None:
        """Bind the server's events to this loop and start its supervisor."""
        server.lost, server.wake, server.settled = asyncio.Event(), asyncio.Event(), (
            asyncio.Condition())
        if server.refusal:
            server.error = server.refusal
            log.warning("MCP server %s is not started: %s", server.name, server.refusal)
            server.attempted.set()
            return
        server.task = asyncio.get_running_loop().create_task(
            self._supervise(server), name=f"mcp-{server.name}")

    async def shutdown(self) -> None:
        """End every supervisor (live connections close cleanly, the rest are cancelled),
        then every call still waiting, so nothing is left pending on the loop."""
        tasks = [s.task for s in self.servers.values() if s.task is not None]
        for server in self.servers.values():
            server.lost.set()
            server.wake.set()
            if server.session is None and server.task is not None:
                server.task.cancel()  # connecting or waiting to retry: nothing to close
        await _finish(tasks)
        for server in self.servers.values():
            await self._settle(server)  # calls waiting for a connection give up now
        await _finish(asyncio.all_tasks() - {asyncio.current_task()})

    def server_cwd(self, config: McpServer) -> str:
        """The folder a stdio server runs in: its ``cwd`` (taken from the manager's folder
        when relative), else the manager's."""
        return os.path.normpath(os.path.join(self.cwd, config.cwd)) if config.cwd else self.cwd

    async def _supervise(self, server: Server) -> None:
        """Keep ``server`` connected until ``closing`` (the package docstring)."""
        delay = self.retry_first
        while not self.closing:
            server.wake.clear()
            up = await self._connect_once(server)
            if self.closing:
                break
            if up is not None:
                if up >= self.stable_after:
                    delay = self.retry_first
                log.warning("MCP server %s: the connection was lost after %.1f s (%s); "
                            "reconnecting in %g s or at the next call", server.name, up,
                            server.error or "it closed", delay)
            else:
                # Said once per different failure; the same failure again only in the debug log.
                level = logging.DEBUG if server.error == server.reported else logging.WARNING
                server.reported = server.error
                log.log(level, "MCP server %s is unavailable: %s; next attempt in %g s or at "
                        "the next call of one of its tools", server.name, server.error, delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(server.wake.wait(), delay)
            delay = min(delay * 2, self.retry_max)

    async def _connect_once(self, server: Server) -> float | None:
        """Connect, list the tools, hold the connection until it is lost. The seconds the
        connection was up, None when it never worked; never raises (the failure is kept
        in ``server.error``)."""
        lost = server.lost = asyncio.Event()
        worked = False
        since = time.monotonic()
        try:
            async with contextlib.AsyncExitStack() as stack:
                session = await self._open(server, stack, lost)
                with anyio.fail_after(self.settings.connect_timeout):
                    await session.initialize()
                    tools = await self._list_tools(server, session)
                self._publish(server, tools)
                server.session, server.error, server.reported, worked = session, "", "", True
                server.connects += 1
                since = time.monotonic()
                log.info("MCP server %s connected (%s): %d tools", server.name,
                         server.config.transport, len(tools))
                await self._settle(server)
                await lost.wait()
        except Exception as exc:
            server.error = describe_error(exc, self.settings.connect_timeout)
        finally:
            server.session = None
            lost.set()
        if not worked:
            await self._settle(server)
            return None
        return time.monotonic() - since

    async def _settle(self, server: Server) -> None:
        """Tell the calls waiting on ``server`` that an attempt ended."""
        async with server.settled:
            server.attempts += 1
            server.settled.notify_all()
        server.attempted.set()

    async def _open(self, server: Server, stack: contextlib.AsyncExitStack,
                    lost: asyncio.Event) -> ClientSession:
        """Open the transport and the client session on ``stack``; ``lost`` is set when
        the server's side of the connection ends."""
        server.refused = set()
        read, write = await self._transport(server, stack)
        sink, watched = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        for stream in (read, write, sink, watched):  # closing twice is fine; never left open
            stack.push_async_callback(stream.aclose)
        group = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(group.cancel_scope.cancel)
        group.start_soon(_forward, read, sink, lost)
        return await stack.enter_async_context(ClientSession(watched, write))

    async def _transport(
        self, server: Server, stack: contextlib.AsyncExitStack,
    ) -> tuple[MemoryObjectReceiveStream[SessionMessage | Exception],
               MemoryObjectSendStream[SessionMessage]]:
        """The SDK's stdio or streamable HTTP transport for ``server``, entered on
        ``stack``; an HTTP client's refused requests go to ``server.refused``."""
        config = server.config
        if config.command:
            # Entered first, so it ends after the process (it holds the sandbox's mounts).
            params = stack.enter_context(
                stdio_parameters(config, self.server_cwd(config), self.sandbox))
            errlog = stack.enter_context(self._errlog(server.name))
            return await stack.enter_async_context(stdio_client(params, errlog=errlog))
        timeout = httpx.Timeout(self.settings.connect_timeout,
                                read=max(300.0, self.settings.call_timeout + 30))
        # What mcp.shared._httpx_utils.create_mcp_http_client makes, noting refusals.
        client = await stack.enter_async_context(
            _HttpClient(headers=dict(config.headers) or None, timeout=timeout))
        server.refused = client.refused
        read, write, _ = await stack.enter_async_context(
            streamable_http_client(config.url, http_client=client))
        return read, write

    def _errlog(self, name: str) -> TextIO:
        """Where a stdio server's standard error goes (a file the caller closes)."""
        if self.log_dir is None:
            return open(os.devnull, "w", encoding="utf-8")
        os.makedirs(self.log_dir, exist_ok=True)
        return open(os.path.join(self.log_dir, f"mcp-{name}.log"), "a", encoding="utf-8")

    async def _list_tools(self, server: Server, session: ClientSession) -> dict[str, McpTool]:
        """Every tool the server lists (following pages), namespaced and defined."""
        listed: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_TOOL_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            listed.extend(page.tools)
            cursor = page.nextCursor
            if not cursor:
                break
        return name_tools(server.name, listed)

    def _publish(self, server: Server, tools: dict[str, McpTool]) -> None:
        with self.lock:
            server.tools = tools
            server.listed = True

    async def connected(self, server: Server) -> str:
        """Wait until ``server`` is connected (asking for an attempt if it is down); ''
        when it is, else why it is not."""
        if server.live():
            return ""
        timeout = self.settings.connect_timeout + 1
        async with server.settled:
            seen = server.attempts
            server.wake.set()
            try:
                await asyncio.wait_for(
                    server.settled.wait_for(lambda: server.attempts > seen or server.live()),
                    timeout)
            except TimeoutError:
                return f"MCP server {server.name} did not answer within {timeout:g} s"
        if server.live():
            return ""
        return f"MCP server {server.name} is unavailable ({server.error or 'not connected'})"


async def _finish(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Give ``tasks`` :data:`STOP_GRACE` seconds to end, then cancel what is left."""
    pending = set(tasks)
    if pending:
        _, pending = await asyncio.wait(pending, timeout=STOP_GRACE)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=STOP_GRACE)


async def _forward(source: MemoryObjectReceiveStream[SessionMessage | Exception],
                   sink: MemoryObjectSendStream[SessionMessage | Exception],
                   lost: asyncio.Event) -> None:
    """Pass the server's messages on to the session; set ``lost`` when they end."""
    try:
        async with sink:
            async for message in source:
                await sink.send(message)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass
    finally:
        lost.set()
