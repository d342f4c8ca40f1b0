"""``McpTools``: one long-lived connection per MCP server on a loop of its own,
reconnected after a failure; calls that never hang (see the package's docstring)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import json
import logging
import os
import threading
import time
from collections.abc import Iterable
from typing import Any, NamedTuple, TextIO

import anyio
import httpx
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import ClientSession, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError
from mcp.shared.message import SessionMessage

from actors.gatekeeper.security.action import ReadOnlyTools
from actors.ports import ToolOutput
from adapters.config import McpServer, McpSettings
from adapters.mcp_tools.naming import (
    SEPARATOR,
    McpTool,
    group_name,
    name_tools,
)
from adapters.mcp_tools.results import (
    DEFAULT_MAX_OUTPUT_CHARS,
    describe_error,
    render_result,
    schema_problem,
)
from adapters.mcp_tools.stdio import refusal, stdio_parameters
from adapters.sandbox import Sandbox
from adapters.tools.shell import NO_SANDBOX, Unconfined

log = logging.getLogger(__name__)


#: Seconds before the first retry of a server that could not be reached; it doubles up
#: to :data:`RETRY_MAX`.
RETRY_FIRST = 1.0


RETRY_MAX = 60.0


#: Seconds a connection must stay up before a loss starts the retry rhythm afresh.
STABLE_AFTER = 30.0


#: Seconds between two pings of a server while a call to it waits.
PING_INTERVAL = 5.0


#: Most seconds spent sending the cancellation of a call that timed out.
CANCEL_GRACE = 5.0


#: Most pages of ``tools/list`` read from one server.
MAX_TOOL_PAGES = 50


#: Seconds :meth:`McpTools.stop` lets connections close before cancelling them.
STOP_GRACE = 5.0


class McpServerStatus(NamedTuple):
    """How one server stands: connected now, how many connections worked so far, the
    last failure ('' after a success) and the tools it offers (namespaced)."""

    connected: bool
    connects: int
    error: str
    tools: tuple[str, ...]


class _NotSent(Exception):
    """The call never reached the server; it may be sent on a fresh connection."""


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


class _Server:
    """One configured server. Touched on the manager's loop only, apart from ``tools`` and
    ``listed`` (replaced whole under the manager's lock) and ``attempted``."""

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


class McpTools:
    """The MCP servers of ``settings`` as lazily loadable tool groups (module docstring).

    :meth:`start` starts the loop and connects every server in the background;
    :meth:`wait_ready` waits for each server's first attempt; :meth:`stop` closes every
    connection (stdio servers' processes end with it); a stopped manager stays stopped.
    ``sandbox``: what stdio servers run in (:mod:`adapters.mcp_tools.stdio`; by default none
    can be built, so they are not started).
    ``log_dir`` receives each stdio server's standard error as ``mcp-<name>.log``
    (default: discarded). A stdio server without a ``cwd`` runs in the folder that was
    current when the manager was made (:meth:`read_only_tools` says so too). The timing
    parameters are in seconds (module docstring; tests shorten them).
    """

    def __init__(self, settings: McpSettings, *, sandbox: Sandbox | Unconfined = NO_SANDBOX,
                 log_dir: str | None = None,
                 max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
                 ping_interval: float = PING_INTERVAL, retry_first: float = RETRY_FIRST,
                 retry_max: float = RETRY_MAX, stable_after: float = STABLE_AFTER) -> None:
        self.settings = settings
        self.log_dir = log_dir
        self.max_output_chars = max_output_chars
        self.ping_interval = ping_interval
        self.retry_first = retry_first
        self.retry_max = retry_max
        self.stable_after = stable_after
        self.cwd = os.getcwd()
        self.sandbox = sandbox
        self._servers = {name: _Server(name, config) for name, config in settings.servers.items()}
        for server in self._servers.values():
            server.refusal = refusal(server.config, sandbox)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closing = False

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> McpTools:
        """Start the event loop thread and a supervisor per server; returns at once."""
        if self._loop is not None:
            return self
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._loop = loop
        self._thread = threading.Thread(target=self._run_loop, args=(loop, ready),
                                        name="mcp", daemon=True)
        self._thread.start()
        ready.wait()
        for server in self._servers.values():
            asyncio.run_coroutine_threadsafe(self._begin(server), loop).result()
        return self

    def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until every server has been tried once (connected or failed), at most
        ``timeout`` seconds (default: ``connect_timeout`` and a second)."""
        limit = self.settings.connect_timeout + 1 if timeout is None else timeout
        end = time.monotonic() + limit
        for server in self._servers.values():
            server.attempted.wait(max(0.0, end - time.monotonic()))

    def stop(self) -> None:
        """Close every connection and stop the loop; never raises. Calls still running
        get an error result."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._closing = True
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(STOP_GRACE + 5)
        except Exception:
            log.exception("closing the MCP connections failed")
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        self._loop = None

    @staticmethod
    def _run_loop(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        try:
            loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _begin(self, server: _Server) -> None:
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

    async def _shutdown(self) -> None:
        """End every supervisor (live connections close cleanly, the rest are cancelled),
        then every call still waiting, so nothing is left pending on the loop."""
        tasks = [s.task for s in self._servers.values() if s.task is not None]
        for server in self._servers.values():
            server.lost.set()
            server.wake.set()
            if server.session is None and server.task is not None:
                server.task.cancel()  # connecting or waiting to retry: nothing to close
        await _finish(tasks)
        for server in self._servers.values():
            await self._settle(server)  # calls waiting for a connection give up now
        await _finish(asyncio.all_tasks() - {asyncio.current_task()})

    def server_cwd(self, config: McpServer) -> str:
        """The folder a stdio server runs in: its ``cwd`` (taken from the manager's folder
        when relative), else the manager's."""
        return os.path.normpath(os.path.join(self.cwd, config.cwd)) if config.cwd else self.cwd

    def read_only_tools(self) -> tuple[ReadOnlyTools, ...]:
        """The servers with ``trust = "read"`` for the gatekeeper: each one's tool name
        prefix and the folder its tools take relative paths from (None for an HTTP server:
        not known here)."""
        return tuple(
            ReadOnlyTools(f"{name}{SEPARATOR}",
                          self.server_cwd(config) if config.command else None)
            for name, config in self.settings.servers.items() if config.trust == "read")

    # --- connections -------------------------------------------------------------------

    async def _supervise(self, server: _Server) -> None:
        """Keep ``server`` connected until the manager stops (module docstring)."""
        delay = self.retry_first
        while not self._closing:
            server.wake.clear()
            up = await self._connect_once(server)
            if self._closing:
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

    async def _connect_once(self, server: _Server) -> float | None:
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

    async def _settle(self, server: _Server) -> None:
        """Tell the calls waiting on ``server`` that an attempt ended."""
        async with server.settled:
            server.attempts += 1
            server.settled.notify_all()
        server.attempted.set()

    async def _open(self, server: _Server, stack: contextlib.AsyncExitStack,
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
        self, server: _Server, stack: contextlib.AsyncExitStack,
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

    async def _list_tools(self, server: _Server, session: ClientSession) -> dict[str, McpTool]:
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

    def _publish(self, server: _Server, tools: dict[str, McpTool]) -> None:
        with self._lock:
            server.tools = tools
            server.listed = True

    # --- the ToolExecutor port -----------------------------------------------------------

    def groups(self) -> dict[str, str]:
        """One group per server that has listed its tools: what it holds, and whether it
        is unreachable now."""
        with self._lock:
            listed = [s for s in self._servers.values() if s.listed]
            shown = {s.group: (s, sorted(s.tools)) for s in listed}
        groups: dict[str, str] = {}
        for group, (server, names) in shown.items():
            state = "" if server.live() or not server.error else (
                f"; unreachable now ({server.error}), Tether is reconnecting")
            groups[group] = (f"tools of the MCP server {server.name} "
                             f"({', '.join(names) or 'none'}){state}")
        return groups

    def group_of(self, tool: str) -> str | None:
        """The group of a listed MCP tool (None for anything else)."""
        server = self._server_of(tool)
        with self._lock:
            return server.group if server is not None and tool in server.tools else None

    def definitions(self, groups: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """The definitions of the listed tools of ``groups`` (every server's when None; a
        single name is accepted too). A group of no configured server has no tools."""
        wanted = None if groups is None else {groups} if isinstance(groups, str) else set(groups)
        with self._lock:
            tools = [t for s in self._servers.values() if wanted is None or s.group in wanted
                     for t in s.tools.values()]
        return [copy.deepcopy(t.definition) for t in tools]

    def owns(self, tool: str) -> bool:
        """Whether ``tool`` is named like a tool of a configured server."""
        return self._server_of(tool) is not None

    def status(self) -> dict[str, McpServerStatus]:
        """Each server's state, for logs and tests."""
        with self._lock:
            return {s.name: McpServerStatus(s.live(), s.connects, s.error, tuple(sorted(s.tools)))
                    for s in self._servers.values()}

    def execute(self, name: str, tool_input: dict[str, Any], workspace: str) -> ToolOutput:
        """Call MCP tool ``name`` (blocking; ``workspace`` is not used: a server works where
        it was started). Never raises, never waits past the timeouts."""
        loop = self._loop
        if loop is None or self._closing:
            return ToolOutput(f"{name} was not run: the MCP connections are closed", True)
        budget = 2 * self.settings.connect_timeout + self.settings.call_timeout + 10
        future = asyncio.run_coroutine_threadsafe(self._call(name, dict(tool_input)), loop)
        try:
            return future.result(timeout=budget)
        except concurrent.futures.TimeoutError:
            future.cancel()
            return ToolOutput(f"{name} did not finish within {budget:g} s; it may have run", True)
        except concurrent.futures.CancelledError:
            return ToolOutput(f"{name} was cut short: the MCP connections were closed; it may "
                              "have run", True)
        except Exception as exc:  # a bug: still an answer, never an exception
            log.exception("MCP call %s failed", name)
            return ToolOutput(f"{name} failed: {type(exc).__name__}: {exc}", True)

    # --- calls ---------------------------------------------------------------------------

    def _server_of(self, tool: str) -> _Server | None:
        return next((s for s in self._servers.values() if tool.startswith(s.prefix)), None)

    async def _call(self, name: str, arguments: dict[str, Any]) -> ToolOutput:
        """Run one call on the loop: connect if needed, send once (twice only when the
        first certainly did not reach the server)."""
        server = self._server_of(name)
        if server is None:
            return ToolOutput(f"unknown MCP tool {name!r}", True)
        if server.refusal:
            return ToolOutput(f"{name} was not run: MCP server {server.name} is not started: "
                              f"{server.refusal}", True)
        for attempt in (1, 2):
            problem = await self._connected(server)
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

    async def _connected(self, server: _Server) -> str:
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

    async def _send(self, server: _Server, tool: McpTool, arguments: dict[str, Any]
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

    async def _ping(self, server: _Server, session: ClientSession, lost: asyncio.Event
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

    async def _cancel(self, server: _Server, session: ClientSession, sent: list[int],
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

    def _outcome(self, server: _Server, tool: McpTool,
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

    def _mcp_error(self, server: _Server, tool: McpTool, exc: McpError,
                   lost: asyncio.Event) -> ToolOutput:
        """A JSON-RPC error answer, or the SDK's word for a lost connection."""
        code, message = exc.error.code, exc.error.message
        if code == types.CONNECTION_CLOSED:
            lost.set()
            return self._lost(server, tool)
        if _session_terminated(exc):  # HTTP 404: the server forgot the session
            raise _NotSent(f"MCP server {server.name} no longer knew the session")
        return ToolOutput(f"MCP server {server.name} refused {tool.name}: {message}", True)

    def _lost(self, server: _Server, tool: McpTool) -> ToolOutput:
        """The result of a call whose connection ended under it: it may have run."""
        why = f" ({server.error})" if server.error else ""
        then = ("Tether is stopping" if self._closing else
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
