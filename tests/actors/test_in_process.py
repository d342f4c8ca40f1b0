"""In-process delivery between the actors of one process (actors/in_process.py), on a
real NATS connection: what is told and asked in process, what still goes on the bus, and
what an outsider on the bus can still reach."""

from __future__ import annotations

import queue
import uuid
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from tether.actors.in_process import LocalRoute, LocalRoutes, matches
from tether.actors.runtime import (
    ActorSystem,
    AskResult,
    Binding,
    Envelope,
    TetherActor,
    ask,
)
from tether.adapters.nats_bus import NatsBus
from tether.events.codec import Decoder, encode
from tether.events.subjects import Subjects


class Ping(msgspec.Struct, tag="ping"):
    text: str


class Pong(msgspec.Struct, tag="pong"):
    text: str


class Responder(TetherActor):
    """Answers a Ping with a Pong (``silent``: never; ``only``: only a Ping with that
    text); keeps what it got."""

    def __init__(self, system: ActorSystem, got: queue.Queue[Any], silent: bool = False,
                 answer: Any = None, only: str | None = None) -> None:
        super().__init__(system)
        self.got, self.silent, self.answer, self.only = got, silent, answer, only

    def handle(self, message: Any, envelope: Envelope | None) -> None:
        self.got.put((message, envelope))
        if self.silent or envelope is None or self.only not in (None, message.text):
            return
        self.reply(envelope, self.answer or Pong(text=f"re: {message.text}"))


class Asker(TetherActor):
    """Asks or tells what it is told to; its answers go to ``answers``."""

    def __init__(self, system: ActorSystem, answers: queue.Queue[Any]) -> None:
        super().__init__(system)
        self.answers = answers

    def handle(self, message: Any, envelope: Envelope | None) -> None:
        if isinstance(message, AskResult):
            self.answers.put(message)
        elif isinstance(message, tuple) and message[0] == "ask":
            _, subject, timeout = message
            self.ask_async(subject, Ping(text="hello"), Pong, tag="t", timeout=timeout)
        elif isinstance(message, tuple) and message[0] == "tell":
            self.send(message[1], Ping(text="news"))


@pytest.fixture
def bus(nats_url: str) -> Iterator[NatsBus]:
    connection = NatsBus(nats_url)
    yield connection
    connection.close()


@pytest.fixture
def system(bus: NatsBus) -> Iterator[ActorSystem]:
    actors = ActorSystem(bus, Subjects(f"t{uuid.uuid4().hex[:10]}"))
    yield actors
    actors.stop_all()


def observe(bus: NatsBus, subject: str) -> tuple[queue.Queue[Any], Any]:
    seen: queue.Queue[Any] = queue.Queue()
    decoder: Decoder[Any] = Decoder(Ping | Pong)
    return seen, bus.subscribe(subject, lambda m: seen.put(decoder.decode(m.data)))


def subject(system: ActorSystem, name: str) -> str:
    return f"{system.subjects.namespace}.{name}"


def test_subjects_match_as_nats_matches_them() -> None:
    assert matches("t.session.*.stream", "t.session.abc.stream")
    assert not matches("t.session.*.stream", "t.session.abc.events")
    assert not matches("t.session.*.stream", "t.session.stream")
    assert matches("t.>", "t.a.b") and not matches("t.>", "t")
    assert matches("t.a", "t.a") and not matches("t.a", "t.a.b")
    routes = LocalRoutes()
    remove = routes.add(LocalRoute("t.session.*.stream", "router", on_bus=False))
    routes.add(LocalRoute("t.session.x.stream", "monitor", on_bus=False))
    assert [r.ref for r in routes.to("t.session.x.stream")] == ["monitor", "router"]
    remove()
    assert [r.ref for r in routes.to("t.session.x.stream")] == ["monitor"]


