"""Deadlines: each function called once its time has come, in order, on the clock given."""

from __future__ import annotations

import queue
import threading

import pytest

from tests.helpers import MonotonicClock as Clock
from tether.actors.deadlines import Deadlines


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_each_is_called_once_its_deadline_has_passed_in_deadline_order(clock: Clock) -> None:
    deadlines = Deadlines("test", clock=clock)
    called: queue.Queue[str] = queue.Queue()
    deadlines.at(105.0, lambda: called.put("five"))
    deadlines.at(101.0, lambda: called.put("one"))
    deadlines.at(103.0, lambda: called.put("three"))
    clock.now = 103.5
    deadlines.look()
    assert [called.get(timeout=5), called.get(timeout=5)] == ["one", "three"]
    deadlines.at(104.0, lambda: called.put("four"))
    clock.now = 110.0
    deadlines.look()
    assert [called.get(timeout=5), called.get(timeout=5)] == ["four", "five"]
    deadlines.stop()
    assert called.empty()


def test_one_not_due_is_not_called(clock: Clock) -> None:
    deadlines = Deadlines("test", clock=clock)
    called = threading.Event()
    passed = threading.Event()
    deadlines.at(200.0, called.set)
    deadlines.at(100.5, passed.set)
    clock.now = 101.0
    deadlines.look()
    assert passed.wait(5)  # the thread has looked at the clock, and 200 is not due
    assert not called.is_set()
    deadlines.stop()


def test_a_call_that_raises_does_not_stop_the_others(clock: Clock) -> None:
    deadlines = Deadlines("test", clock=clock)
    called = threading.Event()

    def fails() -> None:
        raise RuntimeError("boom")

    deadlines.at(100.0, fails)
    deadlines.at(100.0, called.set)
    deadlines.look()
    assert called.wait(5)
    deadlines.stop()


def test_after_stop_nothing_is_called(clock: Clock) -> None:
    deadlines = Deadlines("test", clock=clock)
    called = threading.Event()
    deadlines.at(150.0, lambda: None)
    deadlines.stop()
    deadlines.at(101.0, called.set)
    clock.now = 200.0
    deadlines.look()
    assert not called.wait(0.2)
