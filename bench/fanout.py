"""Stream fan-out: how many sessions streaming at 20 deltas/s one process routes in time.

A real :class:`adapters.host.Host` (the given NATS or an embedded one, SQLite in a
temporary directory) runs with its notification router ticked as the host ticks it.
Sessions are created for real: one UserMessage each on ``<ns>.inbox``, each from its own
channel (``fan0``, ``fan1``...), answered by the fake model server
(:mod:`adapters.fake_llm`, run in a child process so that its recorded requests and its
threads count in neither this process's memory nor its CPU). Each session then waits for
input, its session actor and TTSR monitor alive.

* **router**: for every session, one ``turn_start`` StreamDelta naming its channel, then
  20 ``text`` deltas per second on ``subjects.stream(sid)``, the sessions spread evenly
  over each 50 ms, timed on a separate :class:`adapters.nats_bus.NatsBus`'s loop and sent
  as a session's actor sends them: told in process to the router and the session's TTSR
  monitor (which take streams in process only), and published on the host's bus. Every delta's
  text carries its send time. The router gathers them per session and flushes them every
  ``notifications.debounce`` seconds (0.5 by default) as one ChannelMessage (kind
  ``stream``) on the session's channel subject, where a third connection receives them.
  As in production, each session's TTSR monitor also takes in every delta.
* **raw** (the baseline): the same deltas, published the same way on another namespace,
  and a plain nats-py subscriber on its own connection and loop that turns each delta
  into a ChannelMessage on the channel subject at once: no actors, no store, no debounce.

Lag = receive time - send time of the newest delta in each channel message. Samples are
those whose newest delta was sent after a warm-up and at least ``debounce + 0.1`` s before
the publisher stopped: the text left over when a session's stream stops is flushed by
the tick, up to a debounce later by design, which says nothing about keeping up. The
``turn_start`` deltas (each makes the router catch up with the outbox) are sent, and the
router drained, before the timed part. A phase ends when every text delta sent has
arrived in some channel message (the ``delivered`` column), or 60 s after the publisher
stopped.

Sessions grow in steps (10, 25, 50, 100, 200, 300, 400, 600, 800; ``--quick``: 10 only),
each step running the router, then the raw path, for 8 s each (``--quick``: 1.5 s), the
first second (0.3 s) a warm-up; it stops after the first step whose router p95 lag
reaches 1 s. Reported per step: sessions, deltas/s asked
for and sent, channel messages/s received, lag samples, p50/p95/max lag, lag growth and
the share delivered. "Sustained" is the largest step whose deltas were sent as asked
(95 % at least: the process sends them, as its sessions would), whose router p95 lag is
under 1 s and whose median lag grew by less than 100 ms from the first to the last third
of the timed window: a p95 under 1 s over a few seconds while a backlog builds up is not
a load the process keeps up with.

Ratio: ``RATIO fanout router/raw`` = router p95 lag / raw p95 lag at the sustained step (at
the first step when none is sustained): a cost ratio like the others, above 1 meaning the
router is slower. Lag, not deltas/s: at a sustained step both paths carry all that is
offered, so a throughput ratio would be about 1 by definition; how much later the text
reaches a chat is what the router adds. Even unloaded, the router's p95 is up to one
delta interval (50 ms): a flush that the tick (every ``debounce / 2``) makes, rather than
an arriving delta, sends text whose newest delta has waited since it arrived. The router
sends one message per session per debounce, the raw path one per delta.

Memory per idle session: VmRSS (``/proc/self/status``) before and after creating N idle
sessions (200; ``--quick``: 10) after two warm-up sessions, divided by N. It includes each
session's two actor threads, its subscriptions, its stored events' share of SQLite's
cache and the read models.

Everything (publisher, receiver, raw forwarder, host) shares one interpreter and its GIL,
so the raw path is also what the measuring itself costs. Near saturation a pause stalls
everything and leaves a queue that drains slowly (the column ``gc ms`` gives the longest
garbage-collection pause of each phase: a full collection takes a few hundred ms with
hundreds of sessions), so the p95 of the largest steps varies from run to run.

``python -m bench.fanout [--quick] [--nats URL]``
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import queue
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import nats
from nats.aio.msg import Msg

from bench.common import Printer, nats_bench_main, ratio, say, table
from tether.actors.ports import Inbound
from tether.actors.runtime import Tick
from tether.adapters.anthropic_provider import AnthropicProvider
from tether.adapters.config import load_settings
from tether.adapters.host import Host
from tether.adapters.nats_bus import NatsBus
from tether.events.codec import Decoder, encode
from tether.events.messages import ChannelMessage, StreamDelta, UserMessage
from tether.events.subjects import Subjects

RATE = 20.0
"""Text deltas per second per session."""
SLOTS = 10
"""Each 1/RATE period is cut in this many slots; a session publishes in one of them."""
LAG_BUDGET_S = 1.0
"""A step is sustained when its router p95 lag stays under this..."""
GROWTH_BUDGET_MS = 100.0
"""... and its median lag grows by less than this from the first to the last third of the
timed window (more: a backlog is building up, and a longer phase would cross the budget)."""
SENT_SHARE = 0.95
"""... and only when the deltas asked for were sent: the sessions' stream is produced in
the engine's process, so past some load the process cannot even send it, and a router
that keeps up with less than was asked says nothing about the step."""
FULL_STEPS = (10, 25, 50, 100, 200, 300, 400, 600, 800)
QUICK_STEPS = (10,)
FULL_PHASE_S = 8.0
QUICK_PHASE_S = 1.5
FULL_WARMUP_S = 1.0
QUICK_WARMUP_S = 0.3
FULL_IDLE = 200
QUICK_IDLE = 10
WARM_SESSIONS = 2
"""Sessions created before the memory is first read (first-use costs)."""
CREATE_BATCH = 20
"""Sessions asked for at once while creating them."""
DRAIN_S = 60.0
"""Longest wait, after the publisher stops, for every delta sent to arrive."""
GENERATION = 1000
"""Generations of the published streams start here (above the sessions' own)."""


def rss_bytes() -> int:
    """This process's resident set size now (VmRSS), else its peak (``ru_maxrss``)."""
    with contextlib.suppress(OSError), open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@contextlib.contextmanager
def fake_model(workdir: str) -> Iterator[str]:
    """A fake model server (:mod:`adapters.fake_llm`) in a child process; yields its URL.

    Its script is empty, so every request gets the short ``(script exhausted)`` reply."""
    script = os.path.join(workdir, "fake-llm.yaml")
    with open(script, "w") as fh:
        fh.write("responses: []\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether.adapters.fake_llm", "--script", script, "--quiet"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError(f"the fake model server did not start (exit {proc.poll()})")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class GcPauses:
    """Times every garbage collection of this process while installed: (end ns, pause
    ns). Near saturation, one long pause leaves a queue that takes seconds to drain."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, int]] = []
        self._started = 0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        now = time.perf_counter_ns()
        if phase == "start":
            self._started = now
        else:
            self.pauses.append((now, now - self._started))

    def longest(self, start_ns: int, end_ns: int) -> float:
        """The longest pause (ms) that ended between ``start_ns`` and ``end_ns``."""
        return max((d for t, d in self.pauses if start_ns <= t <= end_ns), default=0) / 1e6

    def install(self) -> None:
        """Start watching collections."""
        gc.callbacks.append(self._callback)

    def remove(self) -> None:
        """Stop watching collections."""
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._callback)


@dataclass(frozen=True)
class Target:
    """One session's stream as the publisher sees it."""

    session_id: str
    channel: str
    subject: str


@dataclass(frozen=True)
class PhaseResult:
    """One path (router or raw) at one step."""

    path: str
    sessions: int
    sent: int
    sent_per_s: float
    messages_per_s: float
    lags_ms: list[float]
    growth_ms: float | None
    """Median lag of the last third of the timed window minus that of the first third
    (None when a third has no sample)."""
    gc_ms: float
    """The longest garbage-collection pause while the deltas were published."""
    delivered: float
    """Share of the text deltas sent found in channel messages by the end of the phase."""

    def _pick(self, q: float) -> float:
        ordered = sorted(self.lags_ms)
        if not ordered:
            return float("inf")
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]

    @property
    def p50(self) -> float:
        """Median lag (ms); infinite without samples."""
        return statistics.median(self.lags_ms) if self.lags_ms else float("inf")

    @property
    def p95(self) -> float:
        """95th percentile lag (ms); infinite without samples."""
        return self._pick(0.95)

    @property
    def max(self) -> float:
        """Largest lag (ms); infinite without samples."""
        return max(self.lags_ms) if self.lags_ms else float("inf")

    @property
    def sustained(self) -> bool:
        """The load was offered (``SENT_SHARE`` of the deltas asked for were sent), p95
        lag under the budget, and no backlog building up."""
        growth = self.growth_ms
        return (self.sent_per_s >= SENT_SHARE * RATE * self.sessions
                and self.p95 < LAG_BUDGET_S * 1000
                and (growth is None or growth < GROWTH_BUDGET_MS))


@dataclass(frozen=True)
class FanoutResults:
    """Everything the fan-out benchmark measured."""

    steps: list[tuple[PhaseResult, PhaseResult]]
    sustained: int
    """Index in ``steps`` of the largest step with router p95 lag under the budget; -1:
    none."""
    idle_sessions: int
    rss_before: int
    rss_after: int
    threads_before: int
    threads_after: int
    debounce: float

    @property
    def bytes_per_session(self) -> float:
        """RSS growth per idle session (bytes)."""
        return (self.rss_after - self.rss_before) / self.idle_sessions

    @property
    def ratio(self) -> float:
        """Router p95 lag over raw p95 lag at the sustained step (else the first)."""
        if not self.steps:
            return float("inf")
        router, raw = self.steps[max(self.sustained, 0)]
        return ratio(router.p95, raw.p95)


class Collector:
    """Receives channel messages (on the bus loop) and keeps those of the current phase:
    (receive time, newest delta's send time, deltas contained), times in ns."""

    def __init__(self) -> None:
        self.phase = ""
        self.records: list[tuple[int, int, int]] = []
        self.created: queue.SimpleQueue[tuple[str, ChannelMessage]] = queue.SimpleQueue()
        self._decoder: Decoder[ChannelMessage] = Decoder(ChannelMessage)

    def start(self, phase: str) -> None:
        """Keep only what the deltas of ``phase`` carry from now on."""
        self.records = []
        self.phase = phase

    def delivered(self) -> int:
        """Text deltas of the current phase received so far."""
        return sum(n for _, _, n in self.records)

    def on_message(self, msg: Inbound) -> None:
        """Subscription callback: stamp, decode, keep."""
        now = time.perf_counter_ns()
        message = self._decoder.decode(msg.data)
        if message.kind != "stream":
            if message.kind in ("completed", "failed", "error"):
                self.created.put((msg.subject.split(".")[2], message))
            return
        text = message.text
        start = text.rfind("[")
        if start < 0 or not text.endswith("]"):
            return  # the fake model's own reply
        phase, _, sent = text[start + 1:-1].partition("@")
        if phase != self.phase:
            return
        self.records.append((now, int(sent), text.count(f"[{phase}@")))


class RawForwarder:
    """The baseline: plain nats-py on its own loop thread. Each StreamDelta on
    ``<prefix>.session.*.stream`` goes straight on as a ChannelMessage to
    ``<prefix>.channel.<channel>.out``."""

    def __init__(self, url: str, subjects: Subjects, channels: dict[str, str]) -> None:
        self.subjects = subjects
        self.channels = channels
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="raw-forwarder",
                                       daemon=True)
        self.thread.start()
        self.nc: Any = None
        try:
            self._call(self._setup(url))
        except BaseException:
            self.close()
            raise

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(15)

    async def _setup(self, url: str) -> None:
        self.nc = nc = await nats.connect(url, name="raw-fanout")
        decoder = msgspec.json.Decoder(StreamDelta)
        encoder = msgspec.json.Encoder()
        channels, subjects = self.channels, self.subjects

        async def forward(msg: Msg) -> None:
            delta = decoder.decode(msg.data)
            if delta.kind != "text":
                return
            out = ChannelMessage(session_id=delta.session_id, kind="stream", text=delta.text,
                                 seq=delta.seq)
            await nc.publish(subjects.channel_out(channels[delta.session_id]),
                             encoder.encode(out))

        await nc.subscribe(subjects.all_streams, cb=forward)
        await nc.flush()

    def close(self) -> None:
        """Close the connection and stop the loop."""
        if self.nc is not None:
            with contextlib.suppress(Exception):
                self._call(self.nc.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)


