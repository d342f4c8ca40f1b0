"""A whole turn through Tether against the raw SDK call(s) it makes, on the same stand-in.

* **text turn**: a ``UserMessage`` asked of the engine's inbox (``tether serve``'s engine in
  this process: NATS, SQLite, the actors) until the channel's ``completed`` notice, in one
  multi-turn session; the model stand-in answers one short text.
* **tool turn**: the same, answered with a ``read_file`` call, then a short text once the
  file's content comes back: two model calls, the gatekeeper's verdict and the read.
* **raw**: the same model call(s) with the ``anthropic`` SDK straight to an identical
  stand-in (streamed, read to the end), plus the file read for the tool turn. Each call
  sends the request the engine sent for the same turn, taken from the engine's stand-in:
  the conversation so far, the system prompt and the tools, so the model work (building,
  sending and parsing a request that grows with the conversation) is the same on both
  sides and the difference is the engine's.

Both sides run in alternating blocks, so load from other processes lands on both, and
each is timed two ways:

* **settled**: each turn starts after a pause (``PAUSE``), as a person's next message
  does, so what the engine does after a turn's ``completed`` notice (the read models,
  the relay, the delivery records) is not counted in the next turn. This is the latency
  a user sees; the difference of the medians is Tether's overhead per turn (issue 15's
  goal: at most 5 ms for a text turn, 10 ms for a tool turn).
* **back to back**: each turn starts the moment the last one's notice arrived, so that
  background work competes with it (a busy engine's case).

Prints ``RATIO turn tether/raw`` and ``RATIO toolturn tether/raw`` (settled medians) and
the same with ``back-to-back``.
"""

from __future__ import annotations

import os
import queue
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import msgspec

from bench.common import Printer, Stats, nats_bench_main, ratio, say, table
from tether.actors.middleware import MiddlewareSettings
from tether.actors.runtime import ask
from tether.adapters.anthropic_provider import AnthropicProvider
from tether.adapters.config import load_settings
from tether.adapters.fake_llm import FakeLLM, parse_script
from tether.adapters.heap import freeze_startup_objects
from tether.adapters.host import Host
from tether.events.codec import Decoder
from tether.events.messages import Accepted, ChannelMessage, UserMessage

FULL_N, QUICK_N = 100, 6
BLOCK = 5
PAUSE = 0.25
"""Seconds before each settled turn: more than the read models' settle time (0.1 s)."""
QUICK_PAUSE = 0.05
"""``--quick`` is a smoke run: its settled turns wait less (less than the settle time, so
its figures are not the settled ones)."""
PACES = ("settled", "back-to-back")
NOTES = "The notes say: ship on Friday.\n"
TEXT = '  - blocks: [{text: "Noted."}]'
TOOL = ('  - blocks: [{tool_use: {name: read_file, input: {path: notes.txt}}}]\n'
        '  - blocks: [{text: "Friday."}]')


def _script(kind: str, n: int) -> str:
    return "responses:\n" + "\n".join([TEXT if kind == "text" else TOOL] * n) + "\n"


@dataclass(frozen=True)
class TurnResults:
    """Per case (``text`` or ``tool``, then `` back-to-back`` for that pace): Tether's and
    the raw calls' figures."""

    tether: dict[str, Stats]
    raw: dict[str, Stats]

    def overhead_ms(self, kind: str) -> float:
        """Tether's median turn less the raw median, milliseconds."""
        return (self.tether[kind].p50_us - self.raw[kind].p50_us) / 1000

    def ratio(self, kind: str) -> float:
        """Tether's median turn over the raw median."""
        return ratio(self.tether[kind].p50_us, self.raw[kind].p50_us)


class _Engine:
    """An engine in this process against its own stand-in, and one chat session on it."""

    def __init__(self, url: str, tmp: str, kind: str, n: int) -> None:
        self.llm = FakeLLM(parse_script(_script(kind, n + 1))).start()
        env = {"TETHER_NATS_URL": url, "TETHER_STATE_DIR": os.path.join(tmp, "state"),
               "TETHER_NAMESPACE": "bench" + uuid.uuid4().hex[:8], "TETHER_WORKSPACE": tmp,
               "TETHER_RULES_DIR": os.path.join(tmp, "rules"), "TETHER_TITLES": "false",
               "TETHER_BUDGET_USD": "0",  # no limit: a full run spends more than the default
               "ANTHROPIC_BASE_URL": self.llm.base_url}
        settings = load_settings(env=env, cwd=tmp)
        unlimited = MiddlewareSettings(rate_per_minute=1e9, burst=1_000_000)
        self.host = Host(msgspec.structs.replace(settings, middleware=unlimited),
                         provider=AnthropicProvider(None, self.llm.base_url)).start()
        freeze_startup_objects()  # as `tether serve` does once its engine has started
        self.notices: queue.Queue[ChannelMessage] = queue.Queue()
        decoder: Decoder[ChannelMessage] = Decoder(ChannelMessage)
        self.sub = self.host.bus.subscribe(self.host.subjects.channel_out("bench"),
                                           lambda m: self.notices.put(decoder.decode(m.data)))
        self.session = ""
        self.turn()  # the session starts (its first turn is not timed)

    def turn(self) -> None:
        """One turn, from the message sent to its ``completed`` notice."""
        self.session = ask(self.host.bus, self.host.subjects.inbox,
                           UserMessage(text="what do the notes say?", channel="bench",
                                       session_id=self.session), Accepted,
                           timeout=30).session_id
        while True:
            notice = self.notices.get(timeout=60)
            if notice.kind == "completed":
                return
            if notice.kind in ("failed", "error"):
                raise RuntimeError(f"the turn failed: {notice.text}")

    def close(self) -> None:
        self.sub.close()
        self.host.stop()
        self.llm.stop()


