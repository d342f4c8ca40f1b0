"""The session lifecycle: the active limit, names, resume, budgets, timers, shutdown."""

from __future__ import annotations

import getpass
import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import Engine
from tests.helpers import say, tether_cli, wait_until
from tether.actors.ports import ManualClock
from tether.actors.runtime import RemoteError, Tick, ask
from tether.adapters.host import Host
from tether.events.messages import Accepted, Killed, KillSession, UserMessage

CHAT = """
on_exhausted: reply
responses: []
"""


def statuses(host: Host, sid: str) -> list[tuple[str, str]]:
    return [(e.status, e.reason) for e in host.app.session_events(sid)
            if type(e).__name__ == "StatusChanged"]


def names(host: Host, sid: str) -> list[str]:
    return [type(e).__name__ for e in host.app.session_events(sid)]


def tick(host: Host, clock: ManualClock, seconds: float) -> None:
    """Move the clock and let the manager pass the time on to the sessions."""
    clock.advance(seconds)
    host.manager.ref.ask(Tick(), timeout=10)


def test_multi_turn_sessions_stay_running_and_wait_for_input(
    engine: Callable[..., Engine],
    watch_channel: Callable[..., Any],
) -> None:
    host, _, _ = engine()
    channel = watch_channel(host, "test")
    sid = say(host, "hello there")
    channel.wait_for("completed")
    session = host.app.session(sid)
    assert session is not None and session.status == "running" and session.waiting
    assert statuses(host, sid) == [("running", "user message")]
    waiting = [e.reason for e in host.app.session_events(sid)
               if type(e).__name__ == "WaitingForInput"]
    assert waiting == ["the turn is done"]

    single = say_single(host, "one thing only")
    channel.wait_for("completed")
    assert statuses(host, single) == [("running", "user message"),
                                      ("completed", "the turn is done")]


def say_single(host: Host, text: str) -> str:
    return ask(host.bus, host.subjects.inbox,
               UserMessage(text=text, channel="test", single_turn=True), Accepted).session_id


def test_the_active_limit_refuses_and_says_what_to_do(
    engine: Callable[..., Engine],
    watch_channel: Callable[..., Any],
) -> None:
    host, _, _ = engine(max_sessions=2)
    channel = watch_channel(host, "test")
    first = say(host, "first task")
    say(host, "second task")
    with pytest.raises(RemoteError) as refused:
        say(host, "third task")
    assert refused.value.reply.error == "session_limit"
    assert "2 sessions are active and the limit is 2" in refused.value.reply.reason
    assert "tether kill" in channel.wait_for("error").text

    ask(host.bus, host.subjects.manager, KillSession(session_id=first), Killed)
    third = say(host, "third task")  # a slot is free again
    assert third not in (first,)
    # Resuming the killed one would make three: refused as well.
    with pytest.raises(RemoteError, match="cannot resume first-task"):
        say(host, "back to it", first)


def test_a_session_is_found_by_name_and_a_finished_one_resumes(
    engine: Callable[..., Engine],
    watch_channel: Callable[..., Any],
) -> None:
    host, _, llm = engine()
    channel = watch_channel(host, "test")
    sid = say(host, "fix the login bug")
    channel.wait_for("completed")
    ask(host.bus, host.subjects.manager, KillSession(session_id=sid), Killed)
    assert say(host, "and the logout too", "fix-login-bug") == sid  # by name, resumed
    channel.wait_for("completed")
    assert statuses(host, sid) == [("running", "user message"), ("killed", "killed by user"),
                                   ("running", "resumed")]
    # The resumed turn carried the whole history.
    assert "fix the login bug" in str(llm.requests[-1]["messages"])
    with pytest.raises(RemoteError, match="no session 'nope'"):
        say(host, "hello", "nope")


def test_going_over_the_budget_fails_the_session_and_says_so(
    engine: Callable[..., Engine],
    watch_channel: Callable[..., Any],
) -> None:
    script = """
responses:
  - blocks:
      - text: "Reading."
      - tool_use: {name: list_dir, input: {path: "."}}
    usage: {input_tokens: 100000, output_tokens: 1000}
"""
    host, _, llm = engine(script, budget_usd=0.2)
    channel = watch_channel(host, "test")
    sid = say(host, "an expensive question")
    failed = channel.wait_for("failed").text
    assert "budget exhausted" in failed and "$0.20" in failed
    session = host.app.session(sid)
    assert session is not None and session.status == "failed" and session.budget_exhausted
    assert len(llm.requests) == 1  # nothing more was asked, no tool ran
    refused = [e.reason for e in host.app.session_events(sid)
               if type(e).__name__ == "ToolCallRefused"]
    assert refused and "budget is spent" in refused[0]
    assert session.cost_usd == pytest.approx(0.315)  # the failed turn's cost counts
    with pytest.raises(RemoteError, match="budget"):
        say(host, "one more", sid)


