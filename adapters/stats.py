"""``tether stats`` for the terminal: the metrics as a readable block. Pure.

One figure per line, its label in a left column: cost (in total, then per UTC day, the
latest ``days`` of them), sessions (launched, then by status), the average duration, the
most expensive session with its first prompt, tool calls by verdict and TTSR triggers.
"""

from __future__ import annotations

from tether.projections.metrics import Metrics

LABEL = 16
DAYS = 7


def _money(usd: float) -> str:
    return f"${usd:.4f}"


def _duration(seconds: float) -> str:
    """``42.5s``, ``2m 05s``, ``1h 02m 03s`` or ``2d 03h 04m``."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}h {minutes:02d}m"
    if hours:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    return f"{minutes}m {secs:02d}s"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _line(label: str, text: str) -> str:
    return f"{label:<{LABEL}}{text}"


def render_stats(metrics: Metrics, days: int = DAYS) -> str:
    """The figures of ``metrics`` as lines of text (no trailing newline)."""
    m = metrics
    lines = [_line("Cost", f"{_money(m.total_cost_usd)} in total")]
    shown = list(m.cost_by_day.items())[-days:] if days > 0 else []
    earlier = len(m.cost_by_day) - len(shown)
    if earlier:
        lines.append(f"  ({_plural(earlier, 'earlier day')} not shown)")
    lines += [_line(f"  {day}", _money(cost)) for day, cost in shown]
    statuses = ", ".join(f"{n} {s}" for s, n in m.sessions_by_status.items())
    lines.append(_line("Sessions", f"{m.sessions_launched} launched"
                       + (f": {statuses}" if statuses else "")))
    lines.append(_line("Duration", (
        f"{_duration(m.avg_duration_s)} on average over "
        f"{_plural(m.finished_sessions, 'finished session')}"
        if m.finished_sessions else "no session has finished yet")))
    top = m.most_expensive
    if top is None:
        lines.append(_line("Most expensive", "nothing spent yet"))
    else:
        lines.append(_line("Most expensive",
                           f"{top.session_id} {top.name!r}: {_money(top.cost_usd)}"))
        if top.first_prompt:
            lines.append(_line("", f"first prompt: {top.first_prompt!r}"))
    verdicts = [f"{n} {v}" for v, n in m.tool_calls_by_verdict.items()]
    verdicts.append(f"{m.awaiting_approval} awaiting approval")
    lines.append(_line("Tool calls", ", ".join(verdicts)))
    triggers = sorted(m.ttsr_triggers.items(), key=lambda item: (-item[1], item[0]))
    lines.append(_line("TTSR triggers", ", ".join(f"{rule} {n}" for rule, n in triggers)
                       if triggers else "none"))
    lines.append(_line("As of event", str(m.position)))
    return "\n".join(lines)