class _Raw:
    """The same model call(s), straight through the SDK to an identical stand-in: each
    sends the very request the engine sent for the same turn (its conversation so far,
    system prompt and tools), so both sides pay for the same model work."""

    def __init__(self, kind: str, n: int, workspace: str, engine: FakeLLM) -> None:
        self.kind = kind
        self.llm = FakeLLM(parse_script(_script(kind, n))).start()
        self.client = anthropic.Anthropic(api_key="bench", base_url=self.llm.base_url)
        self.notes = Path(workspace, "notes.txt")
        self.engine = engine
        self.calls = 2 if kind == "tool" else 1
        self.next = self.calls
        """The engine's next request to send again (its first turn is not timed)."""
        self.sent: list[dict[str, Any]] = []
        """The requests of the next turn (decoded before it is timed)."""

    def _call(self, body: dict[str, Any]) -> anthropic.types.Message:
        params = {k: v for k, v in body.items() if k != "stream"}
        with self.client.messages.stream(**params) as stream:
            return stream.get_final_message()

    def prepare(self) -> None:
        """Take the next turn's requests from the engine's stand-in (not timed)."""
        try:
            self.sent = [self.engine.request(i) for i in range(self.next, self.next + self.calls)]
        except IndexError:
            raise RuntimeError("the engine has not made this turn's calls yet") from None
        self.next += self.calls

    def turn(self) -> None:
        sent = self.sent
        reply = self._call(sent[0])
        if self.kind == "tool":
            assert reply.content[0].type == "tool_use"
            self.notes.read_text()  # the read the engine's tool made (its result is in sent[1])
            self._call(sent[1])

    def close(self) -> None:
        self.client.close()
        self.llm.stop()


def _alternate(tether: Callable[[], None], raw: _Raw, n: int, pause: float
               ) -> tuple[Stats, Stats]:
    samples: dict[str, list[int]] = {"tether": [], "raw": []}
    elapsed = {"tether": 0.0, "raw": 0.0}
    sides = (("tether", tether, lambda: None), ("raw", raw.turn, raw.prepare))
    for start in range(0, n, BLOCK):
        for side, run, prepare in sides:
            for _ in range(min(BLOCK, n - start)):
                prepare()
                time.sleep(pause)
                t0 = time.perf_counter_ns()
                run()
                taken = time.perf_counter_ns() - t0
                samples[side].append(taken)
                elapsed[side] += taken / 1e9
    return (Stats.of(samples["tether"], elapsed["tether"]),
            Stats.of(samples["raw"], elapsed["raw"]))


def case(kind: str, pace: str) -> str:
    """The name of a case in :class:`TurnResults`."""
    return kind if pace == "settled" else f"{kind} {pace}"


def measure(url: str, n: int, pause: float = PAUSE) -> TurnResults:
    """``n`` text turns and ``n`` tool turns each way, settled ones ``pause`` apart."""
    tether: dict[str, Stats] = {}
    raw: dict[str, Stats] = {}
    for kind in ("text", "tool"):
        for pace in PACES:  # each on a new engine, so both start from a new session
            with tempfile.TemporaryDirectory(prefix="tether-bench-turn-") as tmp:
                Path(tmp, "notes.txt").write_text(NOTES)
                engine = _Engine(url, tmp, kind, n)
                direct = _Raw(kind, n, tmp, engine.llm)
                try:
                    tether[case(kind, pace)], raw[case(kind, pace)] = _alternate(
                        engine.turn, direct, n, pause if pace == "settled" else 0.0)
                finally:
                    engine.close()
                    direct.close()
    return TurnResults(tether, raw)


def run(url: str, quick: bool = False, out: Printer = say) -> TurnResults:
    """Run and print the table and the ratios."""
    n, pause = (QUICK_N, QUICK_PAUSE) if quick else (FULL_N, PAUSE)
    out(f"== turn: {n} text turns and {n} tool turns through Tether against the raw SDK "
        f"call(s) to the same stand-in (alternating blocks of {BLOCK}), settled "
        f"({pause} s before each) and back to back")
    results = measure(url, n, pause)
    rows = []
    for pace in PACES:
        for kind in ("text", "tool"):
            name = case(kind, pace)
            for side, stats in (("tether", results.tether[name]), ("raw", results.raw[name])):
                rows.append([f"{kind} turn, {pace}, {side}", f"{stats.p50_us / 1000:.2f}",
                             f"{stats.mean_us / 1000:.2f}", f"{stats.p99_us / 1000:.2f}"])
    for line in table(["case", "p50 ms", "mean ms", "p99 ms"], rows):
        out(line)
    for pace in PACES:
        out(f"engine overhead (p50, {pace}): text turn "
            f"{results.overhead_ms(case('text', pace)):.2f} ms, tool turn "
            f"{results.overhead_ms(case('tool', pace)):.2f} ms")
    for pace in PACES:
        suffix = "" if pace == "settled" else f" {pace}"
        out(f"RATIO turn{suffix} tether/raw = {results.ratio(case('text', pace)):.2f}")
        out(f"RATIO toolturn{suffix} tether/raw = {results.ratio(case('tool', pace)):.2f}")
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.turn [--quick] [--nats URL]``."""
    return nats_bench_main(argv, "python -m bench.turn", __doc__ or "", run)


if __name__ == "__main__":
    raise SystemExit(main())
