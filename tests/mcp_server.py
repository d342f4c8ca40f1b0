"""A small MCP server of the project's own, for the tests of ``adapters/mcp_tools.py``.

Built with the official SDK's ``FastMCP``. Run it over stdio (what a ``command`` server in
``[mcp.servers.NAME]`` starts)::

    python -m tests.mcp_server

or over streamable HTTP at ``http://127.0.0.1:PORT/mcp`` (a ``url`` server)::

    python -m tests.mcp_server --http PORT

Its tools: ``add`` (two integers), ``echo`` (text back), ``fail`` (always an error
result), ``slow`` (waits, then answers; it can first leave a file saying it started),
``pid`` (its process id, so a test can kill the very process it talks to), ``getenv``
(one environment variable), ``pixel`` (an image block) and ``word.count`` (a name the
Messages API does not allow as it is).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import anyio
from mcp.server.fastmcp import FastMCP, Image

#: The smallest valid PNG (one transparent pixel).
PIXEL_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)


def build(port: int = 8000) -> FastMCP:
    """The server with every test tool; ``port`` is used by the HTTP transport only."""
    server = FastMCP("tether-test", host="127.0.0.1", port=port, log_level="WARNING")

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
    async def slow(seconds: float, started: str = "") -> str:
        """Wait ``seconds``, then say so; first create the file ``started`` if given."""
        if started:
            Path(started).write_text("started\n", encoding="utf-8")
        await anyio.sleep(seconds)
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
    def pixel() -> Image:
        """A one-pixel PNG image."""
        return Image(data=PIXEL_PNG, format="png")

    @server.tool(name="word.count")
    def word_count(text: str) -> int:
        """How many words ``text`` has."""
        return len(text.split())

    return server


def main(argv: list[str] | None = None) -> None:
    """Serve over stdio, or over streamable HTTP with ``--http PORT``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP")
    args = parser.parse_args(argv)
    if args.http is None:
        build().run("stdio")
    else:
        build(args.http).run("streamable-http")


if __name__ == "__main__":
    main()
