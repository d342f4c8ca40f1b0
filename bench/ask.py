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

import asyncio
import queue
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import nats
import pykka
from nats.aio.msg import Msg

from bench.common import Printer, Stats, nats_bench_main, ratio, say, table
from tether.actors.runtime import ActorSystem, Binding, Envelope, TetherActor, ask
from tether.adapters.nats_bus import NatsBus
from tether.events.codec import encode
from tether.events.messages import Message
from tether.events.subjects import Subjects

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


class TetherEcho:
    """An ActorSystem on its own NatsBus with an echo actor bound to a fresh subject."""

    def __init__(self, url: str) -> None:
        self.bus = NatsBus(url, name="tether-bench")
        self.system = ActorSystem(self.bus, Subjects("bench" + uuid.uuid4().hex[:10]))
        self.latencies: queue.SimpleQueue[int] = queue.SimpleQueue()
        self.subject = f"{self.system.subjects.namespace}.bench.echo"
        try:
            self.handle = self.system.start(
                EchoActor, [Binding(self.subject, BenchPing)], latencies=self.latencies
            )
        except BaseException:
            self.close()
            raise

    def ask_once(self, seq: int) -> None:
        """One typed ask of the echo actor over NATS."""
        answer = ask(self.bus, self.subject, BenchPing(seq=seq, text=PAYLOAD), BenchPong)
        if answer.seq != seq:
            raise RuntimeError(f"echo answered {answer.seq} to {seq}")

    def time_asks(self, n: int) -> list[int]:
        """Per-call times (ns) of ``n`` sequential asks."""
        samples: list[int] = []
        for i in range(n):
            t0 = time.perf_counter_ns()
            self.ask_once(i)
            samples.append(time.perf_counter_ns() - t0)
        return samples

    def close(self) -> None:
        """Stop the actor and close the connection."""
        try:
            self.system.stop_all()
        finally:
            self.bus.close()


class RawEcho:
    """A raw nats-py connection on its own asyncio loop, echoing on a fresh subject."""

    def __init__(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.subject = "rawbench." + uuid.uuid4().hex[:10] + ".echo"
        self.payload = encode(BenchPing(seq=0, text=PAYLOAD))
        self.nc: Any = None
        try:
            self.loop.run_until_complete(self._setup(url))
        except BaseException:
            self.close()
            raise

    async def _setup(self, url: str) -> None:
        self.nc = nc = await nats.connect(url, name="raw-bench")

        async def echo(msg: Msg) -> None:
            await nc.publish(msg.reply, msg.data)

        await nc.subscribe(self.subject, cb=echo)
        await nc.flush()

    async def _time(self, n: int) -> list[int]:
        samples: list[int] = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            await self.nc.request(self.subject, self.payload, timeout=5)
            samples.append(time.perf_counter_ns() - t0)
        return samples

    def time_asks(self, n: int) -> list[int]:
        """Per-call times (ns) of ``n`` sequential ``await nc.request`` on the raw loop."""
        return self.loop.run_until_complete(self._time(n))

    def close(self) -> None:
        """Close the connection and the loop."""
        if self.nc is not None:
            self.loop.run_until_complete(self.nc.close())
        self.loop.close()


def _time_tells(
    tell: Callable[[Any], None], latencies: queue.SimpleQueue[int], n: int
) -> list[int]:
    """Tell one Stamp at a time and wait for the handler to report its delay (ns)."""
    samples: list[int] = []
    for _ in range(n):
        tell(Stamp(time.perf_counter_ns()))
        samples.append(latencies.get(timeout=5))
    return samples


def _interleave(
    cases: Sequence[Callable[[int], list[int]]], n: int, warmup: int, block: int
) -> list[Stats]:
    """Warm each case up, then run them in alternating blocks of ``block`` calls so that
    contention from other processes hits every case alike."""
    for case in cases:
        case(warmup)
    samples: list[list[int]] = [[] for _ in cases]
    elapsed = [0.0 for _ in cases]
    done = 0
    while done < n:
        size = min(block, n - done)
        for i, case in enumerate(cases):
            t0 = time.perf_counter()
            samples[i].extend(case(size))
            elapsed[i] += time.perf_counter() - t0
        done += size
    return [Stats.of(s, e) for s, e in zip(samples, elapsed, strict=True)]


def measure(url: str, n: int, warmup: int, block: int = 50) -> AskResults:
    """Measure tether vs raw asks, then TetherActor vs bare pykka tells (``n`` each)."""
    tether = TetherEcho(url)
    try:
        raw = RawEcho(url)
        try:
            ask_tether, ask_raw = _interleave([tether.time_asks, raw.time_asks], n, warmup, block)
        finally:
            raw.close()
        bare_latencies: queue.SimpleQueue[int] = queue.SimpleQueue()
        bare = BareActor.start(bare_latencies)
        try:
            tell_tether, tell_raw = _interleave(
                [
                    lambda k: _time_tells(tether.handle.tell, tether.latencies, k),
                    lambda k: _time_tells(bare.tell, bare_latencies, k),
                ],
                n, warmup, block,
            )
        finally:
            bare.stop()
    finally:
        tether.close()
    return AskResults(tether=ask_tether, raw=ask_raw, tell_tether=tell_tether, tell_raw=tell_raw)


def run(url: str, quick: bool = False, out: Printer = say) -> AskResults:
    """Run the ask benchmark against the NATS at ``url``, print its table and ratio."""
    n, warmup = (QUICK_N, QUICK_WARMUP) if quick else (FULL_N, FULL_WARMUP)
    out(
        f"== ask: actor ask over NATS vs raw nats-py request/reply (N={n}, warm-up {warmup}, "
        "alternating blocks)"
    )
    results = measure(url, n, warmup)
    tether, raw = results.tether, results.raw
    tell_tether, tell_raw = results.tell_tether, results.tell_raw

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
    return nats_bench_main(
        argv,
        "python -m bench.ask",
        "Actor ask over NATS vs raw nats-py request/reply, and tell latency.",
        run,
        quick_help=f"small N ({QUICK_N}) for smoke runs",
    )


if __name__ == "__main__":
    raise SystemExit(main())
