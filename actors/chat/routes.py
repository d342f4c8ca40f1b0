"""Where a session's notices go, and what a channel missed. Pure.

A session's **origin** is resolved in order: given explicitly, the channel the request
came from, the configured channel of the longest matching working-directory prefix, the
fallback channel, else ``unknown``. A **route** is ``channel``, ``channel|target`` or
``channel|account|target``; ``unknown`` (or an empty or malformed route) goes to the wake
webhook instead. The **output buffer** keeps a session's last output blocks numbered
absolutely from 1, so a channel's bookmark stays right after old blocks are trimmed.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Mapping

import msgspec

from tether.actors.paths import inside

UNKNOWN = "unknown"
BUFFER_BLOCKS = 200
LAST_LINES = 5
LAST_CHARS = 500


class Route(msgspec.Struct, frozen=True):
    """A parsed route: the connector channel, and the account and target inside it."""

    channel: str
    target: str = ""
    account: str = ""


def resolve_origin(explicit: str, request_channel: str, workspace: str,
                   workdir_channels: Mapping[str, str], fallback: str) -> str:
    """The route background notices of a session go to (module docstring)."""
    if explicit:
        return explicit
    if request_channel:
        return request_channel
    best = ""
    path = os.path.normpath(workspace) if workspace else ""
    for prefix in workdir_channels:
        root = os.path.normpath(prefix)
        if path and inside(path, root) and len(root) > len(best):
            best = root
    if best:
        return next(v for k, v in workdir_channels.items() if os.path.normpath(k) == best)
    return fallback or UNKNOWN


def parse_route(route: str) -> Route | None:
    """The route's parts, or None when it must go to the wake webhook."""
    parts = route.split("|")
    if not route or route == UNKNOWN or any(not p for p in parts):
        return None
    if len(parts) == 1:
        return Route(parts[0])
    if len(parts) == 2:
        return Route(parts[0], target=parts[1])
    return Route(parts[0], account=parts[1], target="|".join(parts[2:]))


class OutputBuffer:
    """The last ``size`` output blocks of a session, numbered absolutely from 1."""

    def __init__(self, size: int = BUFFER_BLOCKS) -> None:
        self.blocks: deque[tuple[int, str]] = deque(maxlen=size)
        self.total = 0

    def add(self, text: str) -> int:
        """Keep ``text`` as the next block; returns its number."""
        self.total += 1
        self.blocks.append((self.total, text))
        return self.total

    def since(self, seen: int) -> tuple[list[tuple[int, str]], int]:
        """The blocks after block ``seen`` still kept, and how many after it were trimmed
        (so a catch-up can say so)."""
        kept = [(n, t) for n, t in self.blocks if n > seen]
        first_kept = kept[0][0] if kept else self.total + 1
        return kept, max(0, first_kept - seen - 1)

    def last_lines(self, lines: int = LAST_LINES, chars: int = LAST_CHARS) -> str:
        """The last ``lines`` non-empty lines of output, at most ``chars`` characters."""
        found: list[str] = []
        for _, text in reversed(self.blocks):
            for line in reversed(text.strip().splitlines()):
                if line.strip():
                    found.append(line.rstrip())
                if len(found) >= lines:
                    break
            if len(found) >= lines:
                break
        text = "\n".join(reversed(found))
        if len(text) <= chars:
            return text
        return "…" + text[len(text) - max(chars - 1, 0):] if chars > 0 else ""
