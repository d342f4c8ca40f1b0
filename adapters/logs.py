"""How a ``tether`` command logs: plain text lines, or one JSON object per line.

Both go to standard error at WARNING (INFO with ``-v``). The JSON lines
(python-json-logger, ASCII only: no character a reader takes for a line break is written
raw) have ``time`` (ISO 8601, UTC), ``level``, ``logger`` and ``message``,
``exc_info`` when a traceback is logged, and ``session_id`` on every line logged while a
session was bound (:mod:`actors.log_context`): whatever a session's actors, its tool
threads and its model streams log, and what shared actors log while handling a message
about it.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal, TextIO

from pythonjsonlogger.json import JsonFormatter

from tether.actors.log_context import SessionFilter

__all__ = ["LOG_FORMATS", "configure_logging"]

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")
TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(*, verbose: bool, log_format: LogFormat = "text",
                      stream: TextIO | None = None) -> logging.Handler:
    """Send the root logger's records to ``stream`` (standard error) in ``log_format``,
    replacing the handler an earlier call installed; returns the handler."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(SessionFilter())
    if log_format == "json":
        handler.setFormatter(JsonFormatter(
            "%(levelname)s %(name)s %(message)s", timestamp="time",
            rename_fields={"levelname": "level", "name": "logger"}))
    else:
        handler.setFormatter(logging.Formatter(TEXT))
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "tether", False)]:
        root.removeHandler(old)  # a command run again in the same process (tests)
    handler.tether = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    return handler
