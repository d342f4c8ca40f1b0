"""Bad input on every actor's subject is dead-lettered, answered when asked, and harmless.

Each actor of a running host (session manager on the inbox and manager subjects, the
gatekeeper, a live session, its TTSR monitor, the notification router) gets non-JSON bytes,
a message of its own type with wrong field types, an unknown ``type`` tag and a huge
payload. Every one must produce exactly one DeadLetter per subscriber on
``<ns>.deadletter`` whose reason names the problem, requests must get an ``ErrorReply``,
and afterwards every actor must still do its work.
"""

from __future__ import annotations

import os
import queue
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.conftest import ChannelWatcher
from tests.helpers import say
from tether.actors.gatekeeper.deny_lists import action_hash
from tether.actors.runtime import ask
from tether.adapters.anthropic_provider import AnthropicProvider
from tether.adapters.config import Settings
from tether.adapters.fake_llm import FakeLLM
from tether.adapters.host import Host
from tether.adapters.nats_server import EmbeddedNats, find_nats_server
from tether.events.codec import MAX_PAYLOAD, Decoder
from tether.events.messages import (
    DeadLetter,
    ErrorReply,
    ListSessions,
    SessionList,
    ToolProposal,
    Verdict,
)

SCRIPT = """
responses:
  - match: "first"
    blocks:
      - text: "First answer."
  - match: "second"
    blocks:
      - text: "Second answer, after the garbage."
"""

NOT_JSON = b"\xff\xfe this is not json {"
UNKNOWN_TAG = b'{"type": "no_such_message", "text": "hi"}'




class DeadLetters:
    """Collects what arrives on ``<ns>.deadletter``."""

    def __init__(self, host: Host) -> None:
        self.received: queue.Queue[DeadLetter] = queue.Queue()
        decoder: Decoder[DeadLetter] = Decoder(DeadLetter)
        self._sub = host.bus.subscribe(
            host.subjects.deadletter, lambda m: self.received.put(decoder.decode(m.data))
        )

    def take(self, count: int, timeout: float = 15.0) -> list[DeadLetter]:
        out: list[DeadLetter] = []
        deadline = time.monotonic() + timeout
        while len(out) < count:
            remaining = deadline - time.monotonic()
            try:
                out.append(self.received.get(timeout=max(0.01, remaining)))
            except queue.Empty:
                raise AssertionError(
                    f"{len(out)} of {count} dead letters arrived: "
                    f"{[(d.subject, d.reason) for d in out]}"
                ) from None
        return out

    def close(self) -> None:
        self._sub.close()


def _request_error(host: Host, subject: str, payload: bytes) -> ErrorReply:
    data = host.bus.request_sync(subject, payload, timeout=10)
    answer = msgspec.json.decode(data, type=ErrorReply)
    assert answer.error == "bad_request"
    return answer


