"""A small MCP server of the project's own, for the tests of ``adapters/mcp_tools/``.

Built with the official SDK's ``FastMCP``. Run it over stdio (what a ``command`` server in
``[mcp.servers.NAME]`` starts)::

    python -m tests.mcp_server

or over streamable HTTP at ``http://127.0.0.1:PORT/mcp`` (a ``url`` server)::

    python -m tests.mcp_server --http PORT

Its tools: ``add`` (two integers), ``echo`` (text back), ``fail`` (always an error
result), ``slow`` (waits, then answers; it can first leave a file saying it started, and
leave another if it is cancelled), ``pid`` (its process id, so a test can kill the very
process it talks to), ``getenv`` (one environment variable), ``write`` (text into a file,
or why it could not), ``connect`` (opens a TCP connection, or says why it could not),
``pixel`` (an image block) and ``word.count`` (a name the Messages API does not allow as it
is).

Options: ``--awkward`` adds tools with awkward names and results: ``a.b`` listed before
``a_b`` (what ``a.b`` becomes), a name of 70 characters, and ``mistyped``, whose result
breaks the output schema it lists. ``--starts FILE`` appends a line to ``FILE`` each time
the server starts; ``--exit-after-list`` makes it exit a moment after it answered
``tools/list`` (a server that crashes right after connecting); ``--beat FILE`` rewrites
``FILE`` every 50 ms while the server lives (a sandboxed server's process id is its own
namespace's, so a test watches this instead).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import types
from mcp.server.fastmcp import FastMCP, Image

#: The tool with a 70-character name (``--awkward``).
LONG_NAME = "long_" + "x" * 65
#: The output schema ``mistyped`` lists (its result has a string ``count``).
MISTYPED_SCHEMA: dict[str, Any] = {
    "type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}

#: The smallest valid PNG (one transparent pixel).
PIXEL_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)


class ToolServer(FastMCP):
    """FastMCP, with output schemas of its own in ``tools/list`` and, if asked, an exit
    a moment after answering it."""

    def __init__(self, port: int, *, exit_after_list: bool) -> None:
        super().__init__("tether-test", host="127.0.0.1", port=port, log_level="WARNING")
        self.exit_after_list = exit_after_list
        self.output_schemas: dict[str, dict[str, Any]] = {}

    async def list_tools(self) -> list[types.Tool]:
        """The tools, with :attr:`output_schemas` listed."""
        tools = [t.model_copy(update={"outputSchema": self.output_schemas[t.name]})
                 if t.name in self.output_schemas else t for t in await super().list_tools()]
        if self.exit_after_list:  # after the answer has been written
            asyncio.get_running_loop().call_later(0.1, os._exit, 0)
        return tools


def build(port: int = 8000, *, awkward: bool = False,
          exit_after_list: bool = False) -> FastMCP:
    """The server with every test tool (module docstring); ``port`` is used by the HTTP
    transport only."""
    server = ToolServer(port, exit_after_list=exit_after_list)

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @server.tool()
    def fail(message: str = "it failed on purpose") -> str:
        """Always fail with ``message``."""
        raise ValueError(message)

    @server.tool()
    async def slow(seconds: float, started: str = "", cancelled: str = "") -> str:
        """Wait ``seconds``, then say so; first create the file ``started`` if given, and
        create the file ``cancelled`` if given and the client cancels the call."""
        if started:
            Path(started).write_text("started\n", encoding="utf-8")
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            if cancelled:
                Path(cancelled).write_text("cancelled\n", encoding="utf-8")
            raise
        return f"waited {seconds:g} s"

    @server.tool()
    def pid() -> int:
        """This server's process id."""
        return os.getpid()

    @server.tool()
    def getenv(name: str) -> str:
        """The value of one environment variable ("(unset)" when unset)."""
        return os.environ.get(name, "(unset)")

    @server.tool()
    def write(path: str, text: str) -> str:
        """Write ``text`` to the file ``path``: "wrote" or the error."""
        try:
            Path(path).write_text(text, encoding="utf-8")
        except OSError as exc:
            return f"{type(exc).__name__}: {exc}"
        return "wrote"

    @server.tool()
    def connect(port: int, host: str = "127.0.0.1") -> str:
        """Open a TCP connection to ``host``:``port`` and send a line: "connected" or the
        error."""
        try:
            with socket.create_connection((host, port), timeout=2) as sock:
                sock.sendall(b"hello from the MCP server\n")
        except OSError as exc:
            return f"{type(exc).__name__}: {exc}"
        return "connected"

    @server.tool()
    def pixel() -> Image:
        """A one-pixel PNG image."""
        return Image(data=PIXEL_PNG, format="png")

    @server.tool(name="word.count")
    def word_count(text: str) -> int:
        """How many words ``text`` has."""
        return len(text.split())

    if awkward:
        @server.tool(name="a.b")
        def a_dot_b() -> str:
            """The tool named a.b."""
            return "a.b"

        @server.tool(name="a_b")
        def a_underscore_b() -> str:
            """The tool named a_b."""
            return "a_b"

        @server.tool(name=LONG_NAME)
        def long_name() -> str:
            """A tool whose name is 70 characters long."""
            return "long"

        @server.tool()
        def mistyped() -> types.CallToolResult:
            """Answers, but its structured content breaks its listed output schema."""
            return types.CallToolResult(
                content=[types.TextContent(type="text", text="counted three")],
                structuredContent={"count": "three"})

        server.output_schemas["mistyped"] = MISTYPED_SCHEMA

    return server


def main(argv: list[str] | None = None) -> None:
    """Serve over stdio, or over streamable HTTP with ``--http PORT`` (options: module
    docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP")
    parser.add_argument("--awkward", action="store_true", help="add the awkward tools")
    parser.add_argument("--starts", metavar="FILE", help="append a line here at each start")
    parser.add_argument("--exit-after-list", action="store_true",
                        help="exit a moment after answering tools/list")
    parser.add_argument("--beat", metavar="FILE", help="rewrite this file every 50 ms")
    args = parser.parse_args(argv)
    if args.beat:
        threading.Thread(target=_beat, args=(args.beat,), daemon=True).start()
    if args.starts:
        with open(args.starts, "a", encoding="utf-8") as starts:
            starts.write(f"{os.getpid()}\n")
    server = build(args.http or 8000, awkward=args.awkward,
                   exit_after_list=args.exit_after_list)
    server.run("stdio" if args.http is None else "streamable-http")


def _beat(path: str) -> None:
    """Rewrite ``path`` with a counter every 50 ms, for as long as the process lives."""
    count = 0
    while True:
        count += 1
        Path(path).write_text(f"{count}\n", encoding="utf-8")
        time.sleep(0.05)


if __name__ == "__main__":
    main()
