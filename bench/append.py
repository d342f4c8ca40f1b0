"""A session turn's event append, Tether vs raw eventsourcing, on SQLite; and replay.

* **tether**: what one session turn records (Created, UserMessageReceived,
  AssistantMessageAppended with a tool_use, ToolCallProposed, ToolCallDecided,
  ToolCallExecuted, AssistantMessageAppended, TurnCompleted, StatusChanged) on the real
  :class:`events.session.Session` aggregate, saved as ``actors/session.py`` does, one
  ``app.save(session)`` after each step, through :class:`events.application.TetherApplication`
  (typed :class:`events.mapper.MsgspecMapper`) on a temporary SQLite file.
* **raw**: a plain ``eventsourcing.application.Application`` (default mapper and JSON
  transcoder) and a minimal Aggregate recording the same nine events with payloads of similar
  size (plain dicts and strings), one save per event, on its own temporary SQLite file.
* **recovery**: a session of 1,000 and of 10,000 events loaded with
  :meth:`TetherApplication.session` (its latest typed snapshot, then the events after it:
  snapshots are taken every ``SNAPSHOT_INTERVAL`` events; the conversation tree is kept
  apart from them and read when first used, so it is timed again with its tree read, as a
  session actor takes it up) vs the same session from its events alone (the plain-loop
  projector, as before snapshots), and the raw aggregate's events with
  ``repository.get`` on the raw application (no snapshots). These sessions
  never compact, so the 10,000-event one holds 5,000 messages (a 2.7 MB state); a third
  10,000-event session compacts as a real one must once its history fills 70% of a
  200K-token window (:data:`COMPACT_AT`).

Prints turns/s and events/s for both and ``RATIO append tether/raw = X.XX`` (time per turn of
tether over time per turn of raw, so above 1 means tether is slower, as for ``ask``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event

from bench.common import Printer, ratio, say, table
from tether.actors.model.context import DEFAULT_SYSTEM_PROMPT
from tether.events.application import SNAPSHOT_INTERVAL, TetherApplication, project
from tether.events.messages import TextBlock, ToolUseBlock, Usage
from tether.events.session import Session, session_uuid

FULL_TURNS = 400
FULL_WARMUP = 20
QUICK_TURNS = 15
QUICK_WARMUP = 3
EVENTS_PER_TURN = 9
REPLAY_SIZES = (1_000, 10_000)
FULL_REPLAY_REPEATS = 15
QUICK_REPLAY_REPEATS = 3

# Payloads of a realistic small turn (the same text for both sides).
USER_TEXT = "Please read src/app/main.py and tell me why the tests fail on startup. " * 2
ASSISTANT_TEXT = "I'll read the file to see how the application starts up. " * 2
FINAL_TEXT = (
    "The startup fails because the configuration is loaded before the environment "
    "variables are read; move load_settings() below the dotenv call. " * 3
)
TOOL_OUTPUT = "\n".join(
    f"{i:4d}  def handler_{i}(request): return respond(request)" for i in range(20)
)
TOOL_INPUT: dict[str, Any] = {"path": "src/app/main.py"}
ACTION_HASH = "9f2c" * 16
CALL_ID = "toolu_01A09q90qw90lq917835lq9"


def tether_app(db_path: str) -> TetherApplication:
    """A TetherApplication on its own SQLite file (tables created)."""
    return TetherApplication(
        env={
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": db_path,
            "SQLITE_LOCK_TIMEOUT": "30",
            "CREATE_TABLE": "true",
        }
    )


def tether_steps(session_id: str) -> list[Callable[[Session | None], Session]]:
    """The nine steps of one turn; each records one event on the Session aggregate."""

    def created(_: Session | None) -> Session:
        return Session(
            session_id=session_id,
            name="bench session",
            workspace="/home/user/projects/app",
            model="claude-sonnet-4-6",
            channel="terminal",
        )

    def step(apply: Callable[[Session], None]) -> Callable[[Session | None], Session]:
        def go(session: Session | None) -> Session:
            assert session is not None
            apply(session)
            return session

        return go

    return [
        created,
        step(lambda s: s.receive_user_message(text=USER_TEXT, channel="terminal", user="user")),
        step(lambda s: s.append_assistant_message(
            content=[TextBlock(ASSISTANT_TEXT), ToolUseBlock(CALL_ID, "read_file", TOOL_INPUT)],
            stop_reason="tool_use", usage=Usage(1200, 80), generation=1,
        )),
        step(lambda s: s.propose_tool_call(
            call_id=CALL_ID, tool="read_file", tool_input=TOOL_INPUT, action_hash=ACTION_HASH
        )),
        step(lambda s: s.decide_tool_call(
            call_id=CALL_ID, decision="allow", reason="read-only tool", tier="policy"
        )),
        step(lambda s: s.record_tool_result(
            call_id=CALL_ID, tool="read_file", output=TOOL_OUTPUT, is_error=False
        )),
        step(lambda s: s.append_assistant_message(
            content=[TextBlock(FINAL_TEXT)], stop_reason="end_turn", usage=Usage(2400, 150),
            generation=2,
        )),
        step(lambda s: s.complete_turn(
            rounds=2, usage=Usage(3600, 230), cost_usd=0.0143, stop="end_turn"
        )),
        step(lambda s: s.change_status(status="waiting", reason="waiting for input")),
    ]


# --- the raw baseline --------------------------------------------------------------------


class RawSession(Aggregate):
    """A minimal aggregate recording the same nine events with plain payloads."""

    @event("Created")
    def __init__(self, name: str, workspace: str, model: str, channel: str) -> None:
        self.status = "starting"
        self.count = 0

    @event("UserMessageReceived")
    def receive_user_message(self, text: str, channel: str, user: str) -> None:
        self.count += 1

    @event("AssistantMessageAppended")
    def append_assistant_message(
        self, content: list[dict[str, Any]], stop_reason: str, usage: dict[str, int],
        generation: int,
    ) -> None:
        self.count += 1

    @event("ToolCallProposed")
    def propose_tool_call(
        self, call_id: str, tool: str, tool_input: dict[str, Any], action_hash: str
    ) -> None:
        self.count += 1

    @event("ToolCallDecided")
    def decide_tool_call(self, call_id: str, decision: str, reason: str, tier: str) -> None:
        self.count += 1

    @event("ToolCallExecuted")
    def record_tool_result(self, call_id: str, tool: str, output: str, is_error: bool) -> None:
        self.count += 1

    @event("TurnCompleted")
    def complete_turn(
        self, rounds: int, usage: dict[str, int], cost_usd: float, stop: str
    ) -> None:
        self.count += 1

    @event("StatusChanged")
    def change_status(self, status: str, reason: str) -> None:
        self.status = status


class RawApplication(Application[uuid.UUID]):
    """A plain eventsourcing application: default mapper and JSON transcoder."""

    name = "rawbench"


def raw_app(db_path: str) -> RawApplication:
    """A RawApplication on its own SQLite file (tables created)."""
    return RawApplication(
        env={
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": db_path,
            "SQLITE_LOCK_TIMEOUT": "30",
            "CREATE_TABLE": "true",
        }
    )


def raw_steps() -> list[Callable[[RawSession | None], RawSession]]:
    """The nine steps of one raw turn, payloads as plain dicts of the same size."""

    def created(_: RawSession | None) -> RawSession:
        return RawSession(
            name="bench session", workspace="/home/user/projects/app",
            model="claude-sonnet-4-6", channel="terminal",
        )

    def step(apply: Callable[[RawSession], None]) -> Callable[[RawSession | None], RawSession]:
        def go(agg: RawSession | None) -> RawSession:
            assert agg is not None
            apply(agg)
            return agg

        return go

    return [
        created,
        step(lambda a: a.receive_user_message(text=USER_TEXT, channel="terminal", user="user")),
        step(lambda a: a.append_assistant_message(
            content=[
                {"type": "text", "text": ASSISTANT_TEXT},
                {"type": "tool_use", "id": CALL_ID, "name": "read_file", "input": TOOL_INPUT},
            ],
            stop_reason="tool_use", usage={"input_tokens": 1200, "output_tokens": 80},
            generation=1,
        )),
        step(lambda a: a.propose_tool_call(
            call_id=CALL_ID, tool="read_file", tool_input=TOOL_INPUT, action_hash=ACTION_HASH
        )),
        step(lambda a: a.decide_tool_call(
            call_id=CALL_ID, decision="allow", reason="read-only tool", tier="policy"
        )),
        step(lambda a: a.record_tool_result(
            call_id=CALL_ID, tool="read_file", output=TOOL_OUTPUT, is_error=False
        )),
        step(lambda a: a.append_assistant_message(
            content=[{"type": "text", "text": FINAL_TEXT}], stop_reason="end_turn",
            usage={"input_tokens": 2400, "output_tokens": 150}, generation=2,
        )),
        step(lambda a: a.complete_turn(
            rounds=2, usage={"input_tokens": 3600, "output_tokens": 230}, cost_usd=0.0143,
            stop="end_turn",
        )),
        step(lambda a: a.change_status(status="waiting", reason="waiting for input")),
    ]


# --- measuring ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AppendStats:
    """Turns appended, events recorded and the wall time they took."""

    turns: int
    events: int
    seconds: float

    @property
    def turns_per_s(self) -> float:
        """Turns recorded per second."""
        return ratio(self.turns, self.seconds)

    @property
    def events_per_s(self) -> float:
        """Events (= saves) recorded per second."""
        return ratio(self.events, self.seconds)

    @property
    def us_per_event(self) -> float:
        """Mean time per event (one save each), microseconds."""
        return ratio(self.seconds * 1e6, self.events)


@dataclass(frozen=True)
class ReplayStats:
    """Median time to rebuild a ``events``-event aggregate, milliseconds."""

    events: int
    median_ms: float
    min_ms: float


@dataclass(frozen=True)
class Recovery:
    """Loading one session of ``events`` events three ways."""

    held: int
    """Messages in its history at the end."""
    compacting: bool
    """Whether it compacted its history as it grew."""
    snapshot: ReplayStats
    with_tree: ReplayStats
    """The same load, then its conversation tree read (kept apart from the snapshot), as
    a session's actor does when it takes the session up."""
    events_alone: ReplayStats
    raw: ReplayStats


