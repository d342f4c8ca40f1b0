"""The metrics view as a Prometheus collector (``prometheus_client``).

:class:`MetricsCollector` reads a :class:`~projections.metrics.Metrics` snapshot at each
scrape and yields its families; registered in a ``CollectorRegistry`` beside the process
and platform collectors, it is served in the text format or in OpenMetrics, as the scraper
asks (:func:`exposition`). Names start with ``tether_``; a counter's samples end in
``_total``.

``tether_tool_calls_total`` counts each decided call once by its final verdict, so an
escalation answered later is added then; ``tether_tool_calls_awaiting_approval`` holds the
escalations not answered yet. ``tether_session_duration_seconds`` is a histogram of
finishes: each time a session finishes, the seconds since its creation (a resumed session
that finishes again is observed again), so its buckets only grow. No label grows without
bound but ``rule`` (one per TTSR rule) and the leader's ``session_id``/``name``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from tether.projections.metrics import Metrics

__all__ = ["MetricsCollector", "exposition", "metric_families", "registry_with"]


def _bound(le: float) -> str:
    return "+Inf" if math.isinf(le) else repr(le)


def _by_label(kind: type[CounterMetricFamily] | type[GaugeMetricFamily], name: str, doc: str,
              label: str, values: Mapping[str, float]) -> Metric:
    """A family with one sample per ``label`` value."""
    family = kind(name, doc, labels=[label])
    for key, value in values.items():
        family.add_metric([key], value)
    return family


def metric_families(m: Metrics) -> list[Metric]:
    """Every figure of ``m`` as metric families."""
    families: list[Metric] = []
    families.append(CounterMetricFamily(
        "tether_cost_usd", "Dollars spent by all model calls: turns, titles and compactions.",
        value=m.total_cost_usd))
    families.append(_by_label(GaugeMetricFamily, "tether_sessions",
                              "Sessions in each status (their latest).", "status",
                              m.sessions_by_status))
    families.append(CounterMetricFamily(
        "tether_sessions_launched", "Sessions created (forks too).", value=m.sessions_launched))
    families.append(GaugeMetricFamily(
        "tether_sessions_finished",
        "Sessions completed, failed or killed (and not resumed since).",
        value=m.finished_sessions))
    families.append(HistogramMetricFamily(
        "tether_session_duration_seconds",
        "Seconds from a session's creation to each time it finished (again after a resume).",
        buckets=[(_bound(le), n) for le, n in m.finish_buckets.items()]
        or [("+Inf", 0)],
        sum_value=m.finish_seconds))
    families.append(_by_label(CounterMetricFamily, "tether_tool_calls",
                              "Tool calls decided, each once, by its final verdict.", "verdict",
                              m.tool_calls_by_verdict))
    families.append(GaugeMetricFamily(
        "tether_tool_calls_awaiting_approval", "Tool calls escalated and not answered yet.",
        value=m.awaiting_approval))
    families.append(_by_label(CounterMetricFamily, "tether_ttsr_triggers",
                              "Times each TTSR rule fired.", "rule", m.ttsr_triggers))
    top = GaugeMetricFamily("tether_most_expensive_session_cost_usd",
                            "Dollars spent by the most expensive session.",
                            labels=["session_id", "name"])
    if m.most_expensive is not None:
        top.add_metric([m.most_expensive.session_id, m.most_expensive.name],
                       m.most_expensive.cost_usd)
    families.append(top)
    families.append(GaugeMetricFamily(
        "tether_metrics_position", "The last event-log notification id these figures include.",
        value=m.position))
    return families


class MetricsCollector(Collector):
    """Yields the families of a fresh snapshot at each scrape."""

    def __init__(self, snapshot: Callable[[], Metrics]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterable[Metric]:
        return metric_families(self.snapshot())


def registry_with(*collectors: Collector) -> CollectorRegistry:
    """A registry holding ``collectors`` and the process (CPU, memory, open files), Python
    platform and garbage-collector metrics of this process."""
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    for collector in collectors:
        registry.register(collector)
    return registry


def exposition(registry: CollectorRegistry, accept: str | None) -> tuple[bytes, str]:
    """The registry's metrics in the format the ``Accept`` header asks for (OpenMetrics
    when it names ``application/openmetrics-text``, else the text format 0.0.4), with the
    content type to serve them with."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type
