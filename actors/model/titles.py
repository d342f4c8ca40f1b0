"""Session titles: when to ask for one, the request, and the answer cleaned. Pure.

Once a session has at least ``TITLE_AFTER`` messages and no title, a title of at most
``TITLE_MAX`` characters is asked of the model in the background (seed: phase 5). The
messages counted are the ones the seed stores: the user's and the model's answers (3
exchanges), not the tool calls and results between them (:func:`exchange_messages`), so
one busy turn does not name a session.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tether.actors.model.compaction import is_summary_message, render_transcript
from tether.actors.model.turns import starts_turn
from tether.actors.ports import ModelRequest
from tether.events.messages import TextBlock, ToolUseBlock
from tether.events.session import Turn

TITLE_AFTER = 6
TITLE_MAX = 60
QUOTES = "\"'`*# \u201c\u201d\u2018\u2019"
"""Stripped from both ends of a title: quotes (straight and curly), emphasis, headings."""
TITLE_PROMPT = (
    "Give this conversation a short title: at most six words, no quotes, no punctuation at "
    "the end. Answer with the title only."
)


def wants_title(messages: int, title: str) -> bool:
    """Whether a session with ``messages`` (:func:`exchange_messages`) and ``title``
    needs one."""
    return not title and messages >= TITLE_AFTER


def exchange_messages(history: Sequence[Turn]) -> int:
    """The messages of ``history`` that are part of the exchanges: user messages with
    text (not only tool results) and the model's answers (text without tool calls). The
    rest of a message the tree holds in two parts and a compaction's summary are not."""
    return sum(1 for turn in history if not is_summary_message(turn) and (
        starts_turn(turn) if turn.role == "user" else (
            not turn.continues and any(isinstance(b, TextBlock) for b in turn.content)
            and not any(isinstance(b, ToolUseBlock) for b in turn.content))))


def title_request(history: Sequence[Turn | dict[str, Any]], *, model: str) -> ModelRequest:
    """The background call that names the conversation (its first messages suffice)."""
    shown = render_transcript(list(history)[:TITLE_AFTER * 2])
    text = f"<conversation>\n{shown}\n</conversation>"
    return ModelRequest(model=model, system=TITLE_PROMPT,
                        messages=[{"role": "user", "content": [{"type": "text", "text": text}]}],
                        tools=[], max_tokens=64)


def clean_title(answer: str) -> str:
    """The title in ``answer``: its first non-blank line, quotes and a trailing full stop
    stripped, whitespace collapsed, at most ``TITLE_MAX`` characters (cut at a word)."""
    line = next((part.strip() for part in answer.splitlines() if part.strip()), "")
    line = line.removeprefix("Title:").strip()
    line = line.strip(QUOTES).rstrip(".").strip()
    line = " ".join(line.split())
    if len(line) <= TITLE_MAX:
        return line
    cut = line[:TITLE_MAX + 1].rsplit(" ", 1)[0] if " " in line[:TITLE_MAX + 1] else ""
    return (cut or line[:TITLE_MAX]).rstrip(" ,;:-")
