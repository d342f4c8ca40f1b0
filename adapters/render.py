"""Plain-text rendering of sessions and timelines for the command line. Pure functions."""

from __future__ import annotations

from typing import Any

from tether.actors.model.pricing import cost_usd
from tether.events.messages import SessionSummary, TextBlock, ToolResultBlock, ToolUseBlock
from tether.events.session import Session

WIDTH = 100


def _clip(text: str, width: int = WIDTH) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def render_sessions(rows: list[SessionSummary]) -> str:
    """The session view as a table."""
    if not rows:
        return "no sessions yet"
    header = f"{'ID':<18} {'NAME':<24} {'STATUS':<10} {'TURNS':>5} {'TOKENS':>9} {'COST':>9}  LAST"
    lines = [header]
    for r in rows:
        tokens = r.input_tokens + r.output_tokens
        lines.append(
            f"{r.session_id:<18} {_clip(r.name, 24):<24} {r.status:<10} {r.turns:>5} "
            f"{tokens:>9} {r.cost_usd:>9.4f}  {r.last_activity}"
        )
    return "\n".join(lines)


def event_summary(name: str, data: dict[str, Any]) -> str:
    """One line saying what a stored event means."""
    if name == "Created":
        return f"session {data.get('name')!r} in {data.get('workspace')}"
    if name == "UserMessageReceived":
        return f"{data.get('user')}@{data.get('channel')}: {_clip(str(data.get('text')), 70)}"
    if name == "AssistantMessageAppended":
        parts = []
        for block in data.get("content", []):
            if isinstance(block, TextBlock):
                parts.append(_clip(block.text, 50))
            elif isinstance(block, ToolUseBlock):
                parts.append(f"tool_use {block.name}")
        return f"[{data.get('stop_reason')}] " + " | ".join(parts)
    if name == "ToolCallProposed":
        return f"{data.get('tool')} {_clip(str(data.get('tool_input')), 60)}"
    if name == "ToolCallDecided":
        return f"{data.get('decision')} by {data.get('tier')}: {_clip(str(data.get('reason')), 60)}"
    if name == "ToolCallExecuted":
        mark = "error" if data.get("is_error") else "ok"
        return f"{data.get('tool')} {mark}: {_clip(str(data.get('output')), 60)}"
    if name == "ToolCallRefused":
        return _clip(str(data.get("reason")), 80)
    if name == "TtsrInterrupted":
        rules = ", ".join(data.get("rules", []))
        return f"rules {rules} interrupted generation {data.get('generation')}"
    if name == "StatusChanged":
        return f"-> {data.get('status')} ({data.get('reason')})"
    if name == "TurnCompleted":
        usage = data.get("usage")
        tokens = f"{usage.input_tokens}+{usage.output_tokens} tokens" if usage else ""
        cost = data.get("cost_usd", 0.0)
        return f"{data.get('rounds')} round(s), {tokens}, ${cost:.4f}, {data.get('stop')}"
    if name == "FilesSnapshotted":
        return f"before {data.get('call_id')}: {', '.join(data.get('paths', []))}"
    if name == "FilesRestored":
        return f"undo to event {data.get('to_version')}: {', '.join(data.get('paths', []))}"
    if name == "CommandRun":
        return f"/{data.get('name')} by {data.get('user')}: {_clip(str(data.get('result')), 60)}"
    if name == "ModeChanged":
        auto = ", ".join(data.get("auto_approve", [])) or "none"
        return f"mode {data.get('mode')} (auto-approved: {auto}; {data.get('reason')})"
    if name == "PlanProposed":
        return f"from {data.get('source')}: {_clip(str(data.get('plan')), 60)}"
    if name == "PlanReviewed":
        feedback = f": {_clip(str(data.get('feedback')), 50)}" if data.get("feedback") else ""
        return f"{data.get('choice')} by {data.get('by')}{feedback}"
    if name == "SystemPromptSet":
        return f"{len(str(data.get('text', '')))} characters: {_clip(str(data.get('text')), 50)}"
    if name == "ToolsLoaded":
        return f"{', '.join(data.get('groups', []))} ({data.get('reason')})"
    if name == "ProviderRetried":
        return (f"attempt {data.get('attempt')} in {data.get('delay')} s: "
                f"{_clip(str(data.get('error')), 60)}")
    if name == "WaitingForInput":
        return str(data.get("reason"))
    if name == "WorkspaceChanged":
        return f"-> {data.get('path')}"
    if name == "MovedTo":
        count = len(data.get("history", []))
        return (f"-> node {str(data.get('node_id'))[:8]}, {count} message"
                f"{'s' if count != 1 else ''} ({data.get('reason')})")
    if name == "GenerationStarted":
        n = data.get("n", 1)
        tools = (f"tools on, at most {data.get('max_tool_iterations')} tool rounds"
                 if data.get("tools") else "no tools")
        return f"{n} completion{'s' if n != 1 else ''}, {tools}, by {data.get('user')}"
    if name == "AlternativeGenerated":
        usage = data.get("usage")
        tokens = f", {usage.input_tokens}+{usage.output_tokens} tokens" if usage else ""
        text = " ".join(b.text for b in data.get("content", []) if isinstance(b, TextBlock))
        calls = [b.name for b in data.get("content", []) if isinstance(b, ToolUseBlock)]
        said = _clip(text, 50) + (f" | tool_use {', '.join(calls)}" if calls else "")
        return (f"node {str(data.get('node_id'))[:8]} [{data.get('stop_reason')}"
                f"{tokens}] {said}").rstrip()
    if name in ("TurnFailed", "ActorFailed"):
        return _clip(str(data.get("error")), 80)
    return ""


def render_timeline(events: list[Any]) -> str:
    """A session's stored events, one line each: version, time, name, summary."""
    lines = []
    for e in events:
        data = {k: v for k, v in vars(e).items() if k not in ("originator_id", "timestamp")}
        stamp = e.timestamp.strftime("%H:%M:%S.%f")[:-3]
        name = type(e).__name__
        lines.append(f"{e.originator_version:>4}  {stamp}  {name:<25} {event_summary(name, data)}")
    return "\n".join(lines)


def running_turn_cost(session: Session) -> float:
    """What the model calls of the turn still running have cost so far (0.0 outside a
    turn): a turn's cost is recorded only when it ends, priced as the session does."""
    return cost_usd(session.model, session.turn_usage) if session.in_turn else 0.0


def spent_text(session: Session) -> str:
    """The session's dollars, the running turn's included and told apart."""
    running = running_turn_cost(session)
    if not running:
        return f"${session.cost_usd:.4f}"
    return (f"${session.cost_usd + running:.4f} (${running:.4f} of it in the turn still "
            "running, priced from its tokens)")


def render_session(session: Session) -> str:
    """A session as it stands: header, totals and the conversation."""
    lines = [
        f"session {session.session_id} ({session.name}) at event {session.version}",
        f"  status {session.status}, {session.turns} turn(s), "
        f"{session.input_tokens}+{session.output_tokens} tokens, {spent_text(session)}",
        f"  workspace {session.workspace}, model {session.model}",
    ]
    for turn in session.history:
        for block in turn.content:
            if isinstance(block, TextBlock):
                lines.append(f"  {turn.role:>9}: {_clip(block.text, 85)}")
            elif isinstance(block, ToolUseBlock):
                lines.append(f"  {'tool_use':>9}: {block.name} {_clip(str(block.input), 70)}")
            elif isinstance(block, ToolResultBlock):
                mark = "error" if block.is_error else "result"
                lines.append(f"  {mark:>9}: {_clip(block.content, 85)}")
    return "\n".join(lines)
