"""The session lifecycle across the engine: the active limit, names, resume, shutdown,
forks and the command line. What a session decides itself (how a turn's end leaves it,
its budget, its timers, /stop) is tested on plain values in
tests/actors/session/test_lifecycle.py."""

from __future__ import annotations

import getpass
import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import Engine
from tests.helpers import say, tether_cli, wait_until
from tether.actors.runtime import RemoteError, ask
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