@dataclass(frozen=True)
class AppendResults:
    """Everything the append benchmark measured."""

    tether: AppendStats
    raw: AppendStats
    recovery: list[Recovery]

    @property
    def ratio(self) -> float:
        """Time per turn of tether over raw (above 1: tether is slower)."""
        return ratio(self.raw.turns_per_s, self.tether.turns_per_s)


def _append_turns(
    app: Application[uuid.UUID], make_steps: Callable[[int], list[Callable[[Any], Any]]],
    first: int, turns: int,
) -> AppendStats:
    events = 0
    started = time.perf_counter()
    for i in range(first, first + turns):
        aggregate: Any = None
        for apply in make_steps(i):
            aggregate = apply(aggregate)
            app.save(aggregate)
            events += 1
    return AppendStats(turns=turns, events=events, seconds=time.perf_counter() - started)


def _tether_turn_steps(i: int) -> list[Callable[[Any], Any]]:
    return list(tether_steps(f"bench{i:07d}"))


def _raw_turn_steps(_: int) -> list[Callable[[Any], Any]]:
    return list(raw_steps())


def bench_append(
    tapp: TetherApplication, rapp: RawApplication, turns: int, warmup: int, block: int = 5
) -> tuple[AppendStats, AppendStats]:
    """Record ``turns`` turns on each application (one new aggregate per turn, nine saves),
    after ``warmup`` turns each, alternating blocks of ``block`` turns so that disk and CPU
    contention from other processes hits both sides alike."""
    cases: list[tuple[Application[uuid.UUID], Callable[[int], list[Callable[[Any], Any]]]]] = [
        (tapp, _tether_turn_steps),
        (rapp, _raw_turn_steps),
    ]
    for app, steps in cases:
        _append_turns(app, steps, 0, warmup)
    totals = [AppendStats(0, 0, 0.0) for _ in cases]
    done = 0
    while done < turns:
        size = min(block, turns - done)
        for i, (app, steps) in enumerate(cases):
            part = _append_turns(app, steps, warmup + done, size)
            totals[i] = AppendStats(
                totals[i].turns + part.turns,
                totals[i].events + part.events,
                totals[i].seconds + part.seconds,
            )
        done += size
    return totals[0], totals[1]


