"""Actor ask over NATS against raw nats-py request/reply, plus in-process tell latency.

* **tether**: an echo :class:`actors.runtime.TetherActor` started with
  :meth:`ActorSystem.start` and bound to a subject with a :class:`Binding`, asked with
  :func:`actors.runtime.ask` (one :class:`adapters.nats_bus.NatsBus`: encode, request on the
  bus loop, strict decode, ``tell`` to the actor thread, reply published back through the loop,
  typed decode of the answer) in a loop from the main thread.
* **raw**: a nats-py subscriber that echoes the payload and ``await nc.request`` in a loop,
  on its own connection and its own asyncio loop, same payload size.
* **tell -> handler**: an in-process ``tell`` to a TetherActor, timed from the call to the
  handler's first line, against the same on a bare ``pykka.ThreadingActor``.

Prints per-call mean, p50, p99 (microseconds), calls per second and
``RATIO ask tether/raw = X.XX`` (mean latency of tether over mean latency of raw).
"""

from __future__ import annotations

import argparse
import asyncio
import queue
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import nats
import pykka
from nats.aio.msg import Msg

from actors.runtime import ActorSystem, Binding, Envelope, TetherActor, ask
from adapters.nats_bus import NatsBus
from bench.common import Printer, Stats, nats_server, ratio, say, table
from events.codec import encode
from events.messages import Message
from events.subjects import Subjects

FULL_N = 2000
FULL_WARMUP = 200
QUICK_N = 100
QUICK_WARMUP = 20
PAYLOAD = "x" * 96
"""Text carried by each ping (the encoded message is about 150 bytes)."""


class BenchPing(Message):
    """The request the echo actor answers."""

    seq: int
    text: str


class BenchPong(Message):
    """The echo actor's answer."""

    seq: int
    text: str


class Stamp:
    """An in-process message carrying the time it was told (``perf_counter_ns``)."""

    __slots__ = ("sent_ns",)

    def __init__(self, sent_ns: int) -> None:
        self.sent_ns = sent_ns


class EchoActor(TetherActor):
    """Answers BenchPing with BenchPong; reports a Stamp's delay to ``latencies``."""

    def __init__(self, system: ActorSystem, latencies: queue.SimpleQueue[int]) -> None:
        super().__init__(system)
        self.latencies = latencies

    def handle(self, message: Any, envelope: Envelope | None) -> None:
        """Echo pings; time stamps."""
        if isinstance(message, Stamp):
            self.latencies.put(time.perf_counter_ns() - message.sent_ns)
        elif isinstance(message, BenchPing):
            self.reply(envelope, BenchPong(seq=message.seq, text=message.text))


class BareActor(pykka.ThreadingActor):
    """A plain pykka actor reporting a Stamp's delay: the baseline for ``tell``."""

    def __init__(self, latencies: queue.SimpleQueue[int]) -> None:
        super().__init__()
        self.latencies = latencies

    def on_receive(self, message: Any) -> Any:
        """Time stamps."""
        if isinstance(message, Stamp):
            self.latencies.put(time.perf_counter_ns() - message.sent_ns)
        return None


@dataclass(frozen=True)
class AskResults:
    """Everything the ask benchmark measured."""

    tether: Stats
    raw: Stats
    tell_tether: Stats
    tell_raw: Stats

    @property
    def ratio(self) -> float:
        """Mean ask latency of tether over raw nats-py (above 1: tether is slower)."""
        return ratio(self.tether.mean_us, self.raw.mean_us)

    @property
    def tell_ratio(self) -> float:
        """Mean tell->handler latency of TetherActor over bare pykka."""
        return ratio(self.tell_tether.mean_us, self.tell_raw.mean_us)


def bench_tether_ask(url: str, n: int, warmup: int) -> Stats:
    """Time ``n`` sequential asks of an echo TetherActor over NATS (after ``warmup``)."""
    stats, _ = _tether(url, n, warmup, ask_too=True)
    assert stats is not None
    return stats


def _tether(url: str, n: int, warmup: int, *, ask_too: bool) -> tuple[Stats | None, Stats]:
    bus = NatsBus(url, name="tether-bench")
    system = ActorSystem(bus, Subjects("bench" + uuid.uuid4().hex[:10]))
    latencies: queue.SimpleQueue[int] = queue.SimpleQueue()
    subject = f"{system.subjects.namespace}.bench.echo"
    try:
        handle = system.start(EchoActor, [Binding(subject, BenchPing)], latencies=latencies)
        ask_stats: Stats | None = None
        if ask_too:
            for i in range(warmup):
                ask(bus, subject, BenchPing(seq=i, text=PAYLOAD), BenchPong)
            samples: list[int] = []
            started = time.perf_counter()
            for i in range(n):
                t0 = time.perf_counter_ns()
                answer = ask(bus, subject, BenchPing(seq=i, text=PAYLOAD), BenchPong)
                samples.append(time.perf_counter_ns() - t0)
                if answer.seq != i:
                    raise RuntimeError(f"echo answered {answer.seq} to {i}")
            ask_stats = Stats.of(samples, time.perf_counter() - started)
        tell_stats = _time_tells(handle.tell, latencies, n, warmup)
        return ask_stats, tell_stats
    finally:
        system.stop_all()
        bus.close()


