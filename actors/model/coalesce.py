"""Coalescing: a history's same-role neighbours joined, so the roles alternate.

Pure; works on stored Turns and on Messages API dicts alike, and never changes its input.
"""

from __future__ import annotations

from typing import Any

from tether.actors.model.turns import (
    Msg,
    blocks_of,
    is_continuation,
    role_of,
    text_only,
    texts_of,
    with_blocks,
)
from tether.events.messages import TextBlock
from tether.events.session import Turn

__all__ = ["coalesce"]


def _joined(run: list[Msg]) -> list[Msg]:
    """A run of same-role text-only messages as one message with one text block: the
    non-blank texts with a blank line between, except that a continuation's first text
    goes on from the text before it with nothing between (neither stripped)."""
    if len(run) < 2:
        return run
    pieces: list[str] = []
    glue = False  # the message before put a text last: a continuation goes on from it
    for message in run:
        texts = [t for t in texts_of(message) if t.strip()]
        if not texts:
            glue = False
            continue
        if glue and is_continuation(message):
            pieces[-1] += texts[0]
            texts = texts[1:]
        pieces.extend(texts)
        glue = True
    text = "\n\n".join(pieces)
    if not text:
        return run
    first = run[0]
    block: Any = TextBlock(text) if isinstance(first, Turn) else {"type": "text", "text": text}
    return [with_blocks(first, [block])]


def coalesce(messages: list[Msg]) -> list[Msg]:
    """Adjacent text-only messages of the same role merged, so the roles alternate.

    1. Each run of adjacent text-only messages of one role becomes one message whose one
       text block joins their non-blank texts (blank lines between). A continuation
       Turn (``continues``: the rest of a message the tree holds in two parts) is glued
       to the text before it with nothing between and nothing stripped, so
       ``"what colour is the "`` and ``"grass"`` read ``"what colour is the grass"``.
       A message with a tool_use or tool_result block is never part of such a run, so
       text never joins across a tool block (a continuation after one stays a message
       of its own, as in step 2).
    2. Same-role neighbours left after that (a user message of tool results followed by
       the user's text, or a reminder) have their block lists put one after the other,
       unchanged and in order, as :func:`to_api_messages` does: the Messages API wants
       the roles to alternate, and tool_result blocks first in their user message, which
       holds since results always follow the assistant message that asked for them.

    Works on Turns or API dicts (which carry no continuation flag); ``messages`` is not
    changed.
    """
    runs: list[Msg] = []
    run: list[Msg] = []
    for message in messages:
        if run and text_only(message) and role_of(run[-1]) == role_of(message):
            run.append(message)
            continue
        runs.extend(_joined(run))
        run = [message] if text_only(message) else []
        if not run:
            runs.append(message)
    runs.extend(_joined(run))

    out: list[Msg] = []
    for message in runs:
        if out and role_of(out[-1]) == role_of(message):
            out[-1] = with_blocks(out[-1], blocks_of(out[-1]) + blocks_of(message))
        else:
            out.append(message)
    return out