async def publish(bus: NatsBus, targets: Sequence[Target], phase: str, generation: int,
                  duration: float, send: Callable[[str, StreamDelta], None] | None = None
                  ) -> tuple[int, int, int]:
    """On ``bus``'s loop: ``RATE`` text deltas per second per target for ``duration``
    seconds, the targets spread over ``SLOTS`` slots of each period; each published on
    ``bus``, or given to ``send``. Returns (text deltas sent, start ns, end ns)."""
    nc = bus.nc
    seqs = [0] * len(targets)
    step = 1.0 / RATE / SLOTS
    loop = asyncio.get_running_loop()
    start_ns = time.perf_counter_ns()
    start = loop.time()
    tick = sent = 0
    while True:
        wait = start + tick * step - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)
        if loop.time() - start >= duration:
            break
        for i in range(tick % SLOTS, len(targets), SLOTS):
            target = targets[i]
            seqs[i] += 1
            text = f"[{phase}@{time.perf_counter_ns()}]"
            delta = StreamDelta(session_id=target.session_id, generation=generation,
                                seq=seqs[i], kind="text", text=text)
            if send is not None:
                send(target.subject, delta)
            else:
                await nc.publish(target.subject, encode(delta))
            sent += 1
        tick += 1
    end_ns = time.perf_counter_ns()
    await nc.flush()
    return sent, start_ns, end_ns