COMPACT_AT = 1_100
"""Messages at which the compacting case's history is compacted: about what 70% of a
200K-token window holds of these turns (about 2 KB of text each 4 messages)."""
COMPACT_KEEP = 330
"""Messages the compaction keeps (after its summary)."""


def _build_long(app: Application[uuid.UUID], steps: Sequence[Callable[[Any], Any]],
                events: int, batch: int = 100, *, compacting: bool = False) -> Any:
    """Record ``events`` events on one aggregate (Created, then the other steps in turn).
    ``compacting`` (a Session): compact its history as a real session would, whenever it
    reaches :data:`COMPACT_AT` messages (each compaction is one of the events)."""
    aggregate = steps[0](None)
    recorded = 1
    if isinstance(aggregate, Session):
        # As the session's first turn does: its messages are mirrored into its tree under
        # this prompt, and the tree is part of what a load reads.
        aggregate.set_system_prompt(text=DEFAULT_SYSTEM_PROMPT)
        recorded += 1
    cycle = list(steps[1:])
    turn = 0
    while recorded < events:
        if compacting and len(aggregate.history) >= COMPACT_AT:
            aggregate.compact_history(
                summary="[Previous conversation summary: " + FINAL_TEXT + "]",
                replaced=len(aggregate.history) - COMPACT_KEEP, tokens_before=140_000,
                tokens_after=42_000, budget=200_000, cost_usd=0.01)
        else:
            aggregate = cycle[turn % len(cycle)](aggregate)
            turn += 1
        recorded += 1
        if recorded % batch == 0:
            app.save(aggregate)
    app.save(aggregate)
    return aggregate