def _time_tells(
    tell: Any, latencies: queue.SimpleQueue[int], n: int, warmup: int
) -> Stats:
    """Tell one Stamp at a time and wait for the handler to report its delay."""
    for _ in range(warmup):
        tell(Stamp(time.perf_counter_ns()))
        latencies.get(timeout=5)
    samples: list[int] = []
    started = time.perf_counter()
    for _ in range(n):
        tell(Stamp(time.perf_counter_ns()))
        samples.append(latencies.get(timeout=5))
    return Stats.of(samples, time.perf_counter() - started)


def bench_raw_tell(n: int, warmup: int) -> Stats:
    """Time ``tell`` -> ``on_receive`` on a bare pykka actor."""
    latencies: queue.SimpleQueue[int] = queue.SimpleQueue()
    ref = BareActor.start(latencies)
    try:
        return _time_tells(ref.tell, latencies, n, warmup)
    finally:
        ref.stop()


async def _raw_ask(url: str, n: int, warmup: int) -> Stats:
    nc = await nats.connect(url, name="raw-bench")
    subject = "rawbench." + uuid.uuid4().hex[:10] + ".echo"
    try:

        async def echo(msg: Msg) -> None:
            await nc.publish(msg.reply, msg.data)

        sub = await nc.subscribe(subject, cb=echo)
        await nc.flush()
        payload = encode(BenchPing(seq=0, text=PAYLOAD))
        for _ in range(warmup):
            await nc.request(subject, payload, timeout=5)
        samples: list[int] = []
        started = time.perf_counter()
        for _ in range(n):
            t0 = time.perf_counter_ns()
            await nc.request(subject, payload, timeout=5)
            samples.append(time.perf_counter_ns() - t0)
        stats = Stats.of(samples, time.perf_counter() - started)
        await sub.unsubscribe()
        return stats
    finally:
        await nc.close()


def bench_raw_ask(url: str, n: int, warmup: int) -> Stats:
    """Time ``n`` sequential raw nats-py requests to an echoing subscriber (own loop)."""
    return asyncio.run(_raw_ask(url, n, warmup))


def run(url: str, quick: bool = False, out: Printer = say) -> AskResults:
    """Run the ask benchmark against the NATS at ``url``, print its table and ratio."""
    n, warmup = (QUICK_N, QUICK_WARMUP) if quick else (FULL_N, FULL_WARMUP)
    out(f"== ask: actor ask over NATS vs raw nats-py request/reply (N={n}, warm-up {warmup})")
    raw = bench_raw_ask(url, n, warmup)
    tether, tell_tether = _tether(url, n, warmup, ask_too=True)
    assert tether is not None
    tell_raw = bench_raw_tell(n, warmup)
    results = AskResults(tether=tether, raw=raw, tell_tether=tell_tether, tell_raw=tell_raw)

    def row(name: str, s: Stats) -> list[str]:
        return [name, f"{s.mean_us:.1f}", f"{s.p50_us:.1f}", f"{s.p99_us:.1f}", f"{s.per_s:,.0f}"]

    for line in table(
        ["case", "mean us", "p50 us", "p99 us", "calls/s"],
        [
            row("tether ask (actor over NATS)", tether),
            row("raw nats-py request/reply", raw),
            row("tether tell -> handler", tell_tether),
            row("pykka tell -> on_receive", tell_raw),
        ],
    ):
        out(line)
    out(f"tell -> handler tether/pykka = {results.tell_ratio:.2f} (mean latency)")
    out("ratio = mean latency of tether / mean latency of raw (above 1: tether is slower)")
    out(f"RATIO ask tether/raw = {results.ratio:.2f}")
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m bench.ask [--quick] [--nats URL]``."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.ask",
        description="Actor ask over NATS vs raw nats-py request/reply, and tell latency.",
    )
    parser.add_argument("--quick", action="store_true", help=f"small N ({QUICK_N}) for smoke runs")
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


if __name__ == "__main__":
    raise SystemExit(main())
