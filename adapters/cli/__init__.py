"""The ``tether`` command line.

Every command has ``--help``. Configuration comes from ``tether.toml`` and ``TETHER_*``
environment variables (see ``tether config``); a bad value is reported as one line naming
the key, never as a traceback. Slow imports (the anthropic SDK) happen only in the
commands that call the model.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

from tether.adapters.cli.common import EXIT_USAGE, EXPECTED_ERRORS, describe
from tether.adapters.cli.engine import cmd_fake_llm
from tether.adapters.cli.parser import build_parser
from tether.adapters.config import ConfigError
from tether.adapters.logs import configure_logging

__all__ = ["build_parser", "main"]


def _command_index(argv: list[str]) -> int | None:
    """Index of the command word (the first argument that is not an option)."""
    skip = False
    for index, word in enumerate(argv):
        if skip:
            skip = False
        elif word == "--config":
            skip = True
        elif not word.startswith("-"):
            return index
    return None


def _stop_on_signals() -> None:
    """SIGTERM and SIGHUP unwind like Ctrl-C, so every command shuts its engine down
    (actors, relay, embedded NATS server) instead of leaving parts running."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupt)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tether`` command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    index = _command_index(argv)
    if index is not None and argv[index] == "fake-llm":
        args = parser.parse_args(argv[: index + 1])
        return cmd_fake_llm(args, argv[index + 1 :])
    args = parser.parse_args(argv)
    configure_logging(verbose=args.verbose, log_format=getattr(args, "log_format", "text"))
    if threading.current_thread() is threading.main_thread():
        _stop_on_signals()
    try:
        result: int = args.func(args)
        return result
    except ConfigError as exc:
        print(f"tether: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`tether events X | head`): not an error of ours. Point
        # stdout at /dev/null so the interpreter's final flush does not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except EXPECTED_ERRORS as exc:
        # Failures a user can act on (unreachable server, unknown session, timeout): one
        # line, no traceback. Run with -v for the details in the log.
        print(f"tether: {describe(exc)}", file=sys.stderr)
        return 1