def _time_replay(get: Callable[[], Any], events: int, repeats: int) -> ReplayStats:
    get()  # warm the decoders and the page cache
    samples: list[float] = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        aggregate = get()
        samples.append((time.perf_counter() - t0) * 1000.0)
        if aggregate.version != events:
            raise RuntimeError(f"replayed version {aggregate.version}, expected {events}")
    return ReplayStats(events, statistics.median(samples), min(samples))


def _with_tree(session: Session | None) -> Session:
    assert session is not None
    session.conversation  # noqa: B018  (read, and what came since mirrored)
    return session


def bench_recovery(
    tapp: TetherApplication, rapp: RawApplication, events: int, repeats: int,
    compacting: bool = False,
) -> Recovery:
    """Load an ``events``-event session three ways: from its latest snapshot and the
    events after it (and again with its tree read), from its events alone, and the raw
    aggregate's events (the raw aggregate never compacts: its events alone are what is
    timed)."""
    session_id = f"benchreplay{events}{'c' if compacting else ''}"
    built = _build_long(tapp, tether_steps(session_id), events, compacting=compacting)
    raw_aggregate = _build_long(rapp, raw_steps(), events)
    sid_uuid = session_uuid(session_id)
    return Recovery(
        held=len(built.history),
        compacting=compacting,
        snapshot=_time_replay(lambda: tapp.session(session_id), events, repeats),
        with_tree=_time_replay(lambda: _with_tree(tapp.session(session_id)), events, repeats),
        events_alone=_time_replay(lambda: project(None, tapp.events.get(sid_uuid)), events,
                                  repeats),
        raw=_time_replay(lambda: rapp.repository.get(raw_aggregate.id), events, repeats),
    )


