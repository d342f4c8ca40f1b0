"""TTSR matching cost per delta as the reply grows: Tether's monitor against rescanning.

Replies of 16 KB, 64 KB, 256 KB and 1 MB stream in 5-character deltas against 50 rules
that never match (the common case: every delta is checked, nothing fires). Measured per
delta:

* **monitor**: the TTSR monitor actor's handler for one stream delta (sequence checks,
  policy, matching), called directly without NATS;
* **matcher (hyperscan)**: :class:`actors.ttsr.match.StreamMatcher` alone;
* **matcher (re fallback)**: the same with hyperscan off (windowed search per rule);
* **naive rescan** (the baseline): append the delta, then search the whole buffer with
  every rule, as the seed's monitor did. It runs only while it fits a time budget.

``python -m bench.ttsr [--quick]``
"""

from __future__ import annotations

import argparse
import random
import re
import time
from collections.abc import Sequence
from typing import Any

from bench.common import Printer, ratio, say, table
from tether.actors.ttsr.match import StreamMatcher
from tether.actors.ttsr.monitor import TtsrMonitorActor
from tether.actors.ttsr.rules import Rule, Scope
from tether.events.messages import StreamDelta

SIZES = (16 * 1024, 64 * 1024, 256 * 1024, 1024 * 1024)
QUICK_SIZES = (4 * 1024, 8 * 1024)
DELTA = 5
RULES = 50
NAIVE_BUDGET_S = 60.0

WORDS = (
    "the function returns a value when the input is valid and raises an error otherwise "
    "we read the file parse each line and write the result to the output stream then "
    "close it so that the caller sees every record in order"
).split()


def make_rules(n: int = RULES) -> list[Rule]:
    """``n`` rules of the usual kinds (words, calls, phrases), none matching the text."""
    rng = random.Random(7)
    triggers = []
    for i in range(n):
        word = "".join(rng.choice("bcdfghjklmnpqrstvwxz") for _ in range(7))
        kind = i % 3
        if kind == 0:
            triggers.append(rf"\b{word}\b")
        elif kind == 1:
            triggers.append(rf"{word}\s*\(")
        else:
            triggers.append(rf"(?i)never\s+{word}")
    return [
        Rule(name=f"rule-{i}", trigger=t, body="b", path=f"rule-{i}.md",
             scopes=(Scope("text"), Scope("tool")))
        for i, t in enumerate(triggers)
    ]


def make_reply(size: int) -> str:
    """Prose-like text of ``size`` characters."""
    rng = random.Random(size)
    out: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(WORDS)
        out.append(word)
        length += len(word) + 1
    return " ".join(out)[:size]


def deltas_of(text: str) -> list[str]:
    return [text[i : i + DELTA] for i in range(0, len(text), DELTA)]


def time_matcher(matcher: StreamMatcher, deltas: list[str]) -> float:
    """Microseconds per delta for feeding ``deltas`` to ``matcher``."""
    matcher.reset()
    feed = matcher.feed
    start = time.perf_counter()
    for piece in deltas:
        feed("text", 0, piece)
    return (time.perf_counter() - start) / len(deltas) * 1e6


class _NoStore:
    """The monitor reads its rule log only when a rule fires; none does here."""

    def rule_log(self, session_id: str) -> None:
        return None


class _Bench(TtsrMonitorActor):
    """The monitor, its handler called directly: no actor thread, no bus."""

    def __init__(self, rules: list[Rule]) -> None:
        self.session_id = "bench"
        self.app: Any = _NoStore()
        self.folders = []
        from tether.actors.ttsr.policy import InjectionPolicy, TtsrSettings
        from tether.actors.ttsr.rules import RuleSet

        self.settings = TtsrSettings()
        self.rule_set = RuleSet(rules=rules)
        self._fingerprint = ()
        self.matcher = StreamMatcher(rules)
        self.policy = InjectionPolicy(self.settings, rules)
        self.generation = -1
        self.next_seq = 0
        self.complete = False
        self.unchecked = False
        self.watching = False
        self.violation = None
        self.tools = {}
        self.parked = []

    def _answer_barriers(self) -> None:
        pass


def time_monitor(rules: list[Rule], deltas: list[str]) -> float:
    """Microseconds per delta through the monitor's stream-delta handler."""
    monitor = _Bench(rules)
    messages = [
        StreamDelta(session_id="bench", generation=1, seq=i + 2, kind="text", text=piece)
        for i, piece in enumerate(deltas)
    ]
    monitor.handle(StreamDelta(session_id="bench", generation=1, seq=1, kind="turn_start"),
                   None)
    handle = monitor.handle
    start = time.perf_counter()
    for message in messages:
        handle(message, None)
    elapsed = time.perf_counter() - start
    assert monitor.violation is None and not monitor.unchecked
    return elapsed / len(deltas) * 1e6


def time_naive(rules: list[Rule], deltas: list[str], budget_s: float) -> float | None:
    """Per-delta cost of rescanning the whole buffer, or None past the time budget."""
    patterns = [re.compile(r.trigger) for r in rules]
    buffer = ""
    start = time.perf_counter()
    for piece in deltas:
        buffer += piece
        for pattern in patterns:
            pattern.search(buffer)
        if time.perf_counter() - start > budget_s:
            return None
    return (time.perf_counter() - start) / len(deltas) * 1e6


def run(quick: bool = False, out: Printer = say) -> float:
    """Run and print the table; returns monitor/naive at the first size (cost ratio)."""
    rules = make_rules()
    sizes = QUICK_SIZES if quick else SIZES
    budget = 10.0 if quick else NAIVE_BUDGET_S
    hs_matcher = StreamMatcher(rules)
    re_matcher = StreamMatcher(rules, use_hyperscan=False)
    engines = sorted(set(hs_matcher.engines.values()))
    out(f"== ttsr: {RULES} rules ({', '.join(engines)}), {DELTA}-character deltas, "
        f"naive rescan budget {budget:g} s")
    rows: list[list[str]] = []
    first_ratio = 0.0
    naive_dead = False
    for size in sizes:
        deltas = deltas_of(make_reply(size))
        monitor_us = time_monitor(rules, deltas)
        hs_us = time_matcher(hs_matcher, deltas)
        re_us = time_matcher(re_matcher, deltas)
        naive_us = None if naive_dead else time_naive(rules, deltas, budget)
        naive_dead = naive_us is None
        if not first_ratio and naive_us:
            first_ratio = ratio(monitor_us, naive_us)
        rows.append([
            f"{size // 1024} KB", f"{len(deltas)}", f"{monitor_us:.2f}", f"{hs_us:.2f}",
            f"{re_us:.2f}", f"{naive_us:.1f}" if naive_us else "over budget",
        ])
    for line in table(["reply", "deltas", "monitor us", "matcher us", "re us",
                       "naive us"], rows):
        out(line)
    out("us = microseconds per delta; naive = rescanning the whole buffer with every rule")
    if first_ratio:
        out(f"RATIO ttsr monitor/naive @ {sizes[0] // 1024} KB = {first_ratio:.4f}")
    else:
        out("RATIO ttsr monitor/naive = n/a (the naive matcher ran over its budget)")
    return first_ratio


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.ttsr [--quick]``."""
    parser = argparse.ArgumentParser(prog="python -m bench.ttsr", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="two sizes, short budget")
    args = parser.parse_args(argv)
    run(quick=args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
