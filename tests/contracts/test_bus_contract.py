"""The bus port (:class:`actors.ports.Bus`), as every implementation must keep it.

:class:`BusContract` is abstract (pytest does not collect it); :class:`TestNatsBus` runs it
on nats-py against the real server, each test in its own subject space.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import uuid
from collections.abc import Iterator

import pytest

from tether.actors.ports import Bus, BusError, Inbound, RequestTimeout
from tether.adapters.nats_bus import NatsBus


class BusContract:
    """Delivery, queue groups, request/reply with timeouts, and the loop the callbacks and
    coroutines run on."""

    @pytest.fixture
    def bus(self) -> Bus:
        raise NotImplementedError

    @pytest.fixture
    def subject(self) -> str:
        return f"contract.{uuid.uuid4().hex[:10]}"

    def test_what_one_thread_publishes_arrives_in_order_with_headers(
            self, bus: Bus, subject: str) -> None:
        got: queue.Queue[Inbound] = queue.Queue()
        bus.subscribe(subject, got.put)
        for i in range(20):
            bus.publish(subject, str(i).encode(), headers={"n": str(i)})
        received = [got.get(timeout=5) for _ in range(20)]
        assert [m.data for m in received] == [str(i).encode() for i in range(20)]
        assert received[7].headers is not None and received[7].headers.get("n") == "7"

    def test_a_queue_group_hands_each_message_to_one_member(
            self, bus: Bus, subject: str) -> None:
        got: queue.Queue[tuple[str, bytes]] = queue.Queue()
        for member in ("a", "b"):
            bus.subscribe(subject, lambda m, who=member: got.put((who, m.data)), queue="g")
        for i in range(30):
            bus.publish(subject, str(i).encode())
        received = [got.get(timeout=5) for _ in range(30)]
        assert sorted(int(d) for _, d in received) == list(range(30))
        with pytest.raises(queue.Empty):
            got.get(timeout=0.3)  # nobody got one twice

    def test_a_closed_subscription_receives_nothing_more(self, bus: Bus, subject: str) -> None:
        got: queue.Queue[bytes] = queue.Queue()
        subscription = bus.subscribe(subject, lambda m: got.put(m.data))
        bus.publish(subject, b"before")
        assert got.get(timeout=5) == b"before"
        subscription.close()
        bus.publish(subject, b"after")
        with pytest.raises(queue.Empty):
            got.get(timeout=0.3)

    def test_a_request_is_answered_on_its_reply_subject(self, bus: Bus, subject: str) -> None:
        bus.subscribe(subject, lambda m: bus.publish(m.reply, m.data.upper()))
        assert bus.request_sync(subject, b"ping", timeout=5) == b"PING"
        answered: queue.Queue[tuple[bytes | None, str]] = queue.Queue()
        bus.request(subject, b"pong", 5, lambda data, error: answered.put((data, error)))
        assert answered.get(timeout=5) == (b"PONG", "")

    def test_a_request_nobody_answers_fails_in_time(self, bus: Bus, subject: str) -> None:
        with pytest.raises(BusError, match="nobody is listening"):  # no subscriber at all
            bus.request_sync(subject, b"anyone?", timeout=0.3)
        bus.subscribe(subject, lambda m: None)  # one that never answers
        with pytest.raises(RequestTimeout):
            bus.request_sync(subject, b"anyone?", timeout=0.3)
        answered: queue.Queue[tuple[bytes | None, str]] = queue.Queue()
        bus.request(subject, b"anyone?", 0.3, lambda data, error: answered.put((data, error)))
        data, error = answered.get(timeout=5)
        assert data is None and error

    def test_coroutines_run_on_the_loop_and_can_be_cancelled(self, bus: Bus) -> None:
        async def answer() -> int:
            return 42

        assert bus.call(answer) == 42
        started = threading.Event()

        async def forever() -> None:
            started.set()
            await asyncio.sleep(3600)

        future = bus.spawn(forever)
        assert started.wait(5)
        future.cancel()
        assert future.cancelled() or future.done()


class TestNatsBus(BusContract):
    @pytest.fixture
    def bus(self, nats_url: str) -> Iterator[Bus]:
        nats = NatsBus(nats_url)
        yield nats
        nats.close()
