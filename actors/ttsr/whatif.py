"""What would these rules have done? TTSR over a stored session, without the model.

Pure: it replays the session's recorded model output through a fresh matcher and policy,
as the monitor would have seen it: each interrupted call's partial text (from
``TtsrInterrupted``) and each stored message (``AssistantMessageAppended``: its text and
each tool call's arguments), turn by turn (turns advance at ``TurnCompleted``). A hit
means the rule would have fired there; the recording after that point shows what the
model did without the interruption, so later hits are what-ifs on that history.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from tether.actors.ttsr.match import Match, StreamMatcher
from tether.actors.ttsr.policy import InjectionPolicy, TtsrSettings
from tether.actors.ttsr.rules import Rule
from tether.events.messages import TextBlock, ToolUseBlock
from tether.events.session import Session


class WhatIfHit(msgspec.Struct, frozen=True):
    """A rule that would have fired: at stored event ``version``, in ``turn``."""

    version: int
    turn: int
    rule: str
    source: str
    offset: int
    action: str
    """``interrupt`` (the stream would have been aborted) or ``remind`` (after the turn)."""


def _feed_stream(matcher: StreamMatcher, pieces: list[tuple[str, int, str]]) -> list[Match]:
    found: list[Match] = []
    for source, block, text in pieces:
        found.extend(matcher.feed(source, block, text))
    found.extend(matcher.end_all())
    return found


def what_if(events: list[Any], rules: list[Rule], settings: TtsrSettings | None = None) -> list[
    WhatIfHit
]:
    """Every place ``rules`` would have fired over the stored ``events`` of one session."""
    settings = settings or TtsrSettings()
    matcher = StreamMatcher(rules, window=settings.window)
    policy = InjectionPolicy(settings, rules)
    turn = 0
    hits: list[WhatIfHit] = []
    for event in events:
        pieces: list[tuple[str, int, str]] = []
        tool_paths: dict[int, str | None] = {}
        if isinstance(event, Session.TtsrInterrupted) and event.partial_text:
            pieces = [("text", 0, event.partial_text)]
        elif isinstance(event, Session.AssistantMessageAppended):
            for index, block in enumerate(event.content):
                if isinstance(block, TextBlock):
                    pieces.append(("text", index, block.text))
                elif isinstance(block, ToolUseBlock):
                    pieces.append((f"tool:{block.name}", index, json.dumps(block.input)))
                    path = block.input.get("path")
                    tool_paths[index] = path if isinstance(path, str) else None
        elif isinstance(event, Session.TurnCompleted):
            turn += 1
            continue
        else:
            continue
        policy.start_turn(turn)
        matcher.reset()
        matcher.set_active(policy.active())
        fired: dict[str, Match] = {}
        for match in _feed_stream(matcher, pieces):
            fits = match.rule.path_fits(match.source, tool_paths.get(match.block))
            if fits is not True or match.rule.name in fired:
                continue
            if policy.eligible(match.rule):
                fired[match.rule.name] = match
        policy.record(fired.keys())
        for match in fired.values():
            action = "interrupt" if match.rule.aborts_on(match.source) else "remind"
            hits.append(WhatIfHit(
                version=event.originator_version, turn=turn, rule=match.rule.name,
                source=match.source, offset=match.offset, action=action,
            ))
    return hits
