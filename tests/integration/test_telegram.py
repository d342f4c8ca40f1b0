"""The Telegram connector against a real engine and a local stand-in of the Bot API.

The connector talks to the stand-in through python-telegram-bot (``base_url``), and to the
engine over NATS like any connector. Its ChatStreamer runs on a ManualClock, so what is
held back by the throttle is decided by the test, not by timing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import wait_until
from tests.telegram_standin import TelegramStandIn
from tether.actors.chat.stream import CURSOR, final_messages
from tether.actors.middleware import MiddlewareSettings
from tether.actors.ports import ManualClock
from tether.adapters.fake_llm import FakeLLM
from tether.adapters.host import Host
from tether.adapters.nats_bus import NatsBus
from tether.adapters.telegram import (
    TelegramConnector,
    allowlist_problem,
    channel_for,
    chat_for,
    parse_chat,
)
from tether.events.codec import encode
from tether.events.messages import ChannelMessage, NoticeKind, ToolResultBlock
from tether.events.subjects import Subjects

ANA = 111
"""A user on the allowlist (her private chat has the same id)."""
MALLORY = 999
"""A user who is not."""
GROUP = -100777
ALLOW = MiddlewareSettings(allow={"telegram-*": [str(ANA)]})

TOOL_SCRIPT = """
responses:
  - match: "look around"
    chunk: 6
    delay_ms: 250
    blocks:
      - text: "Let me look at the workspace first."
      - tool_use: {name: list_dir, input: {path: "."}}
  - match: "notes.txt"
    blocks: [{text: "There is one file: notes.txt."}]
"""
TOOL_FINAL = "Let me look at the workspace first.\n\nThere is one file: notes.txt.\n\n🧰 list_dir"

APPROVAL_SCRIPT = """
responses:
  - match: "publish"
    blocks:
      - tool_use: {name: run_shell, input: {command: "git push origin main"}}
  - match: "exit code"
    blocks: [{text: "It ran."}]
