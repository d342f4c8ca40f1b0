"""Compaction, the planning half: when a history has outgrown its budget, what replaces it.

Pure. :func:`plan_compaction` decides whether the history as sent takes 70% or more of the
budget the window leaves and which older part to replace (cut only before a clean turn
start); :func:`memory_request` and :func:`summary_request` are the two model calls made on
that part, :func:`parse_facts` and :func:`memory_append` turn the first's answer into
MEMORY.md text, and :func:`summary_message` / :func:`compacted_history` put the second's in
the older part's place. The calls themselves are made by the caller.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, NamedTuple

import msgspec

from tether.actors.model.context import (
    estimate_history_tokens,
    estimate_message_tokens,
    estimate_request_tokens,
)
from tether.actors.model.stale_results import KEEP_TURNS, summarize_stale_results
from tether.actors.model.turns import (
    Msg,
    blocks_of,
    can_split_before,
    is_continuation,
    json_text,
    result_text,
    role_of,
    text_only,
    texts_of,
)
from tether.actors.ports import ModelRequest
from tether.events.messages import TextBlock
from tether.events.session import Turn

RESERVE_TOKENS = 4096
BUDGET_FLOOR = 4096
"""The smallest budget: when the system prompt leaves less, compaction still aims at a
usable size (the request may then not fit; the ``max_tokens`` clamp and the API say so)."""
COMPACT_AT_PERCENT = 70
RECENT_PERCENT = 30
SUMMARY_PREFIX = "[Previous conversation summary: "
TRANSCRIPT_RESULT_CHARS = 2000
"""A tool result longer than this is cut in the transcript given to the compaction calls."""


def context_budget(
    window: int, system_tokens: int, reserve: int = RESERVE_TOKENS, floor: int = BUDGET_FLOOR
) -> int:
    """Tokens the history may take: the window less the system prompt and a reserve (for
    the answer and the estimate's error), at least ``floor``."""
    return max(floor, window - system_tokens - reserve)


def needs_compaction(history_tokens: int, budget: int) -> bool:
    """The history takes 70% or more of the budget."""
    if budget <= 0:
        return history_tokens > 0
    return history_tokens * 100 >= budget * COMPACT_AT_PERCENT


def split_for_compaction(history: list[Msg], budget: int) -> tuple[list[Msg], list[Msg]]:
    """``(older, recent)``: ``recent`` is the longest tail of ``history`` that starts at a
    clean turn start (:func:`can_split_before`) and takes at most 30% of ``budget`` (by
    :func:`estimate_message_tokens`); ``older`` is what comes before it.

    Cutting only there keeps every tool_use with its tool_result. When even the
    last turn takes more than 30%, ``recent`` is empty and all of it is summarized (a
    compaction that kept it would not bring the history under the trigger). Compact only
    when the history ends with a user message: tool calls still waiting for their results
    would otherwise be summarized away from them.
    """
    limit = budget * RECENT_PERCENT // 100
    cut = len(history)
    total = 0
    for index in range(len(history) - 1, -1, -1):
        total += estimate_message_tokens(history[index])
        if total > limit:
            break
        if can_split_before(history[index]):
            cut = index
    return history[:cut], history[cut:]


class CompactionPlan(NamedTuple):
    """What a compaction will do: replace the first ``replaced`` messages of the history
    (``older``, as sent: stale results already summarized) with a summary."""

    older: list[Turn]
    replaced: int
    tokens: int
    """Estimated tokens of the history as sent, before the compaction."""
    budget: int


def plan_compaction(history: list[Turn], *, system: str, window: int,
                    sent_tokens: int | None = None, tools: Sequence[dict[str, Any]] = (),
                    keep_turns: int = KEEP_TURNS) -> CompactionPlan | None:
    """The compaction the history needs before the next model call, or None.

    The history is measured as it is sent (stale tool results summarized, as the seed
    does before compacting; ``sent_tokens``, when the caller has it from the request it
    built, saves measuring again) against :func:`context_budget`, which leaves room for
    the system prompt and the ``tools`` definitions sent with it (many MCP tools can take
    much of a window); at 70% or more it is
    split with :func:`split_for_compaction`. None when under the trigger, when nothing
    older than the recent part is left to summarize, or when that is only an earlier
    summary (summarizing it alone again would gain nothing and could repeat every call).
    """
    budget = context_budget(window, estimate_request_tokens(system, [], tools))
    shaped: list[Turn] | None = None
    if sent_tokens is None:
        shaped = summarize_stale_results(history, keep_turns)
        sent_tokens = estimate_history_tokens(shaped)
    if not needs_compaction(sent_tokens, budget):
        return None
    if shaped is None:
        shaped = summarize_stale_results(history, keep_turns)
    tokens = sent_tokens
    older, _ = split_for_compaction(shaped, budget)
    if not older or (len(older) == 1 and is_summary_message(older[0])):
        return None
    return CompactionPlan(older, len(older), tokens, budget)


def is_summary_message(message: Turn | dict[str, Any]) -> bool:
    """``message`` is a compaction's summary (``[Previous conversation summary: ...]``)."""
    texts = texts_of(message) if text_only(message) else []
    return len(texts) == 1 and texts[0].startswith(SUMMARY_PREFIX)


MEMORY_PROMPT = """\
You read the earlier part of a conversation between a user and a coding agent and pick \
out the durable facts worth keeping in the agent's long-term memory file (MEMORY.md): \
things that stay true after this conversation, such as the user's preferences and \
working conventions, decisions about the project, names, paths, commands that work, \
constraints and requirements.

Leave out what was merely done step by step, passing state, tool output, guesses, and \
anything secret (passwords, tokens, keys, personal data the user did not ask to keep). \
Leave out facts the conversation later contradicted.

Answer with one fact per line, each line starting with "- ", one short sentence each, \
and nothing else. If there is nothing durable, answer exactly: NONE"""

SUMMARY_PROMPT = """\
You summarize the earlier part of a conversation between a user and a coding agent, so \
the agent can carry on without it. The summary replaces those messages.

Keep: what the user asked for and why (their latest request in full), decisions and \
their reasons, the files, commands and tools involved and what came of them, what is \
done and what remains, errors not yet resolved, and open questions. If the conversation \
starts with an earlier summary, fold it in.

Leave out pleasantries and tool output that no longer matters. Write compact notes in \
the past tense, as short as the content allows, with no preamble."""


def render_transcript(messages: Sequence[Turn | dict[str, Any]]) -> str:
    """``messages`` as plain text for the compaction calls (long tool results cut; a
    continuation's text goes on the line of the text before it, as it is sent)."""
    lines: list[str] = []
    text_role = ""  # the role whose text the last line is ("" if it is not text)
    for message in messages:
        role = role_of(message)
        speaker = "User" if role == "user" else "Assistant"
        glue = is_continuation(message) and text_role == role
        for block in blocks_of(message):
            data = block if isinstance(block, dict) else msgspec.to_builtins(block)
            kind = data.get("type")
            text_role = role if kind == "text" else ""
            if kind == "text" and glue:
                lines[-1] += str(data.get("text", ""))
            elif kind == "text":
                lines.append(f"{speaker}: {data.get('text', '')}")
            elif kind == "tool_use":
                lines.append(f"Assistant called {data.get('name', '')} "
                             f"({data.get('id', '')}): {json_text(data.get('input', {}))}")
            elif kind == "tool_result":
                text = result_text(data.get("content", ""))
                if len(text) > TRANSCRIPT_RESULT_CHARS:
                    text = (f"{text[:TRANSCRIPT_RESULT_CHARS]}\n[... "
                            f"{len(text) - TRANSCRIPT_RESULT_CHARS} more characters cut]")
                label = "error" if data.get("is_error") else "result"
                lines.append(f"Tool {label} ({data.get('tool_use_id', '')}): {text}")
            else:
                lines.append(f"{speaker}: {json_text(data)}")
            glue = False
    return "\n\n".join(lines)


def _compaction_request(prompt: str, older: Sequence[Turn | dict[str, Any]], model: str,
                        max_tokens: int) -> ModelRequest:
    text = f"<conversation>\n{render_transcript(older)}\n</conversation>"
    return ModelRequest(
        model=model,
        system=prompt,
        messages=[{"role": "user", "content": [{"type": "text", "text": text}]}],
        tools=[],
        max_tokens=max_tokens,
    )


def memory_request(older: Sequence[Turn | dict[str, Any]], *, model: str,
                   max_tokens: int = 1024) -> ModelRequest:
    """The model call that extracts durable facts from ``older`` (answer: parse_facts)."""
    return _compaction_request(MEMORY_PROMPT, older, model, max_tokens)


def summary_request(older: Sequence[Turn | dict[str, Any]], *, model: str,
                    max_tokens: int = 2048) -> ModelRequest:
    """The model call that summarizes ``older`` (answer: summary_message)."""
    return _compaction_request(SUMMARY_PROMPT, older, model, max_tokens)


def parse_facts(answer: str) -> list[str]:
    """The facts in the memory call's answer: one per non-blank line, list marks
    removed; ``NONE`` (or nothing) gives none."""
    facts: list[str] = []
    for line in answer.splitlines():
        fact = _unmarked(line)
        if fact and fact.rstrip(".").upper() != "NONE":
            facts.append(fact)
    return facts


def _unmarked(line: str) -> str:
    """``line`` stripped, without a leading list mark."""
    text = line.strip()
    for mark in ("- ", "* ", "• "):
        if text.startswith(mark):
            return text[len(mark):].strip()
    return text


def memory_append(existing: str, facts: Sequence[str], date: dt.date | str) -> str:
    """``existing`` (MEMORY.md) with ``facts`` added as bullets under ``## <date>``.

    Facts already in the file as a bullet, blank ones and repeats are dropped; when none
    is left the text comes back unchanged. When the file's last heading is already that
    date's, the bullets go under it instead of a second one.
    """
    heading = f"## {date.isoformat() if isinstance(date, dt.date) else date}"
    present = {line.strip() for line in existing.splitlines()}
    bullets: list[str] = []
    for fact in facts:
        bullet = "- " + " ".join(_unmarked(fact).split())
        if bullet != "- " and bullet not in present and bullet not in bullets:
            bullets.append(bullet)
    if not bullets:
        return existing
    headings = [line.strip() for line in existing.splitlines() if line.startswith("## ")]
    body = "\n".join(bullets) + "\n"
    if headings and headings[-1] == heading:
        return existing + ("" if existing.endswith("\n") else "\n") + body
    before = existing.rstrip("\n")
    return (before + "\n\n" if before.strip() else "") + heading + "\n\n" + body


def summary_text(summary: str) -> str:
    """``[Previous conversation summary: ...]``."""
    return f"{SUMMARY_PREFIX}{summary.strip()}]"


def summary_message(summary: str) -> Turn:
    """The message that stands first in a compacted history in place of the older part
    (a user message: the Messages API has no system role inside ``messages``)."""
    return Turn("user", [TextBlock(summary_text(summary))])


def compacted_history(summary: str, recent: list[Turn]) -> list[Turn]:
    """The history after a compaction: the summary, then the recent part."""
    return [summary_message(summary), *recent]
