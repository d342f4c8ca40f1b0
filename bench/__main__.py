"""Run every benchmark: ``python -m bench [--quick] [--nats URL] [--only NAME] [NAME...]``.

NATS comes from ``--nats``, else ``TETHER_NATS_URL``, else an embedded ``nats-server`` started
in a temporary directory for the run and stopped at the end.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from bench import append, ask, context, fanout, gate, interrupt, sandbox, ttsr, turn
from bench.common import nats_server, say

BENCHMARKS = ("ask", "append", "turn", "interrupt", "ttsr", "gate", "fanout", "context",
              "sandbox")


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line, run the chosen benchmarks and print a closing summary."""
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Tether's benchmarks, each against a raw baseline run in the same process "
        "(raw nats-py, raw eventsourcing, a plain subprocess). They print figures and ratios; "
        "they assert nothing.",
    )
    parser.add_argument("--quick", action="store_true", help="small N, for smoke runs")
    parser.add_argument(
        "--nats",
        metavar="URL",
        default=None,
        help="NATS server to use (default: TETHER_NATS_URL, else an embedded nats-server)",
    )
    parser.add_argument(
        "--only",
        choices=BENCHMARKS,
        action="append",
        help="run only this benchmark (may be repeated)",
    )
    parser.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"benchmarks to run, as with --only ({', '.join(BENCHMARKS)})",
    )
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark {unknown[0]!r} (choose from {', '.join(BENCHMARKS)})")
    chosen = (args.only or []) + args.names or list(BENCHMARKS)
    say(f"python {sys.version.split()[0]}, mode: {'quick' if args.quick else 'full'}")
    summary: list[str] = []
    if "ask" in chosen:
        with nats_server(args.nats) as url:
            say()
            result = ask.run(url, quick=args.quick)
            summary.append(f"RATIO ask tether/raw = {result.ratio:.2f}")
    if "append" in chosen:
        say()
        appended = append.run(quick=args.quick)
        summary.append(f"RATIO append tether/raw = {appended.ratio:.2f}")
        for r in appended.recovery:
            name = f"recovery{r.snapshot.events}" + (" compacting" if r.compacting else "")
            summary.append(f"RATIO {name} snapshot/events = "
                           f"{r.snapshot.median_ms / r.events_alone.median_ms:.2f}")
    if "turn" in chosen:
        with nats_server(args.nats) as url:
            say()
            turns = turn.run(url, quick=args.quick)
            summary.append(f"RATIO turn tether/raw = {turns.ratio('text'):.2f}")
            summary.append(f"RATIO toolturn tether/raw = {turns.ratio('tool'):.2f}")
            summary.append("RATIO turn back-to-back tether/raw = "
                           f"{turns.ratio(turn.case('text', 'back-to-back')):.2f}")
            summary.append("RATIO toolturn back-to-back tether/raw = "
                           f"{turns.ratio(turn.case('tool', 'back-to-back')):.2f}")
    if "interrupt" in chosen:
        with nats_server(args.nats) as url:
            say()
            value = interrupt.run(url, quick=args.quick)
            summary.append(f"RATIO kill streaming/idle = {value:.2f}")
    if "ttsr" in chosen:
        say()
        summary.append(f"RATIO ttsr monitor/naive = {ttsr.run(quick=args.quick):.4f}")
    if "gate" in chosen:
        with nats_server(args.nats) as url:
            say()
            summary.extend(gate.run(url, quick=args.quick).ratio_lines())
    if "fanout" in chosen:
        with nats_server(args.nats) as url:
            say()
            spread = fanout.run(url, quick=args.quick)
            summary.append(f"RATIO fanout router/raw = {spread.ratio:.2f}")
    if "context" in chosen:
        say()
        built = context.run(quick=args.quick)
        summary.append(f"RATIO context build/reload @{built.largest} = {built.ratio:.2f}")
    if "sandbox" in chosen:
        say()
        boxed = sandbox.run(quick=args.quick)
        if boxed is None:
            summary.append("sandbox: skipped (bubblewrap is not usable here)")
        else:
            summary.extend(boxed.ratio_lines())
    say()
    say("== summary")
    for line in summary:
        say(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
