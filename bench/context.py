"""One turn's context: building the model request for sessions of 10 to 30,000 messages.

Each size is one real :class:`events.session.Session` stored through
:class:`events.application.TetherApplication` on a temporary SQLite file. Its history is
a realistic mix, four messages per turn: the user's text; the assistant's text with a
``read_file``/``grep``/``list_dir`` tool_use; the tool result (1.5 to 3 KB of Python
source, grep output or a listing); the assistant's closing text. Each turn records what
the session actor records (UserMessageReceived, AssistantMessageAppended,
ToolCallProposed, ToolCallDecided, ToolCallExecuted, AssistantMessageAppended,
TurnCompleted, WaitingForInput): 8 events per 4 messages; the first turn also records
StatusChanged to ``running``. And, as the actor does before each model call (two per
turn: after the user's message and after the tool result), whenever
:func:`actors.model.compaction.plan_compaction` says the history fills 70% of the model's context
budget (the table's 200,000-token window), a HistoryCompacted event replaces the older
part with a summary (a canned 1,500-character summary stands in for the model's answer:
the bench measures the context, not the model). See :class:`CompactionCheck` for how the
check before every call stays cheap while the sessions are built.

Per size (10, 100, 1,000, 10,000 and 30,000 messages; ``--quick``: 10 and 100):

* **build**: :func:`actors.model.context.build_request` on the in-memory history, as the session
  actor calls it for each model call (stale tool results summarized, neighbours
  coalesced, tokens estimated, ``max_tokens`` clamped). The actor keeps its Session
  aggregate in memory and never re-reads its history from the store per turn.
* **catch-up**: what the actor reads from the store between turns,
  :meth:`TetherApplication.catch_up`: with no new event, and with one new turn's events
  (8 events appended meanwhile by another copy of the aggregate).
* **tree +1 turn / tree walk**: :class:`events.conversation.Conversation` putting one new
  turn's messages into the session's conversation tree (what the Session aggregate does
  as a turn's events apply), and walking the whole held history into it again, every
  node found by prefix matching (what it does after a compaction). In memory: the tree
  is derived from the session's events, so it adds nothing to the store.
* **reload+build** (the raw baseline): ``app.session(sid)`` (the whole session replayed
  from the store) then ``build_request``: what a framework that re-reads the history on
  every turn pays. ``reload`` alone is shown too.

Medians over repeated calls (each after one untimed warm-up call). The build is timed
once every size is stored, the sizes taking turns in short blocks, so that load from
other processes falls on every size alike.

``RATIO context build/reload @N`` = build ms / reload+build ms at the largest size: a cost
ratio like the others, below 1 meaning the in-memory path is cheaper.

What to expect: below the compaction point ``build_request`` grows with the history
(it walks every message to summarize stale tool results and to estimate tokens); past it
the context the session holds is bounded by the budget, so the build cost stops growing
with the stored history, while reloading keeps growing with every stored event. The store
cost per turn (catch-up) is flat: it reads only the newer events. The closing lines say
which it was, from the figures: the build cost's growth between the two largest sizes
(``flat`` under 1.5 times, else ``grows``), and whether anything was compacted.

``python -m bench.context [--quick]``
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from bench.common import Printer, ratio, say, table
from tether.actors.model.compaction import (
    context_budget,
    needs_compaction,
    plan_compaction,
    summary_text,
)
from tether.actors.model.context import (
    DEFAULT_SYSTEM_PROMPT,
    build_request,
    context_window,
    estimate_history_tokens,
    estimate_request_tokens,
    estimate_tokens,
)
from tether.actors.model.stale_results import summarize_stale_results
from tether.events.application import TetherApplication
from tether.events.conversation import Conversation
from tether.events.messages import TextBlock, ToolUseBlock, Usage
from tether.events.session import Session, Turn

FULL_SIZES = (10, 100, 1_000, 10_000, 30_000)
QUICK_SIZES = (10, 100)
MODEL = "claude-sonnet-4-6"
MAX_TOKENS = 4096
EVENTS_PER_TURN = 8
MESSAGES_PER_TURN = 4
SAVE_EVERY = 25
"""Turns recorded per ``app.save`` while building the stored sessions (not timed)."""
CANNED_SUMMARY = ("The user and the agent worked through failing tests caused by settings "
                  "loaded before the environment; handlers, grep results and listings "
                  "were read, and load_settings() was moved below the dotenv call. ") * 8
"""Stands in for the summary call's answer (about 1,500 characters)."""
FLAT_BELOW = 1.5
"""The closing line calls the build cost flat between the two largest sizes when it grew
by less than this factor (the stored history grows 3 to 10 times between sizes)."""

