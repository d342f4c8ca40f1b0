"""``tether stats``: the metrics as a block a person reads in the terminal."""

from __future__ import annotations

from tether.adapters.stats import render_stats
from tether.projections.metrics import Metrics, TopSession

STATUSES = {"starting": 1, "running": 0, "completed": 1, "failed": 1, "killed": 1}


def full() -> Metrics:
    return Metrics(
        position=42,
        total_cost_usd=0.875,
        cost_by_day={"2026-11-21": 0.25, "2026-11-22": 0.625},
        sessions_launched=4,
        sessions_by_status=STATUSES,
        finished_sessions=3,
        avg_duration_s=3810.0,
        most_expensive=TopSession(session_id="s1", name="fix-login", cost_usd=0.75,
                                  first_prompt="Please fix the login form"),
        tool_calls_by_verdict={"allow": 2, "deny": 2},
        awaiting_approval=1,
        ttsr_triggers={"no-rm": 1, "no-todo": 2},
    )


def test_every_figure_on_its_own_line() -> None:
    assert render_stats(full()).splitlines() == [
        "Cost            $0.8750 in total",
        "  2026-11-21    $0.2500",
        "  2026-11-22    $0.6250",
        "Sessions        4 launched: 1 starting, 0 running, 1 completed, 1 failed, 1 killed",
        "Duration        1h 03m 30s on average over 3 finished sessions",
        "Most expensive  s1 'fix-login': $0.7500",
        "                first prompt: 'Please fix the login form'",
        "Tool calls      2 allow, 2 deny, 1 awaiting approval",
        "TTSR triggers   no-todo 2, no-rm 1",
        "As of event     42",
    ]


def test_nothing_yet() -> None:
    text = render_stats(Metrics(sessions_by_status=dict.fromkeys(STATUSES, 0),
                                tool_calls_by_verdict={"allow": 0, "deny": 0}))
    assert text.splitlines() == [
        "Cost            $0.0000 in total",
        "Sessions        0 launched: 0 starting, 0 running, 0 completed, 0 failed, 0 killed",
        "Duration        no session has finished yet",
        "Most expensive  nothing spent yet",
        "Tool calls      0 allow, 0 deny, 0 awaiting approval",
        "TTSR triggers   none",
        "As of event     0",
    ]


def test_only_the_latest_days_are_listed() -> None:
    days = {f"2026-11-{d:02d}": 1.0 for d in range(1, 11)}
    lines = render_stats(Metrics(total_cost_usd=10.0, cost_by_day=days), days=3).splitlines()
    assert lines[:5] == [
        "Cost            $10.0000 in total",
        "  (7 earlier days not shown)",
        "  2026-11-08    $1.0000",
        "  2026-11-09    $1.0000",
        "  2026-11-10    $1.0000",
    ]


def test_durations_read_naturally() -> None:
    def duration(seconds: float) -> str:
        line = render_stats(Metrics(finished_sessions=1, avg_duration_s=seconds))
        return line.splitlines()[2].removeprefix("Duration        ").split(" on ")[0]

    assert [duration(s) for s in (42.25, 125, 3723, 2 * 86400 + 3 * 3600 + 4 * 60)] == [
        "42.2s", "2m 05s", "1h 02m 03s", "2d 03h 04m"]
    assert "over 1 finished session" in render_stats(Metrics(finished_sessions=1,
                                                             avg_duration_s=1.0))


def test_a_leader_without_a_prompt_has_no_prompt_line() -> None:
    top = TopSession(session_id="s9", name="n", cost_usd=1.5, first_prompt="")
    text = render_stats(Metrics(total_cost_usd=1.5, most_expensive=top))
    assert "Most expensive  s9 'n': $1.5000" in text
    assert "first prompt" not in text
