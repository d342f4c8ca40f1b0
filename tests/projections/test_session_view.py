"""The session view on a real store: rows users see, applied exactly once, resumable."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator

import pytest

from tether.adapters.config import Settings
from tether.adapters.store import open_application, store_env
from tether.events.application import TetherApplication
from tether.events.decisions import ToolDecision
from tether.events.messages import SessionSummary, TextBlock, Usage
from tether.events.session import Session
from tether.events.ttsr import RuleLog
from tether.projections.follower import Follower, Settler
from tether.projections.session_view import SessionView


@pytest.fixture
def settings(database_url: str, make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(database_url=database_url)


@pytest.fixture
def app(settings: Settings) -> Iterator[TetherApplication]:
    application = open_application(settings)
    try:
        yield application
    finally:
        application.close()


@pytest.fixture
def open_view(
    app: TetherApplication, settings: Settings
) -> Iterator[Callable[[], SessionView]]:
    views: list[SessionView] = []

    def make() -> SessionView:
        view = SessionView(app, {**store_env(settings, "views"), "CREATE_TABLE": "true"})
        views.append(view)
        return view

    yield make
    for view in views:
        view.close()


def follow(app: TetherApplication, view: SessionView) -> int:
    return Follower(app, name="test-view", position=view.position,
                    consume=view.consume).catch_up()


def stamp(app: TetherApplication, sid: str) -> str:
    last = app.session_events(sid)[-1].timestamp
    return last.astimezone(dt.UTC).isoformat(timespec="seconds")


def run_turn(app: TetherApplication, sid: str, name: str) -> Session:
    s = Session(session_id=sid, name=name, workspace="/ws", model="claude-sonnet-4",
                channel="web")
    s.receive_user_message(text="hi", channel="web", user="u")
    s.change_status(status="running", reason="message")
    s.append_assistant_message(content=[TextBlock("a")], stop_reason="end_turn",
                               usage=Usage(100, 20), generation=1)
    s.append_assistant_message(content=[TextBlock("b")], stop_reason="end_turn",
                               usage=Usage(50, 5), generation=2)
    s.complete_turn(rounds=2, usage=Usage(150, 25), cost_usd=0.25, stop="end_turn")
    s.change_status(status="waiting", reason="turn done")  # as stored before 0.2: legacy
    app.save(s)
    return s


def test_view_shows_each_session(app: TetherApplication, open_view: Callable[[], SessionView]
                                 ) -> None:
    run_turn(app, "s1", "fix-login")
    other = Session(session_id="s2", name="write-docs", workspace="/ws", model="m",
                    channel="tg")
    other.fail_turn(error="x")
    app.save(other)
    view = open_view()

    handled = follow(app, view)

    assert handled == app.max_notification_id() == 9
    assert view.position() == 9
    rows = {r.session_id: r for r in view.summaries()}
    assert rows["s1"] == SessionSummary(
        session_id="s1", name="fix-login", status="running", turns=1, input_tokens=150,
        output_tokens=25, cost_usd=0.25, last_activity=stamp(app, "s1"),
    )
    assert rows["s2"] == SessionSummary(
        session_id="s2", name="write-docs", status="starting", turns=1, input_tokens=0,
        output_tokens=0, cost_usd=0.0, last_activity=stamp(app, "s2"),
    )
    # most recently active first, then by id (the two saves may fall in one second or two)
    listed = view.summaries()
    assert listed == sorted(sorted(listed, key=lambda r: r.session_id),
                            key=lambda r: r.last_activity, reverse=True)


def test_same_notifications_twice_change_nothing(
    app: TetherApplication, open_view: Callable[[], SessionView]
) -> None:
    run_turn(app, "s1", "fix-login")
    view = open_view()
    batch = app.recorder.select_notifications(start=1, limit=100)
    view.consume(batch)
    rows, position = view.summaries(), view.position()

    view.consume(batch)
    view.consume(batch[3:5])

    assert view.summaries() == rows
    assert view.position() == position == len(batch)
    assert rows[0].turns == 1 and rows[0].input_tokens == 150


def test_a_new_view_resumes_from_its_position(
    app: TetherApplication, open_view: Callable[[], SessionView]
) -> None:
    s = run_turn(app, "s1", "fix-login")
    first = open_view()
    follow(app, first)
    position = first.position()
    first.close()

    s.receive_user_message(text="more", channel="web", user="u")
    s.complete_turn(rounds=1, usage=Usage(1, 1), cost_usd=0.5, stop="end_turn")
    s.change_status(status="completed", reason="done")
    app.save(s)
    run_turn(app, "s3", "new-one")

    restarted = open_view()
    assert restarted.position() == position  # survives restart
    handled = follow(app, restarted)

    assert handled == app.max_notification_id() - position
    rows = {r.session_id: r for r in restarted.summaries()}
    assert rows["s1"].turns == 2  # the first turn is not counted again
    assert rows["s1"].cost_usd == pytest.approx(0.75)
    assert rows["s1"].input_tokens == 150
    assert rows["s1"].status == "completed"
    assert rows["s1"].last_activity == stamp(app, "s1")
    assert rows["s3"].name == "new-one"
    assert follow(app, restarted) == 0


def test_other_aggregates_advance_position_without_rows(
    app: TetherApplication, open_view: Callable[[], SessionView]
) -> None:
    run_turn(app, "s1", "fix-login")
    view = open_view()
    follow(app, view)
    before = view.summaries()

    decision = ToolDecision(call_id="c1", session_id="s1", tool="shell",
                            tool_input={"cmd": "ls"}, action_hash="h", decision="allow",
                            reason="ok", tier="policy")
    log = RuleLog(session_id="s1")
    log.trigger(rules=["no-rm"], source="text", offset=3, generation=1, turn=0, deferred=False)
    app.save(decision, log)

    handled = follow(app, view)

    assert handled == 3
    assert view.position() == app.max_notification_id()
    assert view.summaries() == before


@pytest.mark.parametrize("woken_by", ["save", "settler"])
def test_running_follower_applies_after_each_save(
    app: TetherApplication, open_view: Callable[[], SessionView], woken_by: str
) -> None:
    view = open_view()
    settler = Settler(app, settle=0.05).start() if woken_by == "settler" else None
    # a long poll interval: only the save's (or the settler's) wake-up can deliver in time
    follower = Follower(app, name="live", position=view.position, consume=view.consume,
                        poll_interval=60.0, settler=settler)
    follower.start()
    try:
        time.sleep(0.2)  # let the first (empty) catch-up finish and the loop go to sleep
        run_turn(app, "s9", "live-one")
        deadline = time.monotonic() + 10
        while view.position() < app.max_notification_id() and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        follower.stop()
        if settler is not None:
            settler.stop()
    assert view.position() == app.max_notification_id()
    assert [r.session_id for r in view.summaries()] == ["s9"]
    assert view.summaries()[0].turns == 1


def test_title_and_compaction_costs_count_with_the_session(
    app: TetherApplication, open_view: Callable[[], SessionView]
) -> None:
    s = run_turn(app, "s1", "fix-login")  # 0.25 in its turn
    s.set_title(title="Fix the login", cost_usd=0.03125)
    s.compact_history(summary="[Previous conversation summary: hi]", replaced=1,
                      tokens_before=140_000, tokens_after=20_000, budget=200_000,
                      cost_usd=0.125)
    s.fail_compaction(error="summary call failed: overloaded", cost_usd=0.0625)
    app.save(s)
    view = open_view()

    follow(app, view)

    row = view.summary("s1")
    stored = app.session("s1")
    assert stored is not None and stored.cost_usd == 0.46875  # what the budget check sees
    assert row is not None and row.cost_usd == 0.46875
    assert row.turns == 1  # a compaction is no turn
    assert row.last_activity == stamp(app, "s1")

