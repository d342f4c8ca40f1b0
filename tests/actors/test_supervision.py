"""Supervision: a handler that raises is restarted from its stored events, the failure is
recorded, and nothing queued behind it is lost."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from tests.conftest import ChannelWatcher
from tests.helpers import say
from tether.actors.ports import Grant, ToolOutput
from tether.actors.runtime import ActorSystem, Binding, Envelope, TetherActor
from tether.adapters.anthropic_provider import AnthropicProvider
from tether.adapters.config import Settings
from tether.adapters.fake_llm import FakeLLM
from tether.adapters.host import Host
from tether.adapters.nats_bus import NatsBus
from tether.adapters.tools import BuiltinTools
from tether.events.messages import Message
from tether.events.sandbox import SandboxProfile
from tether.events.subjects import Subjects

SCRIPT = """
responses:
  - match: "second"
    blocks:
      - text: "All good now."
"""


class FlakyTools:
    """Built-in tools whose ``definitions()`` raises once, the ``fail_on``-th time it is
    called (inside the session actor's handler, when a model call is being prepared)."""

    def __init__(self, fail_on: int = 1) -> None:
        self._inner = BuiltinTools(timeout=10, env={})
        self._calls = 0
        self._fail_on = fail_on
        self._lock = threading.Lock()

    def definitions(self, groups: Iterable[str] | None = None) -> list[dict[str, Any]]:
        with self._lock:
            self._calls += 1
            if self._calls == self._fail_on:
                raise RuntimeError("tool registry unavailable")
        return self._inner.definitions(groups)

    def groups(self) -> dict[str, str]:
        return self._inner.groups()

    def group_of(self, tool: str) -> str | None:
        return self._inner.group_of(tool)

    def sandbox_profile(self, name: str, grant: Grant) -> SandboxProfile | None:
        return self._inner.sandbox_profile(name, grant)

    def execute(
        self, name: str, tool_input: dict[str, Any], workspace: str, grant: Grant | None = None
    ) -> ToolOutput:
        return self._inner.execute(name, tool_input, workspace, grant)




TOOL_SCRIPT = """
responses:
  - blocks: [{tool_use: {name: read_file, input: {path: notes.txt}}}]
"""


def test_a_failure_after_a_call_ran_keeps_its_result_and_counts_the_turn_s_cost(
    database_url: str,
    make_settings: Callable[..., Settings],
    fake_llm: Callable[[str], FakeLLM],
    workspace: Path,
) -> None:
    (workspace / "notes.txt").write_text("ship on Friday\n")
    llm = fake_llm(TOOL_SCRIPT)
    settings = make_settings(database_url=database_url, anthropic_base_url=llm.base_url)
    # The first model call is prepared (definitions #1); the second, after read_file ran,
    # is not: the handler raises there and the actor restarts.
    host = Host(settings, provider=AnthropicProvider(api_key=None, base_url=llm.base_url),
                tools=FlakyTools(fail_on=2))
    host.start()
    channel = ChannelWatcher(host.bus, host.subjects.channel_out("test"))
    try:
        sid = say(host, "what do the notes say?")
        failed = channel.wait_for("failed")
        assert failed.session_id == sid and "restart" in failed.text
        events = host.app.session_events(sid)
        names = [type(e).__name__ for e in events]
        # The call ran: its result was saved before the next call was prepared.
        assert "ToolCallExecuted" in names and "ToolCallInterrupted" not in names
        (turn_failed,) = [e for e in events if type(e).__name__ == "TurnFailed"]
        # The model call before the failure is paid for, and the budget sees it.
        assert turn_failed.cost_usd > 0
        session = host.app.session(sid)
        assert session is not None and session.cost_usd == pytest.approx(turn_failed.cost_usd)
    finally:
        channel.close()
        host.stop()


def test_a_failing_session_handler_is_recorded_and_the_session_recovers(
    database_url: str,
    make_settings: Callable[..., Settings],
    fake_llm: Callable[[str], FakeLLM],
    workspace: Path,
) -> None:
    llm = fake_llm(SCRIPT)
    settings = make_settings(database_url=database_url, anthropic_base_url=llm.base_url)
    host = Host(
        settings,
        provider=AnthropicProvider(api_key=None, base_url=llm.base_url),
        tools=FlakyTools(),
    )
    host.start()
    channel = ChannelWatcher(host.bus, host.subjects.channel_out("test"))
    try:
        sid = say(host, "the first message")
        # The handler raised: the turn it was running is reported as failed...
        failed = channel.wait_for("failed")
        assert failed.session_id == sid and "restart" in failed.text
        assert host.system.failures == 1
        session = host.app.session(sid)
        assert session is not None
        assert session.failures == 1 and session.status == "running" and session.waiting
        names = [type(e).__name__ for e in host.app.session_events(sid)]
        assert "ActorFailed" in names and "TurnFailed" in names
        (actor_failed,) = [
            e for e in host.app.session_events(sid) if type(e).__name__ == "ActorFailed"
        ]
        assert actor_failed.error == "RuntimeError: tool registry unavailable"
        assert llm.requests == []  # the model was never called for the failed turn

        # ...and the restarted actor serves the next message to completion.
        assert say(host, "the second message", sid) == sid
        done = channel.wait_for("completed")
        assert done.session_id == sid
        assert [m.text for m in channel.seen if m.kind == "reply"] == ["All good now."]
        session = host.app.session(sid)
        assert session is not None
        assert session.turns == 2 and session.status == "running" and session.waiting
        # The conversation the model saw kept the first message (rebuilt from events).
        user_texts = str(llm.requests[-1]["messages"])
        assert "the first message" in user_texts and "the second message" in user_texts
        assert host.system.failures == 1
    finally:
        channel.close()
        host.stop()


class Note(Message):
    """A test message for the custom actor."""

    text: str


class Recorder(TetherActor):
    """Processes Notes; ``boom`` waits for ``release`` and then raises."""

    def __init__(
        self,
        system: ActorSystem,
        *,
        seen: queue.Queue[str],
        release: threading.Event,
        log: list[str],
    ) -> None:
        super().__init__(system)
        self.seen = seen
        self.release = release
        self.log = log

    def recover(self) -> None:
        self.log.append("recover")

    def on_failure_recorded(self, error: str) -> None:
        self.log.append(f"failed: {error}")

    def handle(self, message: Any, envelope: Envelope | None) -> None:
        assert isinstance(message, Note)
        if message.text == "boom":
            self.release.wait(timeout=30)
            raise ValueError("boom")
        self.seen.put(message.text)


@pytest.fixture
def system(nats_url: str, namespace: str) -> Iterator[ActorSystem]:
    bus = NatsBus(nats_url, name="test-supervision")
    actors = ActorSystem(bus, Subjects(namespace))
    try:
        yield actors
    finally:
        actors.stop_all()
        bus.close()


def test_messages_queued_behind_a_failing_one_are_all_processed(system: ActorSystem) -> None:
    seen: queue.Queue[str] = queue.Queue()
    release = threading.Event()
    log: list[str] = []
    subject = f"{system.subjects.namespace}.recorder"
    handle = system.start(
        Recorder, [Binding(subject, Note)], seen=seen, release=release, log=log
    )
    try:
        for text in ["a", "boom", "b", "c", "d"]:
            system.tell(subject, Note(text=text))
        assert seen.get(timeout=10) == "a"
        # Wait until the three later notes sit in the actor's inbox behind "boom".
        deadline = time.monotonic() + 10
        while cast("queue.Queue[Any]", handle.ref.actor_inbox).qsize() < 3:
            assert time.monotonic() < deadline, "the notes never queued behind boom"
            time.sleep(0.01)
        release.set()
        after = [seen.get(timeout=10) for _ in range(3)]
        assert after == ["b", "c", "d"]
        assert log == ["recover", "failed: ValueError: boom", "recover"]
        assert system.failures == 1
        assert handle.ref.is_alive()
        # It still takes new messages after the restart.
        system.tell(subject, Note(text="e"))
        assert seen.get(timeout=10) == "e"
    finally:
        release.set()
