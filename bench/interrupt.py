"""Kill latency: a KillSession answered while the session streams, against an idle session.

DESIGN.md asks that a session answer an interrupt or a kill within 50 ms even in the
middle of a stream. This measures the ask to the session manager (KillSession -> Killed,
which includes the session recording ``StatusChanged(killed)`` and cancelling the model
task) while the model is streaming, and the same ask to a session that is idle, in the
same run. The ratio shows what an active stream adds.
"""

from __future__ import annotations

import queue
import tempfile
import time
import uuid
from collections.abc import Sequence

import msgspec

from bench.common import Printer, Stats, nats_bench_main, ratio, say, table
from tether.actors.middleware import MiddlewareSettings
from tether.actors.runtime import ask
from tether.adapters.anthropic_provider import AnthropicProvider
from tether.adapters.config import load_settings
from tether.adapters.fake_llm import FakeLLM, parse_script
from tether.adapters.host import Host
from tether.events.codec import Decoder
from tether.events.messages import Accepted, ChannelMessage, Killed, KillSession, UserMessage

LONG = "streaming text " * 400


def _script(n: int) -> str:
    responses = []
    for i in range(n):
        responses.append(
            f'  - match: "stream {i} "\n    chunk: 5\n    delay_ms: 5\n'
            f'    blocks: [{{text: "{LONG}"}}]'
        )
        responses.append(f'  - match: "idle {i} "\n    blocks: [{{text: "ok"}}]')
    return "responses:\n" + "\n".join(responses) + "\n"


def measure(url: str, n: int) -> tuple[Stats, Stats]:
    """(kill while streaming, kill while idle) over ``n`` sessions each."""
    with tempfile.TemporaryDirectory() as tmp, FakeLLM(parse_script(_script(n))) as llm:
        env = {
            "TETHER_NATS_URL": url,
            "TETHER_STATE_DIR": tmp,
            "TETHER_NAMESPACE": "bench" + uuid.uuid4().hex[:8],
            "TETHER_WORKSPACE": tmp,
            "TETHER_RULES_DIR": tmp + "/rules",
            "ANTHROPIC_BASE_URL": llm.base_url,
        }
        settings = load_settings(env=env, cwd=tmp)
        # One sender starts 2n sessions as fast as it can: the inbox's rate limit (burst 5)
        # would refuse most of them; this bench measures kills, not the limiter.
        unlimited = MiddlewareSettings(rate_per_minute=1e9, burst=1_000_000)
        host = Host(msgspec.structs.replace(settings, middleware=unlimited),
                    provider=AnthropicProvider(api_key=None, base_url=llm.base_url)).start()
        try:
            inbox: queue.Queue[ChannelMessage] = queue.Queue()
            decoder: Decoder[ChannelMessage] = Decoder(ChannelMessage)
            sub = host.bus.subscribe(host.subjects.channel_out("bench"),
                                     lambda m: inbox.put(decoder.decode(m.data)))
            streaming: list[int] = []
            idle: list[int] = []
            started = time.perf_counter()
            for i in range(n):
                for mode, samples in (("stream", streaming), ("idle", idle)):
                    sid = ask(host.bus, host.subjects.inbox,
                              UserMessage(text=f"{mode} {i} ", channel="bench"), Accepted,
                              timeout=10).session_id
                    want = "stream" if mode == "stream" else "completed"
                    while True:
                        msg = inbox.get(timeout=30)
                        if msg.session_id == sid and msg.kind == want:
                            break
                    t0 = time.perf_counter_ns()
                    ask(host.bus, host.subjects.manager, KillSession(session_id=sid), Killed,
                        timeout=10)
                    samples.append(time.perf_counter_ns() - t0)
            elapsed = time.perf_counter() - started
            sub.close()
        finally:
            host.stop()
    return Stats.of(streaming, elapsed / 2), Stats.of(idle, elapsed / 2)


def run(url: str, quick: bool = False, out: Printer = say) -> float:
    """Run and print; returns the streaming/idle ratio."""
    n = 5 if quick else 40
    out(f"== kill latency: {n} sessions killed mid-stream, {n} killed idle")
    streaming, idle = measure(url, n)
    rows = [
        [name, f"{s.mean_us / 1000:.2f}", f"{s.p50_us / 1000:.2f}", f"{s.p99_us / 1000:.2f}"]
        for name, s in (("kill mid-stream", streaming), ("kill idle (baseline)", idle))
    ]
    for line in table(["case", "mean ms", "p50 ms", "p99 ms"], rows):
        out(line)
    value = ratio(streaming.mean_us, idle.mean_us)
    out(f"budget: 50 ms; worst mid-stream kill seen: {streaming.p99_us / 1000:.2f} ms")
    out(f"RATIO kill streaming/idle = {value:.2f}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.interrupt [--quick] [--nats URL]``."""
    return nats_bench_main(
        argv, "python -m bench.interrupt", __doc__ or "", run
    )


if __name__ == "__main__":
    raise SystemExit(main())