TOOLS: list[dict[str, Any]] = [
    {
        "name": name,
        "description": description,
        "input_schema": {
            "type": "object",
            "properties": {key: {"type": "string", "description": f"the {key}"}
                           for key in keys},
            "required": list(keys[:1]),
        },
    }
    for name, description, keys in (
        ("read_file", "Read a file of the workspace.", ("path",)),
        ("write_file", "Write a file of the workspace.", ("path", "content")),
        ("list_dir", "List a directory of the workspace.", ("path",)),
        ("grep", "Search the workspace's files for a pattern.", ("pattern", "path")),
        ("run_shell", "Run a shell command in the workspace.", ("command",)),
    )
]


@dataclass(frozen=True)
class Budget:
    """How long to repeat each measurement: at least ``min_reps`` calls and until
    ``seconds`` have passed, at most ``max_reps`` calls."""

    min_reps: int
    seconds: float
    max_reps: int


FULL_BUILD = Budget(5, 1.0, 500)
QUICK_BUILD = Budget(3, 0.1, 100)
FULL_BUILD_ROUNDS, FULL_BUILD_BLOCK = 8, Budget(3, 0.25, 100)
QUICK_BUILD_ROUNDS, QUICK_BUILD_BLOCK = 3, Budget(3, 0.02, 30)
"""The build is timed once every size is stored, the sizes taking turns (``rounds``
blocks each): load from other processes on a shared machine then falls on every size
alike, and the comparison of the sizes (the closing lines) does not hang on when each
was measured."""
FULL_RELOAD = Budget(3, 2.0, 100)
QUICK_RELOAD = Budget(3, 0.2, 50)
FULL_CATCH_UP = Budget(20, 0.5, 2000)
QUICK_CATCH_UP = Budget(5, 0.05, 200)
FULL_NEW_TURNS = 7
QUICK_NEW_TURNS = 3


# --- the session --------------------------------------------------------------------------


def tool_output(turn: int) -> tuple[str, dict[str, Any], str]:
    """The tool called in ``turn``, its input and its output (1.5 to 3 KB), by turn."""
    kind = turn % 3
    if kind == 0:
        body = "\n".join(
            f"def handler_{turn}_{i}(request):\n    return respond(request, code={i})\n"
            for i in range(40)
        )
        return "read_file", {"path": f"src/app/handlers_{turn}.py"}, body
    if kind == 1:
        body = "\n".join(
            f"src/app/module_{i}.py:{10 + i}:    settings = load_settings()  # turn {turn}"
            for i in range(30)
        )
        return "grep", {"pattern": "load_settings", "path": "src"}, body
    body = "\n".join(f"src/app/package_{turn}/file_{i:03d}.py" for i in range(60))
    return "list_dir", {"path": f"src/app/package_{turn}"}, body


@dataclass(frozen=True)
class Step:
    """One event of a turn: whether it adds a message to the history, and whether the
    actor makes a model call right after it (and so checks for compaction first)."""

    record: Callable[[Session], None]
    adds_message: bool
    calls_model: bool


