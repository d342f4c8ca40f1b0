"""Killing a session mid-stream, and a model stream that is cut short."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.conftest import Engine
from tests.helpers import say, wait_until
from tether.actors.runtime import Tick, ask
from tether.adapters.fake_llm import FakeLLM
from tether.adapters.host import Host
from tether.events.messages import Killed, KillSession

LONG_TEXT = "This is a very long story that keeps going and going. " * 20

SCRIPT = f"""
responses:
  - match: "tell me a long story"
    chunk: 5
    delay_ms: 200
    blocks:
      - text: "{LONG_TEXT}"
  - match: "cut me short"
    truncate: true
    blocks:
      - text: "This reply never finishes properly."
"""




def _event_names(host: Host, sid: str) -> list[str]:
    return [type(e).__name__ for e in host.app.session_events(sid)]


def test_kill_mid_stream_stops_the_model_call(
    database_url: str,
    fake_llm: Callable[[str], FakeLLM],
    make_host: Callable[..., Host],
    watch_channel: Callable[..., Any],
) -> None:
    llm = fake_llm(SCRIPT)
    host = make_host(llm, database_url=database_url)
    channel = watch_channel(host, "test")

    sid = say(host, "please tell me a long story")
    channel.wait_for("stream")  # the reply is streaming
    killed = ask(host.bus, host.subjects.manager, KillSession(session_id=sid), Killed, 10)
    assert killed.session_id == sid and killed.found

    session = host.app.session(sid)
    assert session is not None and session.status == "killed"
    assert llm.wait_for_disconnects(1, timeout=10), "the model stream was not closed"
    assert llm.completed == 0
    notice = channel.wait_for("status")
    assert notice.session_id == sid and "killed" in notice.text
    # The killed turn's end is told once, by the kill's notice, not as a failure.
    assert not [m for m in channel.seen if m.kind == "failed"]
    # The session is gone from the manager: a second kill finds nothing.
    again = ask(host.bus, host.subjects.manager, KillSession(session_id=sid), Killed, 10)
    assert not again.found


def test_a_stream_cut_short_is_retried_on_the_manager_s_ticks_then_fails_the_turn(
    database_url: str,
    engine: Callable[..., Engine],
    watch_channel: Callable[..., Any],
) -> None:
    # A stream that stops before message_stop is a dropped connection: retried (after 1,
    # 2, 4 s on the injected clock), and when every attempt is cut short the turn fails.
    # (What the session decides about it, and that it carries on after, is tested on
    # plain values in tests/actors/session/test_context.py.)
    cut = """
  - match: "cut me short"
    truncate: true
    blocks:
      - text: "This reply never finishes properly."
"""
    host, clock, llm = engine(SCRIPT + cut * 3, database_url=database_url)
    channel = watch_channel(host, "test")

    sid = say(host, "please cut me short")
    for attempt, delay in ((1, 1), (2, 2), (3, 4)):
        def retried(count: int = attempt) -> bool:
            return _event_names(host, sid).count("ProviderRetried") == count

        wait_until(retried, f"retry {attempt}")
        clock.advance(delay)
        host.manager.ref.ask(Tick(), timeout=10)
    failed = channel.wait_for("failed")
    assert failed.session_id == sid
    assert "ended before message_stop" in failed.text and "(after 3 retries)" in failed.text
    assert len(llm.requests) == 4
    assert not [m for m in channel.seen if m.kind in ("reply", "completed")]
    turn_failed = [
        e for e in host.app.session_events(sid) if type(e).__name__ == "TurnFailed"
    ]
    assert len(turn_failed) == 1 and "message_stop" in turn_failed[0].error