def test_the_idle_timeout_kills_and_the_safety_net_signals_once(
    engine: Callable[..., Engine],
    watch_channel: Callable[..., Any],
) -> None:
    script = """
responses:
  - match: "publish"
    blocks:
      - tool_use: {name: run_shell, input: {command: "git push origin main"}}
"""
    host, clock, _ = engine(script, idle_timeout=600.0, safety_net=15.0)
    channel = watch_channel(host, "test")
    quiet = say(host, "hello")
    channel.wait_for("completed")
    tick(host, clock, 599)
    assert "killed" not in [s for s, _ in statuses(host, quiet)]
    busy = say(host, "publish it")  # waits for an approval: no activity at all
    channel.wait_for("approval")
    tick(host, clock, 20)
    assert channel.wait_for("status").text == "session killed: idle for 10 minutes"
    assert statuses(host, quiet)[-1] == ("killed", "idle for 10 minutes")

    def signals() -> list[str]:
        return [e.reason for e in host.app.session_events(busy)
                if type(e).__name__ == "WaitingForInput"]

    wait_until(lambda: len(signals()) == 1, "the safety net")
    tick(host, clock, 20)
    say(host, "/status", busy)  # handled after the tick: the session had its chance
    channel.wait_for("status")
    assert signals() == ["nothing has happened for 15 s"]  # once
    assert "killed" not in [s for s, _ in statuses(host, busy)]  # mid-turn: not idle


def test_shutdown_kills_every_active_session_and_a_message_resumes_it(
    engine: Callable[..., Engine],
    watch_channel: Callable[..., Any],
) -> None:
    host, _, _ = engine()
    channel = watch_channel(host, "test")
    sid = say(host, "hello")
    channel.wait_for("completed")
    host.stop()

    again, _, _ = engine(database_url=host.settings.database_url,
                         state_dir=host.settings.state_dir)
    assert statuses(again, sid)[-1] == ("killed", "the engine shut down")
    channel = watch_channel(again, "test")
    assert say(again, "still there?", sid) == sid
    channel.wait_for("completed")
    assert statuses(again, sid)[-1] == ("running", "resumed")


def test_finished_sessions_leave_memory_after_an_hour(
    engine: Callable[..., Engine],
    watch_channel: Callable[..., Any],
) -> None:
    host, clock, _ = engine()
    channel = watch_channel(host, "test")
    sid = say_single(host, "hello")  # completed after its turn
    channel.wait_for("completed")
    wait_until(lambda: statuses(host, sid)[-1][0] == "completed", "completion")
    manager = host.manager.ref.proxy()
    manager.clean_up().get(timeout=10)  # notes when it saw the session finished
    clock.advance(3599)
    manager.clean_up().get(timeout=10)
    assert sid in manager.live.get(timeout=10)
    clock.advance(2)
    manager.clean_up().get(timeout=10)
    assert sid not in manager.live.get(timeout=10)
    assert host.app.session(sid) is not None  # still in the store
    assert say(host, "back again", sid) == sid  # and it comes back on its next message
    channel.wait_for("completed")


def test_a_fork_copies_the_history_and_rule_log_up_to_an_event(
    engine: Callable[..., Engine],
    watch_channel: Callable[..., Any],
) -> None:
    from tether.events.messages import ForkSession
    from tether.events.ttsr import RuleLog

    host, _, llm = engine()
    channel = watch_channel(host, "test")
    sid = say(host, "first question")
    channel.wait_for("completed")
    log = RuleLog(session_id=sid)
    log.trigger(rules=["no-todo"], source="text", offset=3, generation=2, turn=0)
    log.trigger(rules=["no-print"], source="text", offset=3, generation=9, turn=1)
    host.app.save(log)
    say(host, "second question", sid)
    channel.wait_for("completed")
    first_turn_end = next(e.originator_version for e in host.app.session_events(sid)
                          if type(e).__name__ == "TurnCompleted")

    fork = ask(host.bus, host.subjects.manager, ForkSession(
        session_id="first-question", at_version=first_turn_end, channel="test"),
        Accepted).session_id
    assert fork != sid
    say(host, "third question", fork)
    channel.wait_for("completed")
    sent = str(llm.requests[-1]["messages"])
    assert "first question" in sent and "second question" not in sent
    forked = host.app.session(fork)
    assert forked is not None and forked.forked_from == sid
    assert forked.name == "first-question-fork"
    copied = host.app.rule_log(fork)
    assert copied is not None and copied.injections == [("no-todo", 0)]
    source = host.app.session(sid)
    assert source is not None and len(source.history) == 4  # the source is untouched

    with pytest.raises(RemoteError, match="no session 'first-question' at event 999"):
        ask(host.bus, host.subjects.manager,
            ForkSession(session_id="first-question", at_version=999), Accepted)