def turn_steps(turn: int) -> list[Step]:
    """The eight events of one turn (four of them add a message), as the actor records
    them; the first turn also records the session going ``running`` (nine events)."""
    call_id = f"toolu_{turn:08d}"
    tool, tool_input, output = tool_output(turn)
    records: list[Callable[[Session], None]] = [
        lambda s: s.receive_user_message(
            text=f"Turn {turn}: please look at the application's startup and tell me why "
            "the tests fail when the settings are loaded before the environment.",
            channel="terminal", user="user",
        ),
        lambda s: s.append_assistant_message(
            content=[TextBlock(f"I'll use {tool} to look at this (turn {turn})."),
                     ToolUseBlock(call_id, tool, tool_input)],
            stop_reason="tool_use", usage=Usage(1200, 80), generation=2 * turn + 1,
        ),
        lambda s: s.propose_tool_call(
            call_id=call_id, tool=tool, tool_input=tool_input, action_hash=f"{turn:064x}"
        ),
        lambda s: s.decide_tool_call(
            call_id=call_id, decision="allow", reason="read-only tool", tier="policy"
        ),
        lambda s: s.record_tool_result(call_id=call_id, tool=tool, output=output,
                                       is_error=False),
        lambda s: s.append_assistant_message(
            content=[TextBlock(
                "The settings are loaded before the dotenv call, so the variables are "
                f"missing at import time; move load_settings() below it (turn {turn}). " * 2
            )],
            stop_reason="end_turn", usage=Usage(2400, 150), generation=2 * turn + 2,
        ),
        lambda s: s.complete_turn(rounds=2, usage=Usage(3600, 230), cost_usd=0.0143,
                                  stop="end_turn"),
        lambda s: s.signal_waiting(reason="the turn is done"),
    ]
    # user message (a call), tool_use, proposed, decided, result (a call), closing text,
    # completed, waiting
    adds = (True, True, False, False, True, True, False, False)
    calls = (True, False, False, False, True, False, False, False)
    steps = [Step(*step) for step in zip(records, adds, calls, strict=True)]
    if turn == 0:
        steps.insert(1, Step(lambda s: s.change_status(status="running",
                                                       reason="user message"), False, False))
    return steps