class Fanout:
    """The host under test, its sessions, the publishing and receiving connections and
    the raw forwarder."""

    def __init__(self, url: str, workdir: str, model_url: str, max_sessions: int) -> None:
        env = {
            "TETHER_NATS_URL": url,
            "TETHER_STATE_DIR": workdir,
            "TETHER_NAMESPACE": "bench" + uuid.uuid4().hex[:8],
            "TETHER_WORKSPACE": workdir,
            "TETHER_RULES_DIR": os.path.join(workdir, "rules"),
            "ANTHROPIC_BASE_URL": model_url,
        }
        settings = msgspec.structs.replace(load_settings(env=env, cwd=workdir),
                                           max_sessions=max_sessions)
        self.debounce = settings.notifications.debounce
        self.raw_subjects = Subjects("rawfan" + uuid.uuid4().hex[:8])
        self.targets: list[Target] = []
        self.raw_targets: list[Target] = []
        self.channels: dict[str, str] = {}
        self.collector = Collector()
        self.gc = GcPauses()
        self._stack: list[Any] = []
        self.phases = 0
        try:
            self.gc.install()
            self._stack.append(self.gc.remove)
            self.host = Host(settings, provider=AnthropicProvider(api_key=None,
                                                                  base_url=model_url)).start()
            self._stack.append(self.host.stop)
            self.tx = NatsBus(url, name="fanout-publisher")
            self._stack.append(self.tx.close)
            self.rx = NatsBus(url, name="fanout-receiver")
            self._stack.append(self.rx.close)
            for subjects in (self.host.subjects, self.raw_subjects):
                sub = self.rx.subscribe(f"{subjects.namespace}.channel.*.out",
                                        self.collector.on_message)
                self._stack.append(sub.close)
            self.raw = RawForwarder(url, self.raw_subjects, self.channels)
            self._stack.append(self.raw.close)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop everything, newest first."""
        while self._stack:
            with contextlib.suppress(Exception):
                self._stack.pop()()

    def grow(self, n: int) -> None:
        """Create sessions (one UserMessage each, ``CREATE_BATCH`` at a time) until there
        are ``n``; each ends its first turn and waits for input."""
        subjects = self.host.subjects
        while len(self.targets) < n:
            first = len(self.targets)
            channels = [f"fan{first + i}" for i in range(min(CREATE_BATCH, n - first))]
            for channel in channels:
                self.tx.publish(subjects.inbox, encode(UserMessage(
                    text=f"fanout session {channel}", channel=channel)))
            waiting = set(channels)
            while waiting:
                channel, message = self.collector.created.get(timeout=60)
                if message.kind != "completed":
                    raise RuntimeError(f"creating a session failed: {message.kind}: "
                                       f"{message.text}")
                if channel in waiting:
                    waiting.discard(channel)
                    sid = message.session_id
                    self.channels[sid] = channel
                    self.targets.append(Target(sid, channel, subjects.stream(sid)))
                    self.raw_targets.append(Target(sid, channel,
                                                   self.raw_subjects.stream(sid)))

    def phase(self, path: str, sessions: int, duration: float, warmup: float) -> PhaseResult:
        """Stream through ``path`` ("router" or "raw") from the first ``sessions``
        sessions for ``duration`` seconds; measure as the module docstring says."""
        targets = (self.targets if path == "router" else self.raw_targets)[:sessions]
        self.phases += 1
        phase = f"p{self.phases}"
        generation = GENERATION + self.phases
        self.collector.start(phase)
        # As a session's actor sends: in process to the router and the session's monitor,
        # and on the host's bus for observers.
        send = self.host.system.send if path == "router" else None
        for target in targets:
            start = StreamDelta(session_id=target.session_id, generation=generation, seq=0,
                                kind="turn_start", channel=target.channel)
            if send is not None:
                send(target.subject, start)
            else:
                self.tx.publish(target.subject, encode(start))
        self.tx.flush()
        if path == "router":
            self.host.router.ref.ask(Tick(), timeout=DRAIN_S)  # after the turn_starts
        sent, start_ns, end_ns = self.tx.call(
            lambda: publish(self.tx, targets, phase, generation, duration, send),
            timeout=duration + 30)
        deadline = time.monotonic() + DRAIN_S
        while self.collector.delivered() < sent and time.monotonic() < deadline:
            time.sleep(0.05)
        records = list(self.collector.records)
        self.collector.start("")
        lo = start_ns + int(warmup * 1e9)
        hi = end_ns - int((self.debounce + 0.1) * 1e9)
        timed = sorted((newest, (recv - newest) / 1e6) for recv, newest, _ in records
                       if lo <= newest <= hi)
        lags = [lag for _, lag in timed]
        third = (hi - lo) // 3
        first = [lag for sent_ns, lag in timed if sent_ns < lo + third]
        last = [lag for sent_ns, lag in timed if sent_ns >= hi - third]
        growth = (statistics.median(last) - statistics.median(first)
                  if first and last else None)
        received = sum(1 for recv, _, _ in records if lo <= recv <= end_ns)
        window = max(end_ns - lo, 1) / 1e9
        elapsed = max(end_ns - start_ns, 1) / 1e9
        delivered = sum(n for _, _, n in records)
        time.sleep(0.2)  # let the TTSR monitors catch up before the next phase
        return PhaseResult(path=path, sessions=sessions, sent=sent, sent_per_s=sent / elapsed,
                           messages_per_s=received / window, lags_ms=lags, growth_ms=growth,
                           gc_ms=self.gc.longest(start_ns, end_ns),
                           delivered=delivered / sent if sent else 0.0)


def _settle() -> tuple[int, int]:
    """(RSS, live threads) once garbage is collected."""
    time.sleep(0.5)
    gc.collect()
    return rss_bytes(), threading.active_count()


def measure(url: str, steps: Sequence[int], idle: int, duration: float, warmup: float,
            out: Printer = say) -> FanoutResults:
    """Memory for ``idle`` sessions, then the steps (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="tether-bench-fanout-") as tmp, \
            fake_model(tmp) as model_url:
        fanout = Fanout(url, tmp, model_url, max_sessions=max(*steps, idle + WARM_SESSIONS) + 1)
        try:
            fanout.grow(WARM_SESSIONS)
            rss_before, threads_before = _settle()
            t0 = time.perf_counter()
            fanout.grow(WARM_SESSIONS + idle)
            took = time.perf_counter() - t0
            rss_after, threads_after = _settle()
            out(f"created {idle} sessions in {took:.1f} s; "
                f"router debounce {fanout.debounce:g} s")
            results: list[tuple[PhaseResult, PhaseResult]] = []
            sustained = -1
            for n in steps:
                fanout.grow(n)
                router = fanout.phase("router", n, duration, warmup)
                raw = fanout.phase("raw", n, duration, warmup)
                results.append((router, raw))
                out(f"  {n} sessions: router p95 {router.p95:.1f} ms, raw p95 {raw.p95:.1f} ms")
                if router.sustained:
                    sustained = len(results) - 1
                if router.p95 >= LAG_BUDGET_S * 1000:
                    break
        finally:
            fanout.close()
    return FanoutResults(steps=results, sustained=sustained, idle_sessions=idle,
                         rss_before=rss_before, rss_after=rss_after,
                         threads_before=threads_before, threads_after=threads_after,
                         debounce=fanout.debounce)