def test_tether_kill_and_fork_talk_to_the_running_engine(
    engine: Callable[..., Engine],
    watch_channel: Callable[..., Any], nats_url: str,
) -> None:
    host, _, _ = engine()
    channel = watch_channel(host, "test")
    sid = say(host, "count the stars", user=getpass.getuser())  # the command line's own
    channel.wait_for("completed")
    tether = tether_cli(host, nats_url)
    listed = [json.loads(line) for line in tether("sessions", "--json").stdout.splitlines()]
    assert [row["session_id"] for row in listed] == [sid]
    replayed = json.loads(tether("replay", sid, "--until", "3", "--json").stdout)
    assert replayed["version"] == 3 and replayed["session_id"] == sid
    assert replayed["history"][0]["content"][0]["text"] == "count the stars"
    answered = next(e for e in host.app.session_events(sid)
                    if type(e).__name__ == "AssistantMessageAppended")
    mid_turn = tether("replay", sid, "--until", str(answered.originator_version))
    # the turn has spent tokens but not ended: its cost shows, priced from them
    assert mid_turn.returncode == 0 and "in the turn still running" in mid_turn.stdout
    assert "$0.0000" not in mid_turn.stdout
    replayed = json.loads(tether("replay", sid, "--until", str(answered.originator_version),
                                 "--json").stdout)
    assert replayed["in_turn"] and replayed["cost_usd"] == 0
    assert replayed["running_turn_cost_usd"] > 0
    finished = json.loads(tether("replay", sid, "--json").stdout)
    assert finished["running_turn_cost_usd"] == 0
    assert finished["cost_usd"] == pytest.approx(replayed["running_turn_cost_usd"])
    fired = tether("rules", "injections", "--json")
    assert fired.returncode == 0 and fired.stdout == ""  # no rule fired: nothing, as JSON

    forked = tether("fork", "count-stars", "--at", "3")
    assert forked.returncode == 0, forked.stderr
    new = forked.stdout.split()[3].rstrip(";")
    session = host.app.session(new)
    assert session is not None and session.forked_from == sid

    killed = tether("kill", "count-stars", "--reason", "enough stars")
    assert killed.returncode == 0 and killed.stdout.strip() == f"killed {sid}"
    assert statuses(host, sid)[-1] == ("killed", "enough stars")
    again = tether("kill", "count-stars")
    assert again.returncode == 1 and "no active session 'count-stars'" in again.stderr


def test_stop_ends_the_running_turn_only(
    engine: Callable[..., Engine],
    watch_channel: Callable[..., Any],
) -> None:
    script = """
responses:
  - match: "long story"
    chunk: 2
    delay_ms: 30
    blocks:
      - text: "Once upon a time there was a very long story that took ages to tell."
      - tool_use: {name: list_dir, input: {path: "."}}
  - match: "something short"
    blocks: [{text: "Short."}]
"""
    host, _, llm = engine(script)
    channel = watch_channel(host, "test")
    sid = say(host, "tell me a long story", user="ana")
    channel.wait_for("stream")
    say(host, "/stop", sid, user="ana")
    assert channel.wait_for("failed").text == "the turn failed: stopped by ana"
    session = host.app.session(sid)
    assert session is not None and session.status == "running" and session.waiting
    assert not any(type(e).__name__ in ("ToolCallProposed", "AssistantMessageAppended")
                   for e in host.app.session_events(sid))  # nothing of it was kept or run
    say(host, "now something short", sid, user="ana")
    channel.wait_for("completed")
    assert llm.requests[-1]["messages"][-1]["content"][-1]["text"].endswith("now something short")
    say(host, "/stop", sid, user="ana")
    assert channel.wait_for("status").text == "no turn is running"