class CompactionCheck:
    """The check the session actor makes before every model call (``_next_call``): build
    the request, ``plan_compaction`` on the request's own token estimate, and compact
    first when the history fills 70% of the budget.

    Building the request costs tens of ms once the history holds thousands of messages,
    and the sessions of 10 to 30,000 messages make 20,555 calls: building each would take
    the bench a quarter of an hour. So the request is built only when the history *may*
    have reached the trigger: the estimate of the last request built, plus the raw estimate of every
    message since (counted whole: summarizing a stale result and coalescing neighbours
    only ever lower an estimate), is an upper bound of the next request's. While that
    bound stays under 70% of the budget the actor's check finds nothing to do; once it
    reaches it, the request is built and checked exactly as the actor does. The
    compactions land on the same calls as the actor's."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.budget = context_budget(window, estimate_tokens(DEFAULT_SYSTEM_PROMPT))
        self.sent: int | None = None
        """The history's estimate in the last request built (None: none since the last
        compaction)."""
        self.length = 0
        """How many messages the history held then."""
        self.calls = 0
        self.built = 0
        """Model calls checked, and requests built for it."""

    def before_call(self, session: Session) -> None:
        """Compact ``session`` (canned summary) if the actor would before this call."""
        self.calls += 1
        history = session.history
        if self.sent is not None:
            # the last message counted again: a tool result may have joined it since
            bound = self.sent + estimate_history_tokens(history[max(0, self.length - 1):])
            if not needs_compaction(bound, self.budget):
                return
        self.built += 1
        request = build(session)
        self.sent, self.length = request.history_tokens, len(history)
        plan = plan_compaction(history, system=request.system, window=self.window,
                               sent_tokens=request.history_tokens)
        if plan is None:
            return
        text = summary_text(CANNED_SUMMARY)
        after = estimate_history_tokens(summarize_stale_results(
            [Turn("user", [TextBlock(text)]), *history[plan.replaced:]]))
        session.compact_history(summary=text, replaced=plan.replaced,
                                tokens_before=plan.tokens, tokens_after=after,
                                budget=plan.budget, cost_usd=0.01)
        self.sent = None


def record_turn(session: Session, turn: int, room: int | None = None,
                check: CompactionCheck | None = None) -> int:
    """Record ``turn`` on ``session``, adding at most ``room`` messages; before each of
    the turn's two model calls ``check`` compacts the history when the actor would.
    Returns the messages added."""
    count = 0
    for step in turn_steps(turn):
        if step.adds_message and room is not None and count >= room:
            break
        step.record(session)
        count += step.adds_message
        if step.calls_model and check is not None:
            check.before_call(session)
    return count


def build_session(app: TetherApplication, session_id: str, messages: int
                  ) -> tuple[Session, CompactionCheck]:
    """Store a session to which exactly ``messages`` messages were added; return it and
    its compaction check (which goes on checking the turns added later)."""
    session = Session(session_id=session_id, name=f"context bench {messages}",
                      workspace="/home/user/projects/app", model=MODEL, channel="terminal")
    session.set_system_prompt(text=DEFAULT_SYSTEM_PROMPT)  # as the first turn does: the
    # messages are mirrored into the session's tree under it
    check = CompactionCheck(context_window(MODEL))
    turn = added = 0
    while added < messages:
        added += record_turn(session, turn, messages - added, check)
        turn += 1
        if turn % SAVE_EVERY == 0:
            app.save(session)
    app.save(session)
    return session, check


def build(session: Session | list[Turn]) -> Any:
    """The request of the session's next model call, as the session actor builds it (or
    of a model call on ``history``)."""
    history = session if isinstance(session, list) else session.history
    return build_request(history, model=MODEL, tools=TOOLS, max_tokens=MAX_TOKENS,
                         system=DEFAULT_SYSTEM_PROMPT)


# --- measuring ----------------------------------------------------------------------------


def timed_ms(call: Callable[[], object], budget: Budget) -> list[float]:
    """Wall times of repeated calls of ``call`` in ms, as long as ``budget`` says."""
    samples: list[float] = []
    started = time.perf_counter()
    while len(samples) < budget.max_reps and (
        len(samples) < budget.min_reps or time.perf_counter() - started < budget.seconds
    ):
        t0 = time.perf_counter()
        call()
        samples.append((time.perf_counter() - t0) * 1000.0)
    return samples


def median_ms(call: Callable[[], object], budget: Budget) -> float:
    """Median wall time of ``call`` in ms, after one untimed warm-up call."""
    call()
    return statistics.median(timed_ms(call, budget))


def build_ms_by_size(histories: Sequence[list[Turn]], quick: bool) -> list[float]:
    """Median ms of building the request for each held history, the histories taking
    turns in blocks (see :data:`FULL_BUILD_ROUNDS`), after one untimed warm-up each."""
    rounds, block = (QUICK_BUILD_ROUNDS, QUICK_BUILD_BLOCK) if quick else (
        FULL_BUILD_ROUNDS, FULL_BUILD_BLOCK)
    samples: list[list[float]] = [[] for _ in histories]
    for history in histories:
        build(history)
    for _ in range(rounds):
        for history, kept in zip(histories, samples, strict=True):
            kept.extend(timed_ms(functools.partial(build, history), block))
    return [statistics.median(kept) for kept in samples]


@dataclass(frozen=True)
class SizeResult:
    """The figures of one session size."""

    messages: int
    events: int
    held: int
    """Messages the session holds after its compactions (what each call walks)."""
    compactions: int
    calls: int
    """Model calls made while the session was built (each checked for compaction)."""
    requests_built: int
    """Of those, the calls whose request the check built (see :class:`CompactionCheck`)."""
    tokens: int
    """Estimated input tokens of the built request."""
    clamped: int
    """The ``max_tokens`` the request was built with (1: the window is exceeded)."""
    build_ms: float
    catch_up_none_ms: float
    catch_up_turn_ms: float
    reload_ms: float
    reload_build_ms: float
    mirror_turn_ms: float
    """Mirroring one new turn (4 messages) into the conversation tree."""
    mirror_all_ms: float
    """Walking the whole held history into the tree again (after a compaction, a branch),
    every node already there."""

    @property
    def ratio(self) -> float:
        """Build on the in-memory history / reload then build (below 1: cheaper)."""
        return ratio(self.build_ms, self.reload_build_ms)


@dataclass(frozen=True)
class ContextResults:
    """Everything the context benchmark measured, smallest size first."""

    sizes: list[SizeResult]

    @property
    def largest(self) -> int:
        """The largest session size measured (messages)."""
        return self.sizes[-1].messages

    @property
    def ratio(self) -> float:
        """:attr:`SizeResult.ratio` at the largest size."""
        return self.sizes[-1].ratio


def measure(app: TetherApplication, messages: int, quick: bool
            ) -> tuple[SizeResult, list[Turn]]:
    """Store a session of ``messages`` messages and time catch-up, reload and the tree;
    return the figures (``build_ms`` not yet timed: NaN) and the history the session held
    once stored (what the build is timed on, see :func:`build_ms_by_size`)."""
    session_id = f"context{messages}"
    session, check = build_session(app, session_id, messages)
    stored = [Turn(t.role, list(t.content)) for t in session.history]
    held, compactions = len(session.history), session.compactions
    calls, built = check.calls, check.built
    events = len(app.session_events(session_id))
    request = build(session)
    tokens = estimate_request_tokens(request.system, request.messages, request.tools)

    def reload() -> Session:
        loaded = app.session(session_id)
        assert loaded is not None
        return loaded

    reload_budget = QUICK_RELOAD if quick else FULL_RELOAD
    reload_ms = median_ms(reload, reload_budget)
    reload_build_ms = median_ms(lambda: build(reload()), reload_budget)

    # Catch-up: ``reader`` plays the session actor, ``session`` another writer.
    reader = reload()
    catch_up_none_ms = median_ms(lambda: app.catch_up(reader),
                                 QUICK_CATCH_UP if quick else FULL_CATCH_UP)
    samples: list[float] = []
    turn = messages // MESSAGES_PER_TURN + 1
    for _ in range(QUICK_NEW_TURNS if quick else FULL_NEW_TURNS):
        record_turn(session, turn, check=check)
        turn += 1
        app.save(session)
        t0 = time.perf_counter()
        reader = app.catch_up(reader)
        samples.append((time.perf_counter() - t0) * 1000.0)
        if reader.version != session.version:
            raise RuntimeError(f"caught up to {reader.version}, expected {session.version}")
    mirror_turn_ms, mirror_all_ms = measure_mirror(session, quick)
    return SizeResult(
        mirror_turn_ms=mirror_turn_ms, mirror_all_ms=mirror_all_ms,
        messages=messages, events=events, held=held, compactions=compactions, tokens=tokens,
        calls=calls, requests_built=built,
        clamped=request.max_tokens, build_ms=math.nan,
        catch_up_none_ms=catch_up_none_ms, catch_up_turn_ms=statistics.median(samples),
        reload_ms=reload_ms, reload_build_ms=reload_build_ms,
    ), stored


def measure_mirror(session: Session, quick: bool) -> tuple[float, float]:
    """Median ms of mirroring one new turn into the session's tree, and of walking the
    whole held history into it again (the tree is built first, untimed)."""
    mirror = Conversation.of_session(session.session_id)
    history = list(session.history)
    mirror.sync(DEFAULT_SYSTEM_PROMPT, history)
    scratch = Session(session_id="scratch", name="scratch", workspace="/ws", model=MODEL,
                      channel="terminal")
    turn = len(history)
    samples: list[float] = []
    for _ in range(QUICK_NEW_TURNS if quick else FULL_NEW_TURNS):
        record_turn(scratch, turn)
        history.extend(scratch.history[-MESSAGES_PER_TURN:])
        turn += 1
        t0 = time.perf_counter()
        mirror.sync(DEFAULT_SYSTEM_PROMPT, history)
        samples.append((time.perf_counter() - t0) * 1000.0)
    def walk_again() -> None:
        mirror.rewritten()
        mirror.sync(DEFAULT_SYSTEM_PROMPT, history)

    whole = median_ms(walk_again, QUICK_BUILD if quick else FULL_BUILD)
    return statistics.median(samples), whole


def run(quick: bool = False, out: Printer = say) -> ContextResults:
    """Measure every size on a temporary SQLite file; print the table and the ratio."""
    sizes = QUICK_SIZES if quick else FULL_SIZES
    out(
        "== context: one turn's model request for sessions of "
        f"{', '.join(f'{n:,}' for n in sizes)} stored messages (SQLite; "
        f"{MESSAGES_PER_TURN} messages and {EVENTS_PER_TURN} events per turn, tool results "
        "1.5-3 KB)"
    )
    results: list[SizeResult] = []
    histories: list[list[Turn]] = []
    with tempfile.TemporaryDirectory(prefix="tether-bench-context-") as folder:
        app = TetherApplication(env={
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": os.path.join(folder, "events.db"),
            "SQLITE_LOCK_TIMEOUT": "30",
            "CREATE_TABLE": "true",
        })
        try:
            for messages in sizes:
                result, history = measure(app, messages, quick)
                results.append(result)
                histories.append(history)
        finally:
            app.close()
    results = [replace(r, build_ms=ms)
               for r, ms in zip(results, build_ms_by_size(histories, quick), strict=True)]
    for line in table(
        ["messages", "events", "held", "compactions", "est. tokens", "max_tokens", "build ms",
         "catch-up ms", "catch-up +1 turn ms", "tree +1 turn ms", "tree walk ms",
         "reload ms", "reload+build ms", "build/reload+build"],
        [
            [f"{r.messages:,}", f"{r.events:,}", f"{r.held:,}", f"{r.compactions}",
             f"{r.tokens:,}", f"{r.clamped:,}",
             f"{r.build_ms:.3f}", f"{r.catch_up_none_ms:.3f}", f"{r.catch_up_turn_ms:.3f}",
             f"{r.mirror_turn_ms:.3f}", f"{r.mirror_all_ms:.2f}",
             f"{r.reload_ms:.2f}", f"{r.reload_build_ms:.2f}", f"{r.ratio:.3f}"]
            for r in results
        ],
    ):
        out(line)
    out("")
    out("build = build_request on the in-memory history (what each model call does);")
    out("catch-up = app.catch_up between turns (no new event / one new turn's 8 events);")
    out("reload+build = app.session(sid) then build_request (the re-read-everything baseline).")
    out("tree +1 turn = mirroring one new turn into the conversation tree (each turn);")
    out("tree walk = the whole held history again (after a compaction or a branch);")
    out("held = messages the session holds after compaction (70% of the model's budget);")
    calls, built = sum(r.calls for r in results), sum(r.requests_built for r in results)
    out(f"compaction checked before each of the {calls:,} model calls made building the "
        f"sessions, as the actor checks (a request built for {built:,} of them)")
    context = ContextResults(results)
    for line in conclusion(results):
        out(line)
    out("ratio = build ms / reload+build ms at the largest size (below 1: cheaper)")
    out(f"RATIO context build/reload @{context.largest} = {context.ratio:.2f}")
    return context


def conclusion(results: Sequence[SizeResult]) -> list[str]:
    """The closing lines, from the figures: how the build cost changed between the two
    largest sizes (``flat`` below :data:`FLAT_BELOW` times, else ``grows``), and whether
    anything was compacted."""
    if len(results) < 2:
        return []
    small, large = results[-2], results[-1]
    growth = ratio(large.build_ms, small.build_ms)
    verdict = "flat" if growth < FLAT_BELOW else "grows"
    lines = [
        f"build {small.messages:,} -> {large.messages:,} stored messages: "
        f"{small.build_ms:.3f} -> {large.build_ms:.3f} ms, x{growth:.2f} "
        f"(stored x{large.messages / small.messages:.1f}, held x"
        f"{large.held / small.held:.2f}): {verdict}"
    ]
    compacted = [r for r in results if r.compactions]
    if not compacted:
        lines.append("nothing was compacted: every session holds its whole history, so "
                     "build grows with it")
    else:
        lines.append("compactions: " + ", ".join(
            f"{r.compactions} at {r.messages:,} stored messages" for r in compacted)
            + ("" if compacted[0] is results[0] else " (none below)"))
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m bench.context [--quick]``."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.context",
        description="One turn's model request for sessions of 10 to 30,000 stored messages: "
        "build_request on the in-memory history and catch-up from the store, against "
        "reloading the whole session then building (SQLite).",
    )
    parser.add_argument("--quick", action="store_true",
                        help="10 and 100 messages only, for smoke runs")
    args = parser.parse_args(argv)
    run(quick=args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