def test_an_actor_asks_another_in_process_and_the_bus_carries_nothing(
        bus: NatsBus, system: ActorSystem) -> None:
    there = subject(system, "responder")
    got: queue.Queue[Any] = queue.Queue()
    answers: queue.Queue[Any] = queue.Queue()
    system.start(Responder, [Binding(there, Ping, reach="both")], got=got)
    asker = system.start(Asker, [], answers=answers)
    seen, sub = observe(bus, there)
    asker.tell(("ask", there, 5.0))
    result = answers.get(timeout=5)
    assert result == AskResult("t", Pong(text="re: hello"))
    # An outsider still reaches it over the bus, and that is all the bus carried.
    assert ask(bus, there, Ping(text="outside"), Pong) == Pong(text="re: outside")
    bus.flush()
    assert seen.get(timeout=5) == Ping(text="outside")
    assert seen.empty()
    sub.close()


def test_a_subject_taken_in_process_only_is_published_for_observers_not_read_from_the_bus(
        bus: NatsBus, system: ActorSystem) -> None:
    stream = subject(system, "session.s1.stream")
    got: queue.Queue[Any] = queue.Queue()
    system.start(Responder, [Binding(subject(system, "session.*.stream"), Ping,
                                     reach="process")], got=got, silent=True)
    sender = system.start(Asker, [], answers=queue.Queue())
    seen, sub = observe(bus, stream)
    sender.tell(("tell", stream))
    assert seen.get(timeout=5) == Ping(text="news")  # observers have it
    message, _ = got.get(timeout=5)
    assert message == Ping(text="news")
    bus.publish(stream, encode(Ping(text="forged")))  # an outsider's
    bus.flush()
    assert seen.get(timeout=5) == Ping(text="forged")
    sender.tell(("tell", stream))  # after the forged one, on the same bus
    assert got.get(timeout=5)[0] == Ping(text="news")
    assert got.empty()  # once each, and never the outsider's
    sub.close()


def test_an_ask_in_process_that_is_never_answered_ends_in_its_timeout(
        system: ActorSystem) -> None:
    there = subject(system, "silent")
    answers: queue.Queue[Any] = queue.Queue()
    system.start(Responder, [Binding(there, Ping, reach="both")], got=queue.Queue(),
                 silent=True)
    asker = system.start(Asker, [], answers=answers)
    asker.tell(("ask", there, 0.2))
    result = answers.get(timeout=5)
    assert result.message is None
    assert result.error == f"no reply from {there} within 0.2 s"


def test_an_answer_of_another_type_is_an_error_as_over_the_bus(system: ActorSystem) -> None:
    there = subject(system, "odd")
    answers: queue.Queue[Any] = queue.Queue()
    system.start(Responder, [Binding(there, Ping, reach="both")], got=queue.Queue(),
                 answer=Ping(text="not a pong"))
    asker = system.start(Asker, [], answers=answers)
    asker.tell(("ask", there, 5.0))
    result = answers.get(timeout=5)
    assert result.message is None and "not what was asked for" in result.error


def test_once_the_actor_stops_its_subject_goes_to_the_bus_again(
        bus: NatsBus, system: ActorSystem) -> None:
    there = subject(system, "gone")
    handle = system.start(Responder, [Binding(there, Ping, reach="both")],
                          got=queue.Queue())
    sender = system.start(Asker, [], answers=queue.Queue())
    seen, sub = observe(bus, there)
    handle.stop()
    sender.tell(("tell", there))
    assert seen.get(timeout=5) == Ping(text="news")
    sub.close()


def test_a_reply_address_from_the_bus_is_never_taken_for_an_ask_made_in_process(
        bus: NatsBus, system: ActorSystem) -> None:
    """An outsider who names a waiting in-process ask's address as the reply of its own
    request cannot answer that ask with the actor's answer to itself (a barrier cleared
    by someone else's check): the address goes out on the bus, to nobody."""
    there = subject(system, "guarded")
    answers: queue.Queue[Any] = queue.Queue()
    got: queue.Queue[Any] = queue.Queue()
    system.start(Responder, [Binding(there, Ping, reach="both")], got=got, only="outside")
    asker = system.start(Asker, [], answers=answers)
    asker.tell(("ask", there, 1.0))
    assert got.get(timeout=5)[0] == Ping(text="hello")  # the ask waits: no answer to it
    waiting = f"_LOCAL.{system.process}.1"
    bus.publish(there, encode(Ping(text="outside")), reply=waiting)
    _, envelope = got.get(timeout=5)
    assert envelope.reply == waiting and not envelope.asked_here
    result = answers.get(timeout=5)
    assert result.message is None and "no reply" in result.error
