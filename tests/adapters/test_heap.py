"""What freezing the startup's objects keeps and lets go (adapters/heap.py)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from tether.adapters.heap import freeze_startup_objects


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


@pytest.fixture
def thawed() -> Iterator[None]:
    yield
    gc.unfreeze()  # this test process starts and stops many engines: nothing stays frozen


def test_what_lives_at_the_start_is_out_of_the_collectors_reach(thawed: None) -> None:
    alive = _Node()
    frozen = freeze_startup_objects()
    assert frozen >= 1 and gc.get_freeze_count() == frozen
    assert not any(o is alive for o in gc.get_objects())  # a full collection skips it
    later = _Node()
    assert any(o is later for o in gc.get_objects())  # what comes after is walked


def test_a_frozen_object_is_still_freed_with_its_last_reference(thawed: None) -> None:
    alive = _Node()
    gone = weakref.ref(alive)
    freeze_startup_objects()
    del alive
    assert gone() is None


def test_garbage_from_before_is_collected_not_frozen(thawed: None) -> None:
    cycle = _Node()
    cycle.other = _Node()
    cycle.other.other = cycle
    gone = weakref.ref(cycle)
    del cycle  # garbage only a collection finds
    freeze_startup_objects()
    assert gone() is None
