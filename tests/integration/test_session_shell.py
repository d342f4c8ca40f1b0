"""The session shell around the pure core: a chain of decisions is stored in one save (what
it decided before a decision that fails is stored too), and what a cancelled or replaced
model call sends back is dropped."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.helpers import say, wait_until
from tether.actors.middleware import MiddlewareSettings
from tether.actors.session import actor as session_actor
from tether.actors.session.actor import FromCall
from tether.actors.session.inputs import ModelFailed, WorkspaceRead
from tether.adapters.fake_llm import FakeLLM
from tether.adapters.host import Host
from tether.events.application import SNAPSHOT_INTERVAL
from tether.events.session import Session, session_uuid

STORY = """
  - match: "tell me a long story"
    chunk: 5
    delay_ms: 100
    blocks:
      - text: "{text}"
""".format(text="Once upon a time, and it went on. " * 4)
SLOW = "responses:" + STORY + STORY + """  - blocks: [{text: "Noted."}]
"""


def test_a_message_and_the_prompt_it_read_are_stored_in_one_save(
    database_url: str,
    fake_llm: Callable[[str], FakeLLM],
    make_host: Callable[..., Host],
    watch_channel: Callable[..., Any],
) -> None:
    host = make_host(fake_llm(SLOW), database_url=database_url)
    channel = watch_channel(host, "test")
    saves: list[int] = []  # the newest notification id of each save, in order
    host.app.add_listener(saves.append)
    sid = say(host, "hello")
    channel.wait_for("completed")
    ids = {n.topic.rsplit(".", 1)[-1].split(":")[0]: n.id for n in
           host.app.recorder.select_notifications(start=1, limit=10_000)
           if n.originator_id == session_uuid(sid)}
    received, prompt = ids["UserMessageReceived"], ids["SystemPromptSet"]
    assert received < prompt  # the prompt was read for the message, then set
    assert not [last for last in saves if received <= last < prompt], (
        "the message was saved before the prompt it read")


def test_what_a_replaced_model_call_sends_back_is_dropped(
    database_url: str,
    fake_llm: Callable[[str], FakeLLM],
    make_host: Callable[..., Host],
    watch_channel: Callable[..., Any],
) -> None:
    llm = fake_llm(SLOW)
    host = make_host(llm, database_url=database_url)
    channel = watch_channel(host, "test")
    sid = say(host, "please tell me a long story")
    channel.wait_for("stream")  # the reply is streaming
    session = host.manager.ref.proxy().live.get(timeout=10)[sid][-1].ref
    shell = session.proxy()
    call = shell.calls.get(timeout=10)
    generation = shell.state.get(timeout=10).turn.generation
    # A failure told as from the call before this one: dropped, the story goes on.
    session.tell(FromCall(call - 1, ModelFailed(generation, "stale: from a call before")))
    channel.wait_for("completed")
    assert not [m for m in channel.seen if m.kind == "failed"]
    assert llm.completed == 1
    # The same failure told as from the running call fails its turn: the test can see it.
    say(host, "please tell me a long story", sid)
    wait_until(lambda: len(llm.requests) == 2, "the second call")
    channel.wait_for("stream")
    call = shell.calls.get(timeout=10)
    generation = shell.state.get(timeout=10).turn.generation
    session.tell(FromCall(call, ModelFailed(generation, "boom: from the running call")))
    failed = channel.wait_for("failed")
    assert "boom" in failed.text


def _fail_a_prompt_read(monkeypatch: pytest.MonkeyPatch, armed: bool = True) -> list[bool]:
    """Make the session's decision of the next workspace read (the prompt, read for a
    message) raise once it has decided, as a bug there would; returns the switch (armed
    while it holds an item)."""
    real = session_actor.decide
    switch = [True] if armed else []

    def decide_failing_once(state: Any, message: Any, now: Any) -> Any:
        outcome = real(state, message, now)  # what it recorded is then dropped
        if isinstance(message, WorkspaceRead) and switch:
            switch.clear()
            raise RuntimeError("a bug in building the prompt")
        return outcome

    monkeypatch.setattr(session_actor, "decide", decide_failing_once)
    return switch


def test_a_decision_that_fails_keeps_what_the_chain_decided_before_it(
    monkeypatch: pytest.MonkeyPatch,
    database_url: str,
    fake_llm: Callable[[str], FakeLLM],
    make_host: Callable[..., Host],
    watch_channel: Callable[..., Any],
) -> None:
    _fail_a_prompt_read(monkeypatch)
    host = make_host(fake_llm(SLOW), database_url=database_url)
    channel = watch_channel(host, "test")
    sid = say(host, "remember this message")  # accepted: it was stored
    assert "interrupted by a restart" in channel.wait_for("failed").text
    events = host.app.session_events(sid)
    assert [e.text for e in events if isinstance(e, Session.UserMessageReceived)] == [
        "remember this message"]
    assert [e.error for e in events if isinstance(e, Session.ActorFailed)] == [
        "RuntimeError: a bug in building the prompt"]
    # What the failing decision recorded before it raised is not kept.
    assert not [e for e in events if isinstance(e, Session.SystemPromptSet)]


def test_the_events_a_failed_chain_keeps_are_snapshotted_like_any_other(
    monkeypatch: pytest.MonkeyPatch,
    fake_llm: Callable[[str], FakeLLM],
    make_host: Callable[..., Host],
    watch_channel: Callable[..., Any],
) -> None:
    armed = _fail_a_prompt_read(monkeypatch, armed=False)
    host = make_host(fake_llm('responses:\n  - blocks: [{text: "hi"}]\n'),
                     middleware=MiddlewareSettings(rate_per_minute=1e6, burst=1_000_000))
    channel = watch_channel(host, "test")
    sid = say(host, "/status")

    def version() -> int:
        session = host.app.session(sid)
        assert session is not None
        return session.version

    while version() < SNAPSHOT_INTERVAL - 1:  # each /status records one event
        say(host, "/status", sid)
    assert version() == SNAPSHOT_INTERVAL - 1
    armed.append(True)
    say(host, "remember this message", sid)  # its chain's second decision raises
    assert "interrupted by a restart" in channel.wait_for("failed").text
    events = host.app.session_events(sid)
    received = [e for e in events if isinstance(e, Session.UserMessageReceived)]
    assert [e.originator_version for e in received] == [SNAPSHOT_INTERVAL]  # kept
    wait_until(lambda: version() > SNAPSHOT_INTERVAL + 1, "the restart's records")
    assert host.app.snapshots is not None
    taken = [s.originator_version for s in host.app.snapshots.get(session_uuid(sid))]
    assert SNAPSHOT_INTERVAL in taken, (
        f"no snapshot at version {SNAPSHOT_INTERVAL} (snapshots at {taken})")