def test_garbage_on_every_subject_is_dead_lettered_and_actors_carry_on(
    database_url: str,
    fake_llm: Callable[[str], FakeLLM],
    make_host: Callable[..., Host],
    watch_channel: Callable[..., Any],
    workspace: Path,
) -> None:
    """The huge payload here is exactly ``MAX_PAYLOAD`` (1 MiB) of non-JSON bytes: the
    shared server's ``max_payload`` is also 1 MiB, so nothing larger can be published on
    it (the client refuses). It is dead-lettered as invalid JSON with its full size and a
    bounded excerpt. The size limit itself (a payload over ``MAX_PAYLOAD``) is tested
    below on a server of this test's own whose ``max_payload`` is 2 MiB."""
    llm = fake_llm(SCRIPT)
    host = make_host(llm, database_url=database_url)
    channel = watch_channel(host, "test")
    letters = DeadLetters(host)
    try:
        sid = say(host, "the first message")
        channel.wait_for("completed")
        s = host.subjects
        ns = s.namespace

        # (subject, payload, subscribers on that subject, words the reason must contain)
        wrong_types: dict[str, bytes] = {
            s.inbox: b'{"type": "user_message", "text": 123, "channel": "test"}',
            s.manager: b'{"type": "kill_session", "session_id": 42}',
            s.gatekeeper: (
                b'{"type": "tool_proposal", "session_id": "x", "call_id": 7, "tool": "t",'
                b' "input": {}, "workspace": "/", "action_hash": "h"}'
            ),
            s.session(sid): (
                b'{"type": "interrupt", "session_id": "%s", "generation": "one",'
                b' "rules": [], "reminder": ""}' % sid.encode()
            ),
            s.ttsr(sid): (
                b'{"type": "barrier_check", "session_id": "%s", "generation": 1,'
                b' "seq": "ten"}' % sid.encode()
            ),
            # (The sessions' streams are not listened to on the bus: test_forged_stream.py.)
            # The router's own subject (watch requests).
            s.router: b'{"type": "watch_session", "session_id": 5, "channel": "c"}',
        }
        subscribers = {subject: 1 for subject in wrong_types}
        wrong_type_words = {
            s.inbox: ["Expected `str`, got `int`", "$.text"],
            s.manager: ["Expected `str`, got `int`", "$.session_id"],
            s.gatekeeper: ["Expected `str`, got `int`", "$.call_id"],
            s.session(sid): ["Expected `int`, got `str`", "$.generation"],
            s.ttsr(sid): ["Expected `int`, got `str`", "$.seq"],
            s.router: ["Expected `str`, got `int`", "$.session_id"],
        }
        huge = b"\x00" * MAX_PAYLOAD

        expected: list[tuple[str, str, list[str]]] = []  # (subject, kind, reason words)
        for subject, bad_types in wrong_types.items():
            cases: list[tuple[str, bytes, list[str]]] = [
                ("not-json", NOT_JSON, ["not valid JSON"]),
                ("wrong-types", bad_types, ["invalid message", *wrong_type_words[subject]]),
                ("unknown-tag", UNKNOWN_TAG, ["invalid message"]),
                ("huge", huge, ["not valid JSON"]),
            ]
            for kind, payload, words in cases:
                if subject.startswith(f"{ns}.evt."):
                    # Relayed-event subjects belong to the JetStream stream too: a request
                    # there is answered by JetStream's PubAck, so only publish.
                    host.bus.publish(subject, payload)
                else:
                    # Requests get a typed error naming the problem...
                    error = _request_error(host, subject, payload)
                    for word in words:
                        assert word in error.reason, (subject, kind, error.reason)
                # ...and a plain publish (no reply subject) is dead-lettered just the same.
                host.bus.publish(subject, payload)
                expected.extend([(subject, kind, words)] * (2 * subscribers[subject]))

        letters_got = letters.take(len(expected))
        # Exactly one per garbage message and subscriber: the system counted no more.
        assert host.system.deadletters == len(expected)

        by_subject: dict[str, list[DeadLetter]] = {}
        for letter in letters_got:
            by_subject.setdefault(letter.subject, []).append(letter)
        assert set(by_subject) == set(wrong_types)
        for subject, got in by_subject.items():
            want = [e for e in expected if e[0] == subject]
            assert len(got) == len(want), subject
            for _, kind, words in want:
                match = [d for d in got if all(w in d.reason for w in words)]
                assert match, (subject, kind, [d.reason for d in got])
            unknown = [d for d in got if "no_such_message" in d.payload]
            assert len(unknown) == 2 * subscribers[subject]
            assert all(
                "no_such_message" in d.reason or "$.type" in d.reason for d in unknown
            ), [d.reason for d in unknown]
            big = [d for d in got if d.size == MAX_PAYLOAD]
            assert len(big) == 2 * subscribers[subject]
            assert all(len(d.payload) <= 512 for d in big)

        # Every actor still answers.
        listed = ask(host.bus, s.manager, ListSessions(), SessionList, timeout=10)
        assert sid in [row.session_id for row in listed.sessions]
        tool_input = {"path": "README.md"}
        verdict = ask(
            host.bus,
            s.gatekeeper,
            ToolProposal(
                session_id=sid,
                call_id="call-after-garbage",
                tool="read_file",
                input=tool_input,
                workspace=str(workspace),
                action_hash=action_hash("read_file", tool_input),
            ),
            Verdict,
            timeout=10,
        )
        assert verdict.call_id == "call-after-garbage" and verdict.decision == "allow"
        assert say(host, "the second message", sid) == sid
        done = channel.wait_for("completed")
        assert done.session_id == sid
        replies = [m.text for m in channel.seen if m.kind == "reply"]
        assert replies[-1] == "Second answer, after the garbage."
        session = host.app.session(sid)
        assert session is not None
        assert session.turns == 2 and session.status == "running" and session.failures == 0
        assert host.system.failures == 0
    finally:
        letters.close()


@pytest.fixture
def big_payload_nats(tmp_path: Path) -> Any:
    """A NATS server of this test's own that accepts payloads up to 2 MiB.

    ``EmbeddedNats`` has no option for ``max_payload``; a wrapper script passed as its
    binary adds a config file that sets it (command-line options still apply)."""
    real = find_nats_server()
    conf = tmp_path / "big.conf"
    conf.write_text("max_payload: 2MB\n")
    wrapper = tmp_path / "nats-server-big"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "--version" ] || [ "$1" = "-v" ]; then exec "{real}" "$@"; fi\n'
        f'exec "{real}" -c "{conf}" "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    server = EmbeddedNats(tmp_path / "nats-big", binary=os.fspath(wrapper)).start()
    try:
        yield server
    finally:
        server.stop()


def test_payload_over_the_limit_is_dead_lettered_unread(
    big_payload_nats: EmbeddedNats,
    fake_llm: Callable[[str], FakeLLM],
    make_settings: Callable[..., Settings],
) -> None:
    """A well-formed UserMessage one byte over ``MAX_PAYLOAD`` is refused by size (not
    parsed), on a server that lets it through; the inbox still works afterwards."""
    llm = fake_llm(SCRIPT)
    settings = make_settings(
        nats_url=big_payload_nats.url, anthropic_base_url=llm.base_url
    )
    host = Host(settings, provider=AnthropicProvider(api_key=None, base_url=llm.base_url))
    host.start()
    try:
        assert host.bus.nc.max_payload > MAX_PAYLOAD
        letters = DeadLetters(host)
        prefix = b'{"type": "user_message", "channel": "test", "text": "'
        suffix = b'"}'
        body = b"a" * (MAX_PAYLOAD + 1 - len(prefix) - len(suffix))
        payload = prefix + body + suffix
        assert len(payload) == MAX_PAYLOAD + 1

        error = _request_error(host, host.subjects.inbox, payload)
        assert f"payload of {MAX_PAYLOAD + 1} bytes exceeds {MAX_PAYLOAD}" in error.reason
        (letter,) = letters.take(1)
        assert letter.subject == host.subjects.inbox
        assert "exceeds" in letter.reason and letter.size == MAX_PAYLOAD + 1
        assert len(letter.payload) <= 512
        assert host.app.max_notification_id() == 0  # no session was started from it

        channel = ChannelWatcher(host.bus, host.subjects.channel_out("test"))
        try:
            sid = say(host, "the first message")
            assert channel.wait_for("completed").session_id == sid
        finally:
            channel.close()
        replies = [m.text for m in channel.seen if m.kind == "reply"]
        assert replies == ["First answer."]
        letters.close()
    finally:
        host.stop()
