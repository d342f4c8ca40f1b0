"""A reply's notice waits for the end of its generation's live stream, at most `hold`
seconds; a hold that runs out counts that stream as ended."""

from __future__ import annotations

import datetime as dt

from tether.actors.chat.router import RouterSettings, _Session
from tether.events.deliveries import Deliveries

T0 = dt.datetime(2026, 11, 28, 12, 0, tzinfo=dt.UTC)


def session(hold: float = 2.0) -> _Session:
    state = _Session("s", "", "chat", "/w", RouterSettings(hold=hold), Deliveries("s"))
    state.streamed = True
    return state


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def test_a_notice_waits_for_its_streams_end_at_most_hold_seconds() -> None:
    state = session()
    assert state.holds(7, at(0))
    assert state.holds(7, at(1.9))
    assert not state.holds(7, at(2.0))
    assert not state.holds(7, at(2.1))  # that stream counts as ended now
    assert state.ended == 7 and state.held_since is None


def test_after_a_hold_ran_out_the_next_generation_is_held_afresh() -> None:
    """Before, the first hold's start stayed: the next reply was not held at all, and
    the router read the outbox again on every tick."""
    state = session()
    assert state.holds(7, at(0))
    assert not state.holds(7, at(5))  # its end delta never came
    assert state.holds(9, at(60))  # the next reply's stream is live: it waits
    assert state.holds(9, at(61.5))
    assert not state.holds(9, at(62))


def test_nothing_is_held_before_any_stream_was_seen_or_for_a_stream_that_ended() -> None:
    state = session()
    state.streamed = False
    assert not state.holds(7, at(0))
    state.streamed = True
    state.ended = 7
    assert not state.holds(7, at(0)) and not state.holds(3, at(0))
    assert not state.holds(0, at(0))  # a notice of no generation
    assert state.held_since is None


def test_a_hold_of_zero_seconds_holds_nothing() -> None:
    state = session(hold=0.0)
    assert not state.holds(7, at(0))
