"""The metrics projection: its pure rules, every figure on SQLite and PostgreSQL, exactly
once across replays and restarts, and the Prometheus text it exposes."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families as text_families

from tether.adapters.config import Settings
from tether.adapters.store import open_application, open_view
from tether.events.application import TetherApplication
from tether.events.decisions import ToolDecision
from tether.events.lifecycle import STATUSES
from tether.events.messages import TextBlock, Usage
from tether.events.session import Session, Turn
from tether.events.ttsr import RuleLog
from tether.projections.follower import Follower
from tether.projections.metrics import (
    DURATION_BUCKETS,
    OTHER,
    Metrics,
    MetricsView,
    SessionFacts,
    TopSession,
    apply_session_event,
    bucket_of,
    clip,
    duration_s,
    session_deltas,
    top_after,
    utc_day,
    verdict_moves,
)
from tether.projections.prometheus import MetricsCollector, exposition, registry_with

PROMPT = ("Please fix the login form: the submit button does nothing on Safari, and the "
          "error message overlaps the password field when it is shown")
CLIPPED = PROMPT[:99] + "…"


class Clock:
    """The time the test says events happened: the helpers below stamp the events they
    record with it (the aggregate stamps them with the real time; the store keeps what it
    is given)."""

    def __init__(self) -> None:
        self.now = dt.datetime(2026, 11, 21, 23, 0, tzinfo=dt.UTC)

    def at(self, iso: str) -> None:
        self.now = dt.datetime.fromisoformat(iso).replace(tzinfo=dt.UTC)

    def stamp(self, aggregate: Any, since: int) -> None:
        """Give the events ``aggregate`` recorded from index ``since`` on this time."""
        for pending in aggregate.pending_events[since:]:
            object.__setattr__(pending, "timestamp", self.now)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(make_settings: Callable[..., Settings], database_url: str
          ) -> Iterator[tuple[TetherApplication, Settings]]:
    settings = make_settings(database_url=database_url)
    application = open_application(settings)
    try:
        yield application, settings
    finally:
        application.close()


@pytest.fixture
def app(store: tuple[TetherApplication, Settings]) -> TetherApplication:
    return store[0]


@pytest.fixture
def make_view(store: tuple[TetherApplication, Settings]) -> Iterator[Callable[[], MetricsView]]:
    views: list[MetricsView] = []

    def make() -> MetricsView:
        view = open_view(MetricsView, store[0], store[1], "metrics")
        views.append(view)
        return view

    yield make
    for view in views:
        view.close()


def follow(app: TetherApplication, view: MetricsView) -> int:
    return Follower(app, name="test-metrics", position=view.position,
                    consume=view.consume).catch_up()


# --- building sessions -----------------------------------------------------------------


def new_session(clock: Clock, at: str, sid: str, name: str) -> Session:
    clock.at(at)
    session = Session(session_id=sid, name=name, workspace="/ws", model="m", channel="web")
    clock.stamp(session, 0)
    return session


def turn(s: Session, clock: Clock, at: str, cost: float, *, failed: bool = False) -> None:
    clock.at(at)
    since = len(s.pending_events)
    s.append_assistant_message(content=[TextBlock("ok")], stop_reason="end_turn",
                               usage=Usage(10, 2), generation=1)
    if failed:
        s.fail_turn(error="boom", cost_usd=cost)
    else:
        s.complete_turn(rounds=1, usage=Usage(10, 2), cost_usd=cost, stop="end_turn")
    clock.stamp(s, since)


def status(s: Session, clock: Clock, at: str, new: str) -> None:
    clock.at(at)
    since = len(s.pending_events)
    s.change_status(status=new, reason="test")
    clock.stamp(s, since)


def decide(s: Session, call_id: str, *decisions: str) -> None:
    s.propose_tool_call(call_id=call_id, tool="run_shell", tool_input={"command": "ls"},
                        action_hash="h-" + call_id)
    for decision in decisions:
        s.decide_tool_call(call_id=call_id, decision=decision, reason="r", tier="policy")


def first_run_of_s1(app: TetherApplication, clock: Clock) -> Session:
    """s1 until it first completes: 80 minutes, two turns over two UTC days."""
    s1 = new_session(clock, "2026-11-21T23:00:00", "s1", "fix-login")
    s1.receive_user_message(text=PROMPT, channel="web", user="ana")
    status(s1, clock, "2026-11-21T23:00:01", "running")
    decide(s1, "c1", "allow")
    decide(s1, "c2", "escalate", "allow")  # answered by a person: counts as allow
    decide(s1, "c3", "escalate", "deny")
    turn(s1, clock, "2026-11-21T23:30:00", 0.25)
    status(s1, clock, "2026-11-21T23:30:01", "waiting")  # legacy: running
    s1.receive_user_message(text="and the tests", channel="web", user="ana")
    turn(s1, clock, "2026-11-22T00:10:00", 0.5)
    status(s1, clock, "2026-11-22T00:20:00", "completed")
    app.save(s1)
    return s1


def resume_s1(app: TetherApplication, clock: Clock, s1: Session) -> None:
    """s1 resumed and completed again: 3 hours after it was created."""
    status(s1, clock, "2026-11-22T01:00:00", "running")
    app.save(s1)
    status(s1, clock, "2026-11-22T02:00:00", "completed")
    app.save(s1)


def the_others(app: TetherApplication, clock: Clock) -> None:
    """s2 fails after 10 minutes, s3 (a fork) never starts, s4 is killed after 30s; rules
    fire in s1; the gatekeeper's own record of s1's c1 is stored too."""
    s2 = new_session(clock, "2026-11-22T01:00:00", "s2", "write-docs")
    s2.receive_user_message(text="write the docs", channel="tg", user="bo")
    status(s2, clock, "2026-11-22T01:00:01", "running")
    decide(s2, "c1", "deny")  # the same call id as in s1: another call
    decide(s2, "c4", "escalate")  # not answered yet
    turn(s2, clock, "2026-11-22T01:05:00", 0.125, failed=True)
    status(s2, clock, "2026-11-22T01:10:00", "failed")
    s3 = new_session(clock, "2026-11-22T03:00:00", "s3", "fix-login-2")
    s3.fork_from(source_id="s1", at_version=3, fired_rules=[],
                 history=[Turn("user", [TextBlock("fix the login form")])])
    s4 = new_session(clock, "2026-11-22T04:00:00", "s4", "oops")
    status(s4, clock, "2026-11-22T04:00:10", "running")
    s4.record_ttsr_interruption(rules=["no-todo"], reminder="no TODO", generation=1,
                                partial_text="TODO", source="text")  # echoes the RuleLog
    status(s4, clock, "2026-11-22T04:00:30", "killed")
    log = RuleLog(session_id="s1")
    log.trigger(rules=["no-todo", "no-rm"], source="text", offset=4, generation=1)
    log.trigger(rules=["no-todo"], source="text", offset=9, generation=2, turn=1)
    gatekeeper = ToolDecision(call_id="c1", session_id="s1", tool="run_shell",
                              tool_input={"command": "ls"}, action_hash="h-c1",
                              decision="allow", reason="ok", tier="policy")
    app.save(s2, s3, s4, log, gatekeeper)


def everything(app: TetherApplication, clock: Clock) -> None:
    resume_s1(app, clock, first_run_of_s1(app, clock))
    the_others(app, clock)


def expected(position: int) -> Metrics:
    return Metrics(
        position=position,
        total_cost_usd=0.875,
        cost_by_day={"2026-11-21": 0.25, "2026-11-22": 0.625},
        sessions_launched=4,
        sessions_by_status={"starting": 1, "running": 0, "completed": 1, "failed": 1,
                            "killed": 1},
        finished_sessions=3,
        avg_duration_s=(3 * 3600 + 600 + 30) / 3,
        # finishes: s4 after 30 s, s2 after 600 s, s1 after 80 minutes and again after 3 h
        finish_buckets=dict(zip(DURATION_BUCKETS,
                                [0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 3, 4, 4, 4, 4], strict=True)),
        finishes=4,
        finish_seconds=30 + 600 + 80 * 60 + 3 * 3600,
        most_expensive=TopSession(session_id="s1", name="fix-login", cost_usd=0.75,
                                  first_prompt=CLIPPED),
        tool_calls_by_verdict={"allow": 2, "deny": 2},
        awaiting_approval=1,
        ttsr_triggers={"no-rm": 1, "no-todo": 2},
    )


# --- the pure rules --------------------------------------------------------------------


def replay(events: Sequence[Any]) -> SessionFacts | None:
    facts = None
    for event in events:
        facts = apply_session_event(facts, event)
    return facts


def test_session_facts_follow_the_events(clock: Clock) -> None:
    s = new_session(clock, "2026-11-21T23:00:00", "s1", "fix-login")
    s.receive_user_message(text=PROMPT, channel="web", user="ana")
    status(s, clock, "2026-11-21T23:00:01", "waiting")
    s.receive_user_message(text="second", channel="web", user="ana")
    turn(s, clock, "2026-11-21T23:30:00", 0.25)
    turn(s, clock, "2026-11-21T23:40:00", 0.5, failed=True)
    running = replay(s.collect_events())
    assert running == SessionFacts(
        session_id="s1", name="fix-login", status="running",
        created_at="2026-11-21T23:00:00+00:00", finished_at="", cost_usd=0.75,
        first_prompt=CLIPPED)
    assert duration_s(running) is None

    status(s, clock, "2026-11-22T00:20:00", "killed")
    killed = apply_session_event(running, s.collect_events()[0])
    assert killed is not None and killed.finished_at == "2026-11-22T00:20:00+00:00"
    assert duration_s(killed) == 80 * 60
    status(s, clock, "2026-11-22T01:00:00", "running")  # resumed: not finished any more
    resumed = apply_session_event(killed, s.collect_events()[0])
    assert resumed is not None and resumed.finished_at == "" and duration_s(resumed) is None


def test_no_facts_before_created_and_other_events_change_nothing(clock: Clock) -> None:
    s = new_session(clock, "2026-11-21T23:00:00", "s1", "n")
    created, = s.collect_events()
    s.propose_tool_call(call_id="c", tool="t", tool_input={}, action_hash="h")
    s.signal_waiting(reason="idle")
    turn(s, clock, "2026-11-21T23:01:00", 0.5)
    later = s.collect_events()
    assert all(apply_session_event(None, e) is None for e in later)
    facts = apply_session_event(None, created)
    assert apply_session_event(facts, later[0]) == facts
    assert apply_session_event(facts, later[1]) == facts
    log = RuleLog(session_id="s1")
    assert apply_session_event(facts, log.collect_events()[0]) == facts


def test_a_fork_takes_its_first_prompt_from_the_copied_history(clock: Clock) -> None:
    s = new_session(clock, "2026-11-21T23:00:00", "s3", "fork")
    s.fork_from(source_id="s1", at_version=3, fired_rules=[], history=[
        Turn("assistant", [TextBlock("hello")]), Turn("user", [TextBlock("  fix\nit ")])])
    s.receive_user_message(text="later", channel="web", user="u")
    facts = replay(s.collect_events())
    assert facts is not None and facts.first_prompt == "fix it"


def facts(status: str, cost: float = 0.0, *, sid: str = "s1", finished_at: str = ""
          ) -> SessionFacts:
    return SessionFacts(session_id=sid, name=sid + "-name", status=status,
                        created_at="2026-11-21T23:00:00+00:00", finished_at=finished_at,
                        cost_usd=cost, first_prompt="p")


def test_session_deltas_move_one_session_between_statuses() -> None:
    done = facts("completed", finished_at="2026-11-21T23:01:00+00:00")
    assert session_deltas(None, facts("starting")).by_status == {"starting": 1}
    assert session_deltas(facts("starting"), facts("running")).by_status == {
        "starting": -1, "running": 1}
    assert session_deltas(facts("running"), facts("running", 1.0)).by_status == {}
    finishing = session_deltas(facts("running"), done)
    assert (finishing.by_status, finishing.finished, finishing.duration_s) == (
        {"running": -1, "completed": 1}, 1, 60.0)
    resumed = session_deltas(done, facts("running"))
    assert (resumed.finished, resumed.duration_s) == (-1, -60.0)
    again = session_deltas(done, facts("killed", finished_at="2026-11-21T23:03:00+00:00"))
    assert (again.by_status, again.finished, again.duration_s) == (
        {"completed": -1, "killed": 1}, 0, 120.0)
    assert session_deltas(facts("running"), facts("paused")).by_status == {
        "running": -1, OTHER: 1}
    assert session_deltas(facts("starting"), None).by_status == {"starting": -1}


def test_a_finish_is_observed_when_a_session_becomes_finished_and_only_then() -> None:
    done = facts("completed", finished_at="2026-11-21T23:01:00+00:00")
    assert session_deltas(facts("running"), done).finish == 60.0
    assert session_deltas(None, done).finish == 60.0
    assert session_deltas(done, facts("running")).finish is None  # resumed: not undone
    killed = facts("killed", finished_at="2026-11-21T23:03:00+00:00")
    assert session_deltas(done, killed).finish is None  # finished already
    assert session_deltas(facts("running"), facts("running", 1.0)).finish is None
    assert [bucket_of(s) for s in (0.0, 1.0, 1.5, 60.0, 86400.0, 86401.0)] == [
        1.0, 1.0, 5.0, 60.0, 86400.0, math.inf]


def test_top_after_keeps_the_first_leader_until_overtaken() -> None:
    s1 = facts("running", 0.5)
    leader = top_after(None, s1)
    assert leader == TopSession(session_id="s1", name="s1-name", cost_usd=0.5,
                                first_prompt="p")
    assert top_after(None, facts("running", 0.0)) is None  # nothing spent: no leader
    assert top_after(leader, None) is leader
    assert top_after(leader, facts("running", 0.5, sid="s2")) is leader  # a tie
    assert top_after(leader, facts("running", 0.25, sid="s2")) is leader
    overtaken = top_after(leader, facts("running", 0.75, sid="s2"))
    assert overtaken is not None and overtaken.session_id == "s2"
    refreshed = top_after(leader, facts("completed", 0.625))
    assert refreshed is not None and refreshed.cost_usd == 0.625


def test_verdict_moves_count_each_call_once_by_its_last_decision() -> None:
    assert verdict_moves("", "allow") == {"allow": 1}
    assert verdict_moves("", "escalate") == {"escalate": 1}
    assert verdict_moves("escalate", "deny") == {"escalate": -1, "deny": 1}
    assert verdict_moves("allow", "allow") == {}
    assert verdict_moves("allow", "maybe") == {"allow": -1, OTHER: 1}


def test_clip_and_utc_day() -> None:
    assert clip("a\n b  c") == "a b c"
    assert len(clip(PROMPT)) == 100 and clip(PROMPT).endswith("…")
    assert clip("x" * 100) == "x" * 100
    tokyo = dt.timezone(dt.timedelta(hours=9))
    assert utc_day(dt.datetime(2026, 11, 22, 8, 0, tzinfo=tokyo)) == "2026-11-21"
    assert utc_day(None) == ""


# --- on a real store -------------------------------------------------------------------


def test_every_figure(app: TetherApplication, clock: Clock,
                      make_view: Callable[[], MetricsView]) -> None:
    everything(app, clock)
    view = make_view()

    assert follow(app, view) == app.max_notification_id()

    metrics = view.snapshot()
    assert metrics == expected(app.max_notification_id())
    assert list(metrics.cost_by_day) == ["2026-11-21", "2026-11-22"]
    assert list(metrics.sessions_by_status) == list(STATUSES)
    assert list(metrics.ttsr_triggers) == ["no-rm", "no-todo"]


def test_an_empty_log_has_zero_figures(app: TetherApplication,
                                       make_view: Callable[[], MetricsView]) -> None:
    view = make_view()
    follow(app, view)
    assert view.snapshot() == Metrics(
        sessions_by_status=dict.fromkeys(STATUSES, 0),
        finish_buckets=dict.fromkeys(DURATION_BUCKETS, 0),
        tool_calls_by_verdict={"allow": 0, "deny": 0})


def test_a_resumed_session_counts_with_its_latest_finish(
    app: TetherApplication, clock: Clock, make_view: Callable[[], MetricsView]
) -> None:
    view = make_view()
    s1 = first_run_of_s1(app, clock)
    follow(app, view)
    first = view.snapshot()
    assert (first.finished_sessions, first.avg_duration_s) == (1, 80 * 60)
    assert first.sessions_by_status["completed"] == 1

    status(s1, clock, "2026-11-22T01:00:00", "running")
    app.save(s1)
    follow(app, view)
    running = view.snapshot()
    assert (running.finished_sessions, running.avg_duration_s) == (0, 0.0)
    assert running.sessions_by_status["running"] == 1
    assert running.sessions_by_status["completed"] == 0

    status(s1, clock, "2026-11-22T02:00:00", "failed")
    app.save(s1)
    follow(app, view)
    again = view.snapshot()
    assert (again.finished_sessions, again.avg_duration_s) == (1, 3 * 3600)
    assert again.sessions_by_status == {"starting": 0, "running": 0, "completed": 0,
                                        "failed": 1, "killed": 0}
    assert again.sessions_launched == 1
    assert again.total_cost_usd == 0.75


def test_the_same_notifications_twice_change_nothing(
    app: TetherApplication, clock: Clock, make_view: Callable[[], MetricsView]
) -> None:
    everything(app, clock)
    view = make_view()
    batch = app.recorder.select_notifications(start=1, limit=500)
    view.consume(batch)
    once = view.snapshot()

    view.consume(batch)
    view.consume(batch[3:9])
    view.consume(batch[-1:])

    assert view.snapshot() == once == expected(len(batch))
    assert follow(app, view) == 0


def test_a_restarted_view_resumes_from_its_position(
    app: TetherApplication, clock: Clock, make_view: Callable[[], MetricsView]
) -> None:
    s1 = first_run_of_s1(app, clock)
    first = make_view()
    follow(app, first)
    position = first.position()
    before = first.snapshot()
    first.close()

    resume_s1(app, clock, s1)
    the_others(app, clock)
    restarted = make_view()
    assert restarted.position() == position
    assert restarted.snapshot() == before  # the figures survive the restart

    handled = follow(app, restarted)

    assert handled == app.max_notification_id() - position
    assert restarted.snapshot() == expected(app.max_notification_id())
    # a second view over the same tables applies nothing again
    again = make_view()
    again.consume(app.recorder.select_notifications(start=1, limit=500))
    assert again.snapshot() == expected(app.max_notification_id())


# --- the Prometheus exposition ---------------------------------------------------------

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(metrics: Metrics, *, openmetrics: bool = False) -> Samples:
    """What a scraper reads of ``metrics`` served beside the process metrics, parsed by
    prometheus_client's own parser (OpenMetrics': strict about the whole exposition)."""
    registry = registry_with(MetricsCollector(lambda: metrics))
    body, content_type = exposition(
        registry, "application/openmetrics-text; version=1.0.0" if openmetrics else None)
    text = body.decode()
    if openmetrics:
        assert content_type.startswith("application/openmetrics-text")
        families = list(openmetrics_families(text))
    else:
        assert content_type.startswith("text/plain; version=0.0.4")
        families = list(text_families(text))
    samples: Samples = {}
    for family in families:
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in samples, f"duplicate sample: {key}"
            samples[key] = sample.value
    return samples


@pytest.mark.parametrize("openmetrics", [False, True], ids=["text", "openmetrics"])
def test_the_store_metrics_as_a_scraper_reads_them(
    app: TetherApplication, clock: Clock, make_view: Callable[[], MetricsView],
    openmetrics: bool,
) -> None:
    everything(app, clock)
    view = make_view()
    follow(app, view)

    samples = scrape(view.snapshot(), openmetrics=openmetrics)

    def one(metric: str, **labels: str) -> float:
        return samples[(metric, frozenset(labels.items()))]

    assert one("tether_cost_usd_total") == 0.875
    assert [one("tether_sessions", status=s) for s in STATUSES] == [1, 0, 1, 1, 1]
    assert one("tether_sessions_launched_total") == 4
    assert one("tether_sessions_finished") == 3
    bucket = "tether_session_duration_seconds_bucket"
    bounds = ("1.0", "5.0", "15.0", "30.0", "60.0", "120.0", "300.0", "600.0", "1800.0",
              "3600.0", "7200.0", "14400.0", "28800.0", "86400.0", "+Inf")
    assert [one(bucket, le=le) for le in bounds] == [0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 3, 4, 4,
                                                    4, 4]
    assert one("tether_session_duration_seconds_count") == 4
    assert one("tether_session_duration_seconds_sum") == 30 + 600 + 80 * 60 + 3 * 3600
    assert one("tether_tool_calls_total", verdict="allow") == 2
    assert one("tether_tool_calls_total", verdict="deny") == 2
    assert one("tether_tool_calls_awaiting_approval") == 1
    assert one("tether_ttsr_triggers_total", rule="no-todo") == 2
    assert one("tether_ttsr_triggers_total", rule="no-rm") == 1
    assert one("tether_most_expensive_session_cost_usd", session_id="s1",
               name="fix-login") == 0.75
    assert one("tether_metrics_position") == app.max_notification_id()
    tether = {name for name, _ in samples if name.startswith("tether_")}
    # no label that grows with the calendar, and no average to average again
    assert not any("date" in dict(labels) for _, labels in samples)
    assert "tether_session_duration_seconds_avg" not in tether
    assert "tether_cost_usd_by_day" not in tether
    # the process's own metrics ride along
    assert ("process_cpu_seconds_total", frozenset()) in samples
    assert ("python_info" in {name for name, _ in samples})


def test_label_values_with_quotes_backslashes_and_newlines_come_back_whole() -> None:
    odd = 'a "quoted"\\back\nslash'
    metrics = Metrics(
        total_cost_usd=1e-05,
        most_expensive=TopSession(session_id="s1", name=odd, cost_usd=2.5, first_prompt="p"),
        ttsr_triggers={odd: 3, "no-todo": 1},
    )
    for openmetrics in (False, True):
        samples = scrape(metrics, openmetrics=openmetrics)
        assert samples[("tether_cost_usd_total", frozenset())] == 1e-05
        assert samples[("tether_ttsr_triggers_total", frozenset({("rule", odd)}))] == 3
        assert samples[("tether_most_expensive_session_cost_usd",
                        frozenset({("session_id", "s1"), ("name", odd)}))] == 2.5


def test_no_leader_no_leader_sample_and_an_empty_histogram() -> None:
    samples = scrape(Metrics(), openmetrics=True)
    assert not any(name == "tether_most_expensive_session_cost_usd" for name, _ in samples)
    assert samples[("tether_cost_usd_total", frozenset())] == 0
    assert samples[("tether_session_duration_seconds_count", frozenset())] == 0


def test_a_title_calls_cost_counts_with_its_session(clock: Clock) -> None:
    s = new_session(clock, "2026-11-21T23:00:00", "s1", "fix-login")
    s.receive_user_message(text=PROMPT, channel="web", user="ana")
    turn(s, clock, "2026-11-21T23:30:00", 0.25)
    s.set_title(title="Fix the login", cost_usd=0.01)
    facts = replay(s.collect_events())
    assert facts is not None and facts.cost_usd == pytest.approx(0.26)


def compactions(s: Session, clock: Clock, at: str, made: float, failed: float) -> None:
    """A compaction made (its summary and memory calls cost ``made``), then one that
    failed after spending ``failed``."""
    clock.at(at)
    since = len(s.pending_events)
    s.compact_history(summary="[Previous conversation summary: the login form]", replaced=1,
                      tokens_before=140_000, tokens_after=20_000, budget=200_000,
                      cost_usd=made)
    s.fail_compaction(error="summary call failed: overloaded", cost_usd=failed)
    clock.stamp(s, since)


def test_compaction_costs_count_with_their_session(clock: Clock) -> None:
    s = new_session(clock, "2026-11-21T23:00:00", "s1", "fix-login")
    s.receive_user_message(text=PROMPT, channel="web", user="ana")
    turn(s, clock, "2026-11-21T23:30:00", 0.25)
    compactions(s, clock, "2026-11-21T23:40:00", 0.125, 0.0625)
    facts = replay(s.collect_events())
    assert facts is not None and facts.cost_usd == 0.4375 == s.cost_usd


def test_compaction_costs_count_in_every_figure_as_the_budget_sees_them(
    app: TetherApplication, clock: Clock, make_view: Callable[[], MetricsView]
) -> None:
    first_run_of_s1(app, clock)  # 0.75 in turns
    s2 = new_session(clock, "2026-11-22T05:00:00", "s2", "long-haul")
    s2.receive_user_message(text="refactor the store", channel="web", user="bo")
    turn(s2, clock, "2026-11-22T23:00:00", 0.5)
    compactions(s2, clock, "2026-11-23T00:10:00", 0.125, 0.25)
    app.save(s2)
    view = make_view()
    follow(app, view)

    metrics = view.snapshot()

    stored = app.session("s2")
    assert stored is not None and stored.cost_usd == 0.875  # what the budget check sees
    assert metrics.total_cost_usd == 0.75 + 0.875
    assert metrics.cost_by_day == {"2026-11-21": 0.25, "2026-11-22": 1.0,
                                   "2026-11-23": 0.375}
    # only the compactions' cost puts s2 ahead of s1
    assert metrics.most_expensive == TopSession(session_id="s2", name="long-haul",
                                                cost_usd=0.875,
                                                first_prompt="refactor the store")
    samples = scrape(metrics)
    assert samples[("tether_cost_usd_total", frozenset())] == 1.625
