"""Starting an MCP stdio server: inside the sandbox for its whole life, plain where the
settings turned the sandbox off, and not at all where no sandbox can be built.

:func:`refusal` says why a server is not started (one line, for its log entry and the
results of its tools). :func:`stdio_parameters` gives the SDK's ``StdioServerParameters``
inside a context that must outlive the process: in the sandbox it holds the placeholders
of the absent protected files in the server's folder (:meth:`Sandbox.command`). The
process is then ``bwrap`` (the one the probe found) running ``prlimit`` running the
server's command: its folder is the only writable place (read-only with ``writable =
false``), protected files in it read-only, and it has its own empty network unless the
server's table says ``network = true``. Its environment is the SDK's minimal one plus the
server's ``env`` either way. The command is looked up on that environment's ``PATH``
first, so a missing program or folder is the same ``FileNotFoundError`` it is without a
sandbox (not a process that exits at once).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Iterator

from mcp import StdioServerParameters
from mcp.client.stdio import get_default_environment

from tether.adapters.config import McpServer
from tether.adapters.sandbox import Sandbox
from tether.adapters.tools.shell import Unconfined


def refusal(config: McpServer, sandbox: Sandbox | Unconfined) -> str:
    """Why the server ``config`` is not started ('' when it is): a stdio server runs only
    in the sandbox, and none can be built. A url server is never refused here."""
    if not config.command or not isinstance(sandbox, Unconfined) or sandbox.allowed:
        return ""
    return f"a local server runs only inside the sandbox, and there is none: {sandbox.reason}"


@contextlib.contextmanager
def stdio_parameters(
    config: McpServer, cwd: str, sandbox: Sandbox | Unconfined,
) -> Iterator[StdioServerParameters]:
    """How to start the stdio server ``config`` in ``cwd`` (module docstring); start it
    and end it inside the ``with`` block. Raises ``FileNotFoundError`` for a missing
    program or folder, ``UnholdablePath`` when a protected path cannot be held, and
    ``PermissionError`` when :func:`refusal` refuses the server."""
    env = dict(config.env) or None
    if isinstance(sandbox, Unconfined):
        if not sandbox.allowed:
            raise PermissionError(refusal(config, sandbox))
        yield StdioServerParameters(command=config.command, args=list(config.args),
                                    env=env, cwd=cwd)
        return
    if not os.path.isdir(cwd):
        raise FileNotFoundError(errno.ENOENT, "no such folder", cwd)
    path = {**get_default_environment(), **config.env}.get("PATH")
    program = shutil.which(os.path.join(cwd, config.command) if os.sep in config.command
                           else config.command, path=path)
    if program is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), config.command)
    with sandbox.command([program, *config.args], cwd, network=config.network,
                         writable=config.writable) as argv:
        yield StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=cwd)
