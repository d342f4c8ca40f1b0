"""Shared helpers for the benchmarks: statistics, tables and the NATS server to use."""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from tether.adapters.nats_server import EmbeddedNats

Printer = Callable[..., None]
"""Prints one line (an empty line when called with none), like :func:`say`."""
"""Where a benchmark writes its lines (``print`` by default)."""


def say(line: str = "") -> None:
    """Print one line and flush, so progress shows even when piped."""
    print(line, flush=True)


@dataclass(frozen=True)
class Stats:
    """Per-call latency figures, in microseconds, and throughput of one timed loop."""

    n: int
    mean_us: float
    p50_us: float
    p99_us: float
    per_s: float

    @classmethod
    def of(cls, samples_ns: Sequence[int], elapsed_s: float) -> Stats:
        """Summarise per-call samples (nanoseconds) and the loop's wall time (seconds)."""
        ordered = sorted(samples_ns)
        n = len(ordered)
        p99_index = min(n - 1, max(0, round(0.99 * n) - 1))
        return cls(
            n=n,
            mean_us=statistics.fmean(ordered) / 1000.0,
            p50_us=statistics.median(ordered) / 1000.0,
            p99_us=ordered[p99_index] / 1000.0,
            per_s=n / elapsed_s if elapsed_s > 0 else float("inf"),
        )


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Format a plain-text table: first column left-aligned, the others right-aligned."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return [line(headers), rule, *(line(row) for row in rows)]


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator``, infinite when the denominator is zero."""
    return numerator / denominator if denominator > 0 else float("inf")


@contextlib.contextmanager
def nats_server(url: str | None = None, out: Printer = say) -> Iterator[str]:
    """Yield the NATS URL to benchmark against.

    ``url`` wins, then ``TETHER_NATS_URL``; otherwise an embedded ``nats-server`` is started
    in a temporary directory and stopped (and its directory removed) on exit.
    """
    chosen = url or os.environ.get("TETHER_NATS_URL", "")
    if chosen:
        out(f"NATS: {chosen}")
        yield chosen
        return
    with tempfile.TemporaryDirectory(prefix="tether-bench-nats-") as data_dir:
        server = EmbeddedNats(data_dir).start()
        try:
            out(f"NATS: embedded nats-server {server.version} at {server.url}")
            yield server.url
        finally:
            server.stop()


def nats_bench_main(
    argv: Sequence[str] | None,
    prog: str,
    description: str,
    run: Callable[..., object],
    quick_help: str = "small N, for smoke runs",
) -> int:
    """The command line every NATS benchmark shares: ``--quick`` and ``--nats URL``."""
    import argparse

    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument(
        "--nats",
        metavar="URL",
        default=None,
        help="NATS server (default: TETHER_NATS_URL, else an embedded server)",
    )
    args = parser.parse_args(argv)
    with nats_server(args.nats) as url:
        run(url, quick=args.quick)
    return 0
