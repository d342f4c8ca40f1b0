"""The metrics in the Prometheus text exposition format, version 0.0.4. Pure.

Every family has ``# HELP`` and ``# TYPE`` lines (also when it has no sample yet), names
start with ``tether_``, label values escape backslash, double quote and newline, HELP text
escapes backslash and newline, and the text ends with a newline. Serve it with the content
type :data:`CONTENT_TYPE`.

``tether_tool_calls_total`` counts each decided call once by its final verdict, so an
escalation answered later is added then; ``tether_tool_calls_awaiting_approval`` holds the
escalations not answered yet.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from projections.metrics import Metrics

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Sample = tuple[dict[str, str], float]
"""Labels and value of one sample."""


def escape_label_value(value: str) -> str:
    """A label value as the format writes it between double quotes."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    """HELP text as the format writes it (backslash and newline escaped)."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    """A sample value: integers without a fraction, ``+Inf``, ``-Inf`` and ``NaN``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def family(name: str, kind: str, help_text: str, samples: Iterable[Sample]) -> list[str]:
    """The lines of one metric family."""
    lines = [f"# HELP {name} {escape_help(help_text)}", f"# TYPE {name} {kind}"]
    for labels, value in samples:
        text = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in labels.items())
        lines.append(f"{name}{{{text}}} {format_value(value)}" if text
                     else f"{name} {format_value(value)}")
    return lines


def prometheus_text(metrics: Metrics) -> str:
    """Every figure of ``metrics`` as a Prometheus text exposition."""
    m = metrics
    top = m.most_expensive
    families = [
        family("tether_cost_usd_total", "counter",
               "Dollars spent by all model calls: turns, titles and compactions.",
               [({}, m.total_cost_usd)]),
        family("tether_cost_usd_by_day", "gauge",
               "Dollars spent by the model calls recorded on a UTC date.",
               [({"date": day}, cost) for day, cost in m.cost_by_day.items()]),
        family("tether_sessions", "gauge", "Sessions in each status (their latest).",
               [({"status": s}, n) for s, n in m.sessions_by_status.items()]),
        family("tether_sessions_launched_total", "counter", "Sessions created (forks too).",
               [({}, m.sessions_launched)]),
        family("tether_sessions_finished", "gauge",
               "Sessions completed, failed or killed (and not resumed since).",
               [({}, m.finished_sessions)]),
        family("tether_session_duration_seconds_avg", "gauge",
               "Average seconds from creation to the latest finish, over finished sessions.",
               [({}, m.avg_duration_s)]),
        family("tether_tool_calls_total", "counter",
               "Tool calls decided, each once, by its final verdict.",
               [({"verdict": v}, n) for v, n in m.tool_calls_by_verdict.items()]),
        family("tether_tool_calls_awaiting_approval", "gauge",
               "Tool calls escalated and not answered yet.", [({}, m.awaiting_approval)]),
        family("tether_ttsr_triggers_total", "counter",
               "Times each TTSR rule fired.",
               [({"rule": r}, n) for r, n in m.ttsr_triggers.items()]),
        family("tether_most_expensive_session_cost_usd", "gauge",
               "Dollars spent by the most expensive session.",
               [({"session_id": top.session_id, "name": top.name}, top.cost_usd)]
               if top else []),
        family("tether_metrics_position", "gauge",
               "The last event-log notification id these figures include.",
               [({}, m.position)]),
    ]
    return "\n".join(line for lines in families for line in lines) + "\n"