"""


@pytest.fixture
def telegram() -> Iterator[TelegramStandIn]:
    with TelegramStandIn() as standin:
        yield standin


@pytest.fixture
def connect(telegram: TelegramStandIn) -> Iterator[Callable[..., TelegramConnector]]:
    """Start a connector on a bus connection of its own (stopped after the test)."""
    made: list[tuple[TelegramConnector, NatsBus]] = []

    def start(nats_url: str, namespace: str, **options: Any) -> TelegramConnector:
        bus = NatsBus(nats_url, name="telegram-test")
        options.setdefault("clock", ManualClock())
        connector = TelegramConnector(bus, Subjects(namespace), token=telegram.token,
                                      base_url=telegram.base_url, poll_timeout=5,
                                      tick_period=0.05, **options)
        made.append((connector, bus))
        return connector.start()

    yield start
    for connector, bus in made:
        connector.stop()
        bus.close()


def engine(make_host: Callable[..., Host], fake_llm: Callable[[str], FakeLLM],
           script: str, **settings: Any) -> Host:
    return make_host(fake_llm(script), middleware=ALLOW, **settings)


def wait_for_text(telegram: TelegramStandIn, chat_id: int, needle: str,
                  timeout: float = 15.0) -> str:
    found: list[str] = []

    def check() -> bool:
        found[:] = [t for t in telegram.texts(chat_id) if needle in t]
        return bool(found)

    wait_until(check, f"a message with {needle!r} in chat {chat_id}; "
                      f"has {telegram.texts(chat_id)}", timeout)
    return found[0]


def test_chat_ids_map_to_channel_tokens_and_back() -> None:
    assert channel_for(123) == "telegram-123"
    assert channel_for(-100123) == "telegram-m100123"
    assert channel_for(-5, "tg") == "tg-m5"
    for chat_id in (0, 7, 123456789, -1, -100123, -1001234567890):
        assert chat_for(channel_for(chat_id)) == chat_id
        Subjects().channel_out(channel_for(chat_id))  # one valid subject token
    assert chat_for("terminal-123") is None and chat_for("telegram-") is None
    assert chat_for("telegram-m") is None and chat_for("telegram-01") is None
    assert parse_chat("-100123") == parse_chat("m100123") == -100123
    assert parse_chat("x1") is None


def test_a_bot_without_an_allowlist_is_called_out() -> None:
    assert allowlist_problem(ALLOW) is None
    closed = MiddlewareSettings(allow={"telegram-m*": ["1"], "telegram-*": []})
    assert allowlist_problem(closed) is None
    problem = allowlist_problem(MiddlewareSettings())
    assert problem is not None and "every Telegram user" in problem
    only_groups = allowlist_problem(MiddlewareSettings(allow={"telegram-m*": ["1"]}))
    assert only_groups is not None and "matches telegram-1:" in only_groups


def test_a_reply_streams_into_one_message_then_ends_with_the_tool_summary(
    make_host: Callable[..., Host], fake_llm: Callable[[str], FakeLLM],
    connect: Callable[..., TelegramConnector], telegram: TelegramStandIn, workspace: Path,
) -> None:
    (workspace / "notes.txt").write_text("remember the milk\n")
    host = engine(make_host, fake_llm, TOOL_SCRIPT)
    clock = ManualClock()
    connector = connect(host.nats_url, host.settings.namespace, clock=clock)
    telegram.push_text(ANA, ANA, "look around please")

    wait_until(lambda: len(telegram.sent) == 1, "the reply's first message")
    first = telegram.sent[0]
    assert first.chat_id == ANA and first.text.endswith(CURSOR)
    # More text arrives while the clock stands still: the throttle holds it back...
    wait_until(lambda: connector.counts["stream"] >= 2, "a second stream notice")
    assert telegram.edits == []
    # ...until the throttle's time has passed: a tick shows it, still streaming.
    clock.advance(2)
    wait_until(lambda: any(e.text.endswith(CURSOR) for e in telegram.edits),
               f"an edit while streaming; edits {telegram.edits}")

    wait_until(lambda: telegram.texts(ANA) == [TOOL_FINAL],
               f"the final text; the chat shows {telegram.texts(ANA)}")
    paragraphs = "Let me look at the workspace first.\n\nThere is one file: notes.txt."
    assert final_messages(paragraphs, ["list_dir"]) == [TOOL_FINAL]
    assert len(telegram.sent) == 1  # one message, edited in place
    assert all(e.message_id == first.message_id for e in telegram.edits)
    assert CURSOR not in telegram.edits[-1].text
    assert connector.session_of(ANA)
    session = host.app.session(connector.session_of(ANA))
    assert session is not None and session.channel == "telegram-111"


def test_a_long_reply_continues_in_new_messages_split_by_the_rules(
    make_host: Callable[..., Host], fake_llm: Callable[[str], FakeLLM],
    connect: Callable[..., TelegramConnector], telegram: TelegramStandIn,
) -> None:
    lines = "\n".join(f"line {n:03}: " + " ".join(["lorem ipsum dolor"] * 6)
                      for n in range(1, 41))
    paragraph = " ".join(f"word{n}" for n in range(700))  # 4,500 characters, no newline
    text = lines + "\n" + paragraph
    assert len(text) > 2 * 4000
    script = json.dumps({"responses": [{"match": "long", "chunk": 500,
                                        "blocks": [{"text": text}]}]})
    host = engine(make_host, fake_llm, script)
    connect(host.nats_url, host.settings.namespace)
    telegram.push_text(ANA, ANA, "tell me something long")

    expected = final_messages(text, [])
    # Cut at the last newline within 4,000 characters, else the last space; the newline
    # or space cut at is dropped, nothing else.
    assert [len(m) for m in expected] == [3893, 825, 3993, 1495]
    assert text == "\n".join(expected[:3]) + " " + expected[3]
    wait_until(lambda: telegram.texts(ANA) == expected,
               f"{len(expected)} final messages; the chat shows "
               f"{[len(t) for t in telegram.texts(ANA)]} characters")
    assert telegram.sent[0].text.endswith(CURSOR)
    assert len(telegram.sent) == len(expected)
    shown = [m.text for m in telegram.sent] + [e.text for e in telegram.edits]
    assert all(len(t) <= 4000 for t in shown)


def test_an_unknown_user_is_refused_clearly_and_reaches_nothing(
    make_host: Callable[..., Host], fake_llm: Callable[[str], FakeLLM],
    connect: Callable[..., TelegramConnector], telegram: TelegramStandIn,
) -> None:
    host = engine(make_host, fake_llm, "responses:\n  - blocks: [{text: Hi there.}]\n")
    connector = connect(host.nats_url, host.settings.namespace)
    telegram.push_text(GROUP, MALLORY, "delete everything", first_name="Mallory")

    refusal = wait_for_text(telegram, GROUP, "Not sent")
    assert refusal == ("⛔ Not sent: user '999' is not allowed on telegram-m100777; ask an "
                       "operator to add you to the allowlist")
    # The engine also says it on the channel: the chat shows it once.
    wait_until(lambda: connector.counts["error"] >= 1, "the refusal notice")
    assert telegram.texts(GROUP) == [refusal]
    assert host.list_sessions() == []
    topics = [n.topic for n in host.app.recorder.select_notifications(start=1, limit=1000)]
    assert not any("UserMessage" in t for t in topics)
    assert any("Refused" in t for t in topics)

    telegram.push_text(GROUP, ANA, "hello")  # someone on the allowlist, same group
    wait_for_text(telegram, GROUP, "Hi there.")
    session = host.app.session(connector.session_of(GROUP))
    assert session is not None and session.channel == "telegram-m100777"


def test_an_approval_is_its_own_message_and_approve_runs_the_tool(
    make_host: Callable[..., Host], fake_llm: Callable[[str], FakeLLM],
    connect: Callable[..., TelegramConnector], telegram: TelegramStandIn,
) -> None:
    host = engine(make_host, fake_llm, APPROVAL_SCRIPT, approval_timeout=300.0)
    connector = connect(host.nats_url, host.settings.namespace)
    telegram.push_text(ANA, ANA, "please publish it")

    asked = wait_for_text(telegram, ANA, "may I run")
    assert asked.startswith("🔐 approval ") and "git push origin main" in asked
    match = re.search(r"approval (\w+): may I run", asked)
    assert match is not None
    # A command may name the bot, as Telegram groups write it.
    telegram.push_text(ANA, ANA, f"/approve@tether_test_bot {match[1]}")

    wait_until(lambda: "It ran." in telegram.texts(ANA),
               f"the final reply; the chat shows {telegram.texts(ANA)}")
    wait_for_text(telegram, ANA, "approved by 111")
    messages = telegram.messages(ANA)
    by_text = {m.text: m.message_id for m in messages}
    assert by_text["It ran."] > by_text[asked]  # the answer is below the question
    session = host.app.session(connector.session_of(ANA))
    assert session is not None
    result = next(b for t in session.history for b in t.content
                  if isinstance(b, ToolResultBlock))
    assert "exit code" in result.content  # it ran (git fails outside a repository)
    assert all(CURSOR not in m.text for m in messages)


def test_new_starts_a_new_session(
    make_host: Callable[..., Host], fake_llm: Callable[[str], FakeLLM],
    connect: Callable[..., TelegramConnector], telegram: TelegramStandIn,
) -> None:
    host = engine(make_host, fake_llm, "responses:\n" + "  - blocks: [{text: Noted.}]\n" * 3)
    connector = connect(host.nats_url, host.settings.namespace)
    telegram.push_text(ANA, ANA, "first thing")
    wait_until(lambda: connector.session_of(ANA) != "", "a session")
    first = connector.session_of(ANA)
    telegram.push_text(ANA, ANA, "second thing")
    wait_until(lambda: telegram.texts(ANA).count("Noted.") == 2, "two replies")
    assert connector.session_of(ANA) == first

    telegram.push_text(ANA, ANA, "/new")
    wait_for_text(telegram, ANA, "next message starts a new session")
    assert connector.session_of(ANA) == ""
    telegram.push_text(ANA, ANA, "/new third thing")
    wait_until(lambda: connector.session_of(ANA) not in ("", first), "another session")
    assert len(host.list_sessions()) == 2


@pytest.mark.filterwarnings("ignore:.*retry_after.*")  # the library's, on a 429
def test_repeated_notices_are_dropped_and_flood_control_is_waited_out(
    nats_url: str, namespace: str, connect: Callable[..., TelegramConnector],
    telegram: TelegramStandIn,
) -> None:
    connector = connect(nats_url, namespace)
    telegram.add_chat(GROUP)
    telegram.fail_next("sendMessage", 429, retry_after=1)
    bus = NatsBus(nats_url, name="router-stand-in")
    try:
        subject = Subjects(namespace).channel_out(channel_for(GROUP))
        notices: list[tuple[NoticeKind, int, str]] = [
            ("status", 5, "first"), ("status", 5, "first"), ("status", 3, "older"),
            ("reminder", 0, "still running"), ("status", 6, "second")]
        for kind, seq, text in notices:
            bus.publish(subject, encode(ChannelMessage(session_id="s1", kind=kind, text=text,
                                                       seq=seq)))
        # A route "telegram|<chat>" arrives on the bare prefix, naming the chat.
        bus.publish(Subjects(namespace).channel_out("telegram"), encode(ChannelMessage(
            session_id="s2", kind="waiting", text="s2: waiting for input", target="m100777")))
        bus.flush()
    finally:
        bus.close()
    wait_until(lambda: len(telegram.texts(GROUP)) == 4, f"4 messages; {telegram.texts(GROUP)}")
    assert telegram.texts(GROUP) == ["\u2139\ufe0f first", "⏰ still running",
                                     "\u2139\ufe0f second", "⏳ s2: waiting for input"]
    assert connector.counts["dropped"] == 2
    refused = [c for c in telegram.calls if c.method == "sendMessage" and c.status == 429]
    assert len(refused) == 1  # the first try; it was sent after the wait it asked for


def test_a_chat_that_cannot_edit_gets_only_the_final_messages(
    make_host: Callable[..., Host], fake_llm: Callable[[str], FakeLLM],
    connect: Callable[..., TelegramConnector], telegram: TelegramStandIn, workspace: Path,
) -> None:
    (workspace / "notes.txt").write_text("remember the milk\n")
    host = engine(make_host, fake_llm, TOOL_SCRIPT.replace("delay_ms: 250", "delay_ms: 0"))
    connect(host.nats_url, host.settings.namespace, can_edit=False)
    telegram.push_text(ANA, ANA, "look around please")
    wait_until(lambda: telegram.texts(ANA) == [TOOL_FINAL],
               f"the final text; the chat shows {telegram.texts(ANA)}")
    assert telegram.edits == [] and len(telegram.sent) == 1


def test_a_wrong_token_stops_the_start(nats_url: str, namespace: str,
                                       telegram: TelegramStandIn) -> None:
    from telegram.error import InvalidToken

    bus = NatsBus(nats_url, name="telegram-test")
    try:
        connector = TelegramConnector(bus, Subjects(namespace), token="1:wrong",
                                      base_url=telegram.base_url)
        with pytest.raises(InvalidToken):
            connector.start()
        assert not connector.loop.is_running()
        assert [c.method for c in telegram.calls] == ["getMe"]
    finally:
        bus.close()


def test_a_lone_surrogate_in_a_message_is_replaced_not_lost(
    make_host: Callable[..., Host], fake_llm: Callable[[str], FakeLLM],
    connect: Callable[..., TelegramConnector], telegram: TelegramStandIn,
) -> None:
    """Telegram's JSON may escape a lone surrogate, which no bus message can carry."""
    host = engine(make_host, fake_llm, "responses:\n  - blocks: [{text: Noted.}]\n")
    connector = connect(host.nats_url, host.settings.namespace)
    telegram.push_text(ANA, ANA, "hello \ud800 there")
    wait_until(lambda: telegram.texts(ANA).count("Noted.") == 1, "the reply")
    session = host.app.session(connector.session_of(ANA))
    assert session is not None and session.history[0].content[0].text == "hello \ufffd there"
