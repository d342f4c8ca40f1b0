"""The settler: a save wakes no follower on its own thread; one burst of saves is handed to
the followers once, ``settle`` seconds after its first save (an injected clock)."""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator

import pytest

from tests.helpers import MonotonicClock as Clock
from tether.adapters.config import Settings
from tether.adapters.store import open_application
from tether.events.application import TetherApplication
from tether.events.session import Session
from tether.projections.follower import Settler

SETTLE = 3600.0


@pytest.fixture
def app(make_settings: Callable[..., Settings]) -> Iterator[TetherApplication]:
    application = open_application(make_settings())
    try:
        yield application
    finally:
        application.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def woken(app: TetherApplication, clock: Clock) -> Iterator[tuple[Settler, list[float]]]:
    settler = Settler(app, SETTLE, clock=clock).listen()
    wakes: list[float] = []
    settler.add(lambda: wakes.append(clock.now))
    try:
        yield settler, wakes
    finally:
        settler.stop()


def save(app: TetherApplication, sid: str) -> None:
    app.save(Session(session_id=sid, name=sid, workspace="/ws", model="m", channel="web"))


def test_a_burst_is_handed_over_once_it_has_settled(
        app: TetherApplication, clock: Clock, woken: tuple[Settler, list[float]]) -> None:
    settler, wakes = woken
    save(app, "s1")
    clock.now += 10
    save(app, "s2")  # the same burst: it does not push the hand-over back
    assert wakes == []  # nothing is woken on the saving thread
    clock.now += SETTLE - 11
    assert settler.look() == pytest.approx(1.0)  # 1 s before the burst has settled
    assert wakes == []
    clock.now += 1
    assert settler.look() is None  # handed over: nothing waits until the next save
    assert wakes == [100.0 + SETTLE]
    clock.now += SETTLE
    assert settler.look() is None
    assert wakes == [100.0 + SETTLE]  # no save since: nobody is woken again


def test_a_save_after_the_hand_over_starts_the_next_burst(
        app: TetherApplication, clock: Clock, woken: tuple[Settler, list[float]]) -> None:
    settler, wakes = woken
    save(app, "s1")
    clock.now += SETTLE
    settler.look()
    clock.now += 5
    save(app, "s2")
    clock.now += SETTLE - 1
    settler.look()
    assert len(wakes) == 1
    clock.now += 1
    settler.look()
    assert wakes == [100.0 + SETTLE, 100.0 + 2 * SETTLE + 5]


def test_after_stop_saves_are_not_noted_and_removed_followers_are_not_woken(
        app: TetherApplication, clock: Clock) -> None:
    settler = Settler(app, SETTLE, clock=clock).listen()
    kept: list[int] = []
    removed: list[int] = []
    settler.add(lambda: kept.append(1))
    settler.add(lambda: removed.append(1))()
    save(app, "s1")
    clock.now += SETTLE
    settler.look()
    assert (kept, removed) == ([1], [])
    settler.stop()
    save(app, "s2")
    clock.now += SETTLE
    settler.look()
    assert kept == [1]


def test_the_settler_s_own_thread_wakes_after_each_burst_and_stops_when_idle(
        app: TetherApplication) -> None:
    """Started, the settler's thread acts on each burst by itself (it sleeps between
    them, woken by a burst's first save) and ends on stop while it waits for one."""
    settler = Settler(app, 0.01).start()
    woken: queue.Queue[str] = queue.Queue()
    settler.add(lambda: woken.put("woken"))
    for sid in ("s1", "s2", "s3"):
        save(app, sid)
        assert woken.get(timeout=10) == "woken"
    settler.stop()
    assert settler._thread is not None and not settler._thread.is_alive()
    assert woken.empty()


def test_a_wake_up_that_fails_does_not_end_the_ones_to_come(app: TetherApplication) -> None:
    settler = Settler(app, 0.01).start()
    woken: queue.Queue[str] = queue.Queue()
    settler.add(lambda: woken.put("woken"))

    def broken() -> None:
        raise RuntimeError("a follower that cannot be woken")

    settler.add(broken)
    try:
        for sid in ("s1", "s2"):
            save(app, sid)
            assert woken.get(timeout=10) == "woken"
    finally:
        settler.stop()