def run(quick: bool = False, out: Printer = say) -> AppendResults:
    """Run the append and replay benchmarks on temporary SQLite files; print the tables."""
    turns, warmup = (QUICK_TURNS, QUICK_WARMUP) if quick else (FULL_TURNS, FULL_WARMUP)
    repeats = QUICK_REPLAY_REPEATS if quick else FULL_REPLAY_REPEATS
    out(
        f"== append: one session turn ({EVENTS_PER_TURN} events, one save each) on SQLite, "
        f"Tether vs raw eventsourcing (turns={turns}, warm-up {warmup}, alternating blocks)"
    )
    with tempfile.TemporaryDirectory(prefix="tether-bench-store-") as folder:
        tapp = tether_app(os.path.join(folder, "tether.db"))
        rapp = raw_app(os.path.join(folder, "raw.db"))
        try:
            tether, raw = bench_append(tapp, rapp, turns, warmup)
            sizes = REPLAY_SIZES[:1] if quick else REPLAY_SIZES  # a smoke run: the smallest
            recovery = [bench_recovery(tapp, rapp, n, repeats) for n in sizes]
            if not quick:
                recovery.append(bench_recovery(tapp, rapp, REPLAY_SIZES[-1], repeats,
                                               compacting=True))
            turn_events = (warmup + turns) * EVENTS_PER_TURN
            tether_bytes = _mean_stored_size(tapp, turn_events)
            raw_bytes = _mean_stored_size(rapp, turn_events)
        finally:
            tapp.close()
            rapp.close()
    results = AppendResults(tether, raw, recovery)

    def row(name: str, s: AppendStats, size: float) -> list[str]:
        return [
            name, f"{s.turns_per_s:,.0f}", f"{s.events_per_s:,.0f}", f"{s.us_per_event:.0f}",
            f"{size:.0f}",
        ]

    for line in table(
        ["case", "turns/s", "events/s", "us/event", "bytes/event"],
        [
            row("tether (Session, MsgspecMapper)", tether, tether_bytes),
            row("raw eventsourcing (default mapper)", raw, raw_bytes),
        ],
    ):
        out(line)
    out("")
    out(f"recovery: loading one session (median of {repeats}; snapshots every "
        f"{SNAPSHOT_INTERVAL} events):")

    def rrow(name: str, r: ReplayStats, held: int | str) -> list[str]:
        return [name, f"{r.events:,}", f"{held:,}" if isinstance(held, int) else held,
                f"{r.median_ms:.2f}", f"{r.min_ms:.2f}"]

    rows = []
    for r in recovery:
        rows += [rrow("TetherApplication.session (snapshot + events)", r.snapshot, r.held),
                 rrow("  and then its tree read", r.with_tree, r.held),
                 rrow("tether, events alone", r.events_alone, r.held),
                 rrow("raw app, repository.get", r.raw, "-")]
    for line in table(["case", "events", "history", "median ms", "min ms"], rows):
        out(line)
    out(f"history = messages the session holds at the end; the last case compacts at "
        f"{COMPACT_AT:,}, keeping {COMPACT_KEEP}, as a real session's window forces it to")
    for r in recovery:
        name = f"recovery{r.snapshot.events}" + (" compacting" if r.compacting else "")
        out(f"RATIO {name} snapshot/events = "
            f"{ratio(r.snapshot.median_ms, r.events_alone.median_ms):.2f}")
    out("ratio = time per turn of tether / time per turn of raw (above 1: tether is slower)")
    out(f"RATIO append tether/raw = {results.ratio:.2f}")
    return results


def _mean_stored_size(app: Application[uuid.UUID], limit: int) -> float:
    """Mean size of the stored ``state`` of the first ``limit`` events (the turns), bytes."""
    notifications = app.recorder.select_notifications(start=1, limit=limit)
    if not notifications:
        return 0.0
    return statistics.fmean(len(n.state) for n in notifications)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m bench.append [--quick]``."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.append",
        description="A session turn's event append, Tether vs raw eventsourcing, and the "
        "recovery of a 1,000- and a 10,000-event session, on SQLite.",
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"small N ({QUICK_TURNS} turns) for smoke runs"
    )
    args = parser.parse_args(argv)
    run(quick=args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
