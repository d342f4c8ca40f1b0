"""``McpTools``: the MCP servers as tool groups, behind the ``ToolExecutor`` port.

It owns the event loop (thread ``mcp``) the servers' :class:`~.connection.Connections`
and :class:`~.calls.Calls` run on, starts and stops them, and answers for the listed tools:
their groups and definitions, and :meth:`McpTools.execute`, which never raises and never
hangs (see the package's docstring).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import logging
import os
import threading
import time
from collections.abc import Iterable
from typing import Any, NamedTuple

from tether.actors.gatekeeper.security.action import ReadOnlyTools
from tether.actors.ports import ToolOutput
from tether.adapters.config import McpSettings
from tether.adapters.mcp_tools.calls import PING_INTERVAL, Calls
from tether.adapters.mcp_tools.connection import (
    RETRY_FIRST,
    RETRY_MAX,
    STABLE_AFTER,
    STOP_GRACE,
    Connections,
)
from tether.adapters.mcp_tools.naming import SEPARATOR
from tether.adapters.mcp_tools.results import DEFAULT_MAX_OUTPUT_CHARS
from tether.adapters.sandbox import Sandbox
from tether.adapters.tools.shell import NO_SANDBOX, Unconfined

log = logging.getLogger(__name__)


class McpServerStatus(NamedTuple):
    """How one server stands: connected now, how many connections worked so far, the
    last failure ('' after a success) and the tools it offers (namespaced)."""

    connected: bool
    connects: int
    error: str
    tools: tuple[str, ...]


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
        self.sandbox = sandbox
        self._connections = Connections(
            settings, sandbox=sandbox, cwd=os.getcwd(), log_dir=log_dir,
            retry_first=retry_first, retry_max=retry_max, stable_after=stable_after)
        self._calls = Calls(settings, self._connections, max_output_chars=max_output_chars,
                            ping_interval=ping_interval)
        self._servers = self._connections.servers
        self._lock = self._connections.lock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

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
            asyncio.run_coroutine_threadsafe(self._connections.begin(server), loop).result()
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
        self._connections.closing = True
        try:
            asyncio.run_coroutine_threadsafe(self._connections.shutdown(), loop).result(
                STOP_GRACE + 5)
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

    def read_only_tools(self) -> tuple[ReadOnlyTools, ...]:
        """The servers with ``trust = "read"`` for the gatekeeper: each one's tool name
        prefix and the folder its tools take relative paths from (None for an HTTP server:
        not known here)."""
        return tuple(
            ReadOnlyTools(f"{name}{SEPARATOR}",
                          self._connections.server_cwd(config) if config.command else None)
            for name, config in self.settings.servers.items() if config.trust == "read")

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
        server = self._connections.server_of(tool)
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
        return self._connections.server_of(tool) is not None

    def status(self) -> dict[str, McpServerStatus]:
        """Each server's state, for logs and tests."""
        with self._lock:
            return {s.name: McpServerStatus(s.live(), s.connects, s.error, tuple(sorted(s.tools)))
                    for s in self._servers.values()}

    def execute(self, name: str, tool_input: dict[str, Any], workspace: str) -> ToolOutput:
        """Call MCP tool ``name`` (blocking; ``workspace`` is not used: a server works where
        it was started). Never raises, never waits past the timeouts."""
        loop = self._loop
        if loop is None or self._connections.closing:
            return ToolOutput(f"{name} was not run: the MCP connections are closed", True)
        budget = 2 * self.settings.connect_timeout + self.settings.call_timeout + 10
        future = asyncio.run_coroutine_threadsafe(self._calls.call(name, dict(tool_input)), loop)
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