def run(url: str, quick: bool = False, out: Printer = say) -> FanoutResults:
    """Run the fan-out benchmark against the NATS at ``url``; print its tables and ratio."""
    steps = QUICK_STEPS if quick else FULL_STEPS
    idle = QUICK_IDLE if quick else FULL_IDLE
    duration = QUICK_PHASE_S if quick else FULL_PHASE_S
    warmup = QUICK_WARMUP_S if quick else FULL_WARMUP_S
    out(f"== fanout: sessions streaming {RATE:g} deltas/s through the router to channel "
        f"subjects, vs raw nats-py forwarding (steps {', '.join(map(str, steps))}; "
        f"{duration:g} s each, warm-up {warmup:g} s)")
    results = measure(url, steps, idle, duration, warmup, out)

    def ms(value: float | None) -> str:
        return "-" if value is None or value == float("inf") else f"{value:.1f}"

    rows = [
        [f"{p.sessions}", p.path, f"{p.sessions * RATE:,.0f}", f"{p.sent_per_s:,.0f}",
         f"{p.messages_per_s:,.1f}", f"{len(p.lags_ms)}", ms(p.p50), ms(p.p95), ms(p.max),
         ms(p.growth_ms), ms(p.gc_ms), f"{p.delivered:.0%}"]
        for step in results.steps for p in step
    ]
    for line in table(["sessions", "path", "deltas/s", "sent/s", "msgs/s", "samples",
                       "p50 ms", "p95 ms", "max ms", "growth ms", "gc ms", "delivered"],
                      rows):
        out(line)
    out("deltas/s = asked for, sent/s = published; msgs/s = channel messages received; "
        "lag = receive - send of the newest delta in a message (samples: messages timed); "
        "growth = median lag, last third of the window - first third; gc = longest "
        "garbage-collection pause while publishing")
    if results.sustained >= 0:
        best = results.steps[results.sustained][0]
        out(f"sustained: {best.sessions} sessions ({best.sent_per_s:,.0f} deltas/s sent as "
            f"asked) with router p95 lag < {LAG_BUDGET_S:g} s and lag growth < "
            f"{GROWTH_BUDGET_MS:g} ms")
    else:
        out(f"sustained: none (fewer deltas sent than asked, router p95 lag >= "
            f"{LAG_BUDGET_S:g} s or lag growth >= {GROWTH_BUDGET_MS:g} ms from the first step)")
    if results.steps and results.steps[-1][0].sustained:
        out(f"(the last step, {results.steps[-1][0].sessions} sessions, is the cap: "
            "more was not tried)")
    threads = (results.threads_after - results.threads_before) / results.idle_sessions
    out(f"memory: {results.idle_sessions} idle sessions, RSS {results.rss_before / 2**20:.1f}"
        f" -> {results.rss_after / 2**20:.1f} MiB = "
        f"{results.bytes_per_session / 1024:.0f} KiB per idle session "
        f"({threads:g} threads each)")
    out("ratio = router p95 lag / raw p95 lag at the sustained step (above 1: the router "
        "is slower)")
    out(f"RATIO fanout router/raw = {results.ratio:.2f}")
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.fanout [--quick] [--nats URL]``."""
    return nats_bench_main(
        argv,
        "python -m bench.fanout",
        "Sessions streaming 20 deltas/s through the notification router: how many one "
        "process sustains with p95 lag under 1 s, against raw nats-py forwarding, and the "
        "memory per idle session.",
        run,
        quick_help=f"{QUICK_STEPS[-1]} sessions only, {QUICK_PHASE_S:g} s per path",
    )


if __name__ == "__main__":
    raise SystemExit(main())
