"""No input breaks the way in: 20,000 malformed payloads on every subject of a running engine.

A host runs with a live session (so its session, TTSR and stream subjects exist). An
outside client, on a NATS connection of its own, sends 20,000 payloads spread over every
subject the engine listens on, half as requests (each with a reply subject of its own)
and half as plain publishes: invalid UTF-8 inside strings, in fields a decoder would skip
and between tokens, escaped lone surrogates, nesting 1,000 and 100,000 deep (closed or
not), wrong field types, JSON that is not an object, unknown tags, truncated messages,
empty payloads, payloads near the server's maximum and random bytes (all from a seeded
RNG). Every one must be refused by the subject's decoder, which the test checks first.

What the engine must do with each: publish one DeadLetter with a reason on
``<ns>.deadletter`` per subscriber of the subject (matched by subject, size and excerpt)
and, for a request, answer with an ErrorReply. A payload with neither is lost; lost must
be 0. Afterwards every actor still answers, and a real turn completes with the model
stand-in. The figures are printed (``-s``) and recorded as properties of the test.

A second test sends a header block that is not UTF-8, which used to deafen the engine.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import nats
import pytest

from tests.helpers import say
from tether.actors.gatekeeper.deny_lists import action_hash
from tether.actors.ports import BusError
from tether.actors.runtime import RemoteError, ask
from tether.adapters.fake_llm import FakeLLM
from tether.adapters.host import Host
from tether.adapters.nats_auth import engine_auth, read_credentials
from tether.events.codec import DecodeFailure, Decoder, encode
from tether.events.messages import (
    BarrierCheck,
    BarrierResult,
    ChatText,
    DeadLetter,
    ErrorReply,
    InteractionMessage,
    InteractionOpened,
    ListSessions,
    ManagerMessage,
    QuestionRequest,
    SessionList,
    SessionMessage,
    ToolProposal,
    TreeQuery,
    TreeView,
    UserMessage,
    Verdict,
    Watching,
    WatchSession,
)

SCRIPT = """
responses:
  - match: "before the storm"
    blocks: [{text: "Calm so far."}]
  - match: "after the storm"
    blocks: [{text: "Still standing."}]
"""

TOTAL = 20_000
SEED = 20_013
WINDOW_LETTERS = 2_000
"""Dead letters the test lets be outstanding before it sends more (the engine's pace)."""
WINDOW_BYTES = 8 * 1024 * 1024
"""Bytes (times subscribers) the test lets be outstanding before it sends more."""
BATCH = 500
"""Payloads between two flushes of the client's connection."""

KINDS: dict[str, int] = {
    "utf8_in_string": 2_400,
    "utf8_in_skipped_field": 1_500,
    "utf8_outside_strings": 2_000,
    "lone_surrogate_escape": 500,
    "deep_1000": 2_000,
    "deep_100000": 100,
    "deep_unclosed": 300,
    "wrong_types": 3_000,
    "not_an_object": 500,
    "unknown_tag": 2_000,
    "truncated": 1_500,
    "empty": 500,
    "huge": 60,
}
KINDS["random_bytes"] = TOTAL - sum(KINDS.values())

BAD_UTF8 = [
    b"\xff", b"\xfe\xff", b"\x80", b"\xbf\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xe2\x82",
    b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xc3",
    b"caf\xe9", b"\xe0\x80\xaf",
]
LONE_SURROGATES = [b"\\ud800", b"\\udfff", b"\\ud800\\u0041", b"\\udc00\\ud800", b"x\\udbff"]
MARK = "@@BAD@@"
FOREIGN_TAGS = ["verdict", "dead_letter", "error_reply", "accepted", "channel_message",
                "barrier_result", "tree_view", "watching", "session_list", ""]
_PRINTABLE = bytes.maketrans(bytes(range(256)), bytes(32 + b % 95 for b in range(256)))


@dataclass(frozen=True)
class Target:
    """A subject the engine listens on: what it accepts, how many actors listen, and a
    valid message to mutate."""

    subject: str
    accepts: Any
    subscribers: int
    base: Any


@dataclass
class Sent:
    """One payload sent: where, whether as a request, and what came back."""

    index: int
    kind: str
    target: Target
    payload: bytes
    request: bool
    replies: int = 0


def _targets(host: Host, sid: str, workspace: Path) -> list[Target]:
    s = host.subjects
    proposal = ToolProposal(session_id=sid, call_id="c1", tool="read_file",
                            input={"path": "README.md"}, workspace=str(workspace),
                            action_hash="h")
    return [
        Target(s.inbox, UserMessage, 1, UserMessage(text="hello there", channel="test")),
        Target(s.manager, ManagerMessage, 1, TreeQuery(session_id=sid)),
        Target(s.gatekeeper, ToolProposal, 1, proposal),
        Target(s.interactions, InteractionMessage, 1,
               ChatText(session_id=sid, channel="test", text="hi", user="user")),
        Target(s.router, WatchSession, 1, WatchSession(session_id=sid, channel="test")),
        Target(s.session(sid), SessionMessage, 1, TreeQuery(session_id=sid)),
        Target(s.ttsr(sid), BarrierCheck, 1, BarrierCheck(session_id=sid, generation=1, seq=1)),
        # The sessions' streams are for observers: the engine's actors take them in process
        # only (test_forged_stream.py).
    ]


def _principal_inbox(host: Host) -> list[Target]:
    """A principal's inbox (``<ns>.inbox.<principal>``), once the engine listens there."""
    inbox_for = getattr(host.subjects, "inbox_for", None)
    if inbox_for is None:
        return []
    subject: str = inbox_for("malformed")
    try:
        host.bus.request_sync(subject, b"", timeout=1)
    except BusError:  # nobody listening (yet)
        return []
    return [Target(subject, UserMessage, 1, UserMessage(text="hello there", channel="test"))]


def _fields(base: Any) -> dict[str, Any]:
    fields: dict[str, Any] = json.loads(encode(base))
    return fields


def _with_mark(rng: random.Random, base: Any, value: str) -> tuple[dict[str, Any], str]:
    """The base message as a dict with one string field (maybe the tag) set to ``value``."""
    fields = _fields(base)
    names = [k for k, v in fields.items() if isinstance(v, str)]
    name = rng.choice(names)
    fields[name] = value
    return fields, name


def _dumps(fields: dict[str, Any]) -> bytes:
    return json.dumps(fields).encode()


def _nest(rng: random.Random, depth: int, closed: bool = True) -> bytes:
    form = rng.randrange(3)
    if form == 0:
        opener, inner, closer = b"[", b"1", b"]"
    elif form == 1:
        opener, inner, closer = b'{"a":', b"1", b"}"
    else:
        opener, inner, closer = b'[{"k":', b"[]", b"}]"
    return opener * depth + ((inner + closer * depth) if closed else b"")


def _wrong_value(rng: random.Random, value: Any) -> Any:
    if isinstance(value, bool):
        return rng.choice([1, "yes", [], {}])
    if isinstance(value, int | float):
        return rng.choice(["1", [], {}, "NaN"]) if isinstance(value, float) else rng.choice(
            ["1", 1.5, [], {}, True])
    if isinstance(value, str):
        return rng.choice([123, [], {}, True, 1.5])
    if isinstance(value, list):
        return rng.choice(["x", {}, 7])
    if isinstance(value, dict):
        return rng.choice(["x", [], 7])
    return "x"


def _payload(rng: random.Random, kind: str, target: Target, max_payload: int) -> bytes:
    base = target.base
    if kind == "utf8_in_string":
        fields, _ = _with_mark(rng, base, rng.choice(["", "ok ", "日本 "]) + MARK)
        return _dumps(fields).replace(MARK.encode(), rng.choice(BAD_UTF8))
    if kind == "utf8_in_skipped_field":
        fields = _fields(base)
        where = rng.randrange(3)
        if where == 0:
            fields[f"zz{rng.randrange(1000)}"] = MARK
        elif where == 1:
            fields[MARK] = rng.randrange(100)
        else:
            fields["extra"] = {"x": [1, {"y": MARK}]}
        return _dumps(fields).replace(MARK.encode(), rng.choice(BAD_UTF8))
    if kind == "utf8_outside_strings":
        raw = encode(base)
        spots = [0, len(raw), 1, len(raw) - 1] + [
            i + 1 for i, b in enumerate(raw) if b in b",:" and raw.count(b'"', 0, i) % 2 == 0]
        at = rng.choice(spots)
        return raw[:at] + rng.choice(BAD_UTF8) + raw[at:]
    if kind == "lone_surrogate_escape":
        fields, _ = _with_mark(rng, base, MARK)
        return _dumps(fields).replace(MARK.encode(), rng.choice(LONE_SURROGATES))
    if kind in ("deep_1000", "deep_100000"):
        depth = 1_000 if kind == "deep_1000" else 100_000
        if rng.random() < 0.2:  # the whole message buried
            return b"[" * depth + encode(base) + b"]" * depth
        return encode(base)[:-1] + b', "k": ' + _nest(rng, depth) + b"}"
    if kind == "deep_unclosed":
        depth = rng.randrange(1_000, 100_001)
        return (encode(base)[:-1] + b', "k": ' if rng.random() < 0.5 else b"") + _nest(
            rng, depth, closed=False)
    if kind == "wrong_types":
        fields = _fields(base)
        name = rng.choice([k for k in fields if k != "type"])
        fields[name] = _wrong_value(rng, fields[name])
        return _dumps(fields)
    if kind == "not_an_object":
        return rng.choice([b"[]", b"[1, 2, 3]", b'"user_message"', b"42", b"-0.5e3", b"null",
                           b"true", b"{}", b'{"type": null}', b'{"type": 7}', b" ", b"\t\r\n",
                           b"[" + encode(base) + b"]", b'{"type": ["user_message"]}'])
    if kind == "unknown_tag":
        fields = _fields(base)
        fields["type"] = rng.choice([*FOREIGN_TAGS, f"no_such_{rng.randrange(10**6)}"])
        return _dumps(fields)
    if kind == "truncated":
        raw = encode(base)
        return raw[:rng.randrange(1, len(raw))]
    if kind == "empty":
        return b""
    if kind == "huge":
        size = max_payload - rng.randrange(0, 512)
        form = rng.randrange(6)
        if form == 0:  # a long text with one bad byte at its end
            head = b'{"type": "user_message", "channel": "test", "text": "'
            return head + b"a" * (size - len(head) - 3) + b'\xff"}'
        if form == 1:
            return b"[" * size
        if form == 2:  # a tag as long as the payload: echoed by a careless reason
            return b'{"type": "' + b"x" * (size - 12) + b'"}'
        if form == 3:  # valid JSON, one wrong type after a long string
            head, tail = b'{"type": "user_message", "text": "', b'", "channel": 5}'
            return head + b"b" * (size - len(head) - len(tail)) + tail
        if form == 4:
            return rng.randbytes(size).translate(_PRINTABLE)
        return b"[" + b"1," * ((size - 3) // 2) + b"1]"
    assert kind == "random_bytes"
    return rng.randbytes(rng.randrange(1, 4096))


def _corpus(targets: list[Target], max_payload: int) -> list[Sent]:
    rng = random.Random(SEED)
    kinds = [kind for kind, count in KINDS.items() for _ in range(count)]
    rng.shuffle(kinds)
    corpus: list[Sent] = []
    for index, kind in enumerate(kinds):
        target = targets[index % len(targets)]
        payload = _payload(rng, kind, target, max_payload)
        assert len(payload) <= max_payload, (kind, len(payload))
        corpus.append(Sent(index, kind, target, payload, request=rng.random() < 0.5))
    return corpus


def _letter_key(subject: str, payload: bytes) -> tuple[str, int, str]:
    """What identifies a dead letter: subject, size and excerpt (as the runtime cuts it)."""
    return subject, len(payload), payload[:512].decode("utf-8", errors="replace")


@dataclass
class Storm:
    """What came back from the engine while the corpus was sent."""

    letters: Counter[tuple[str, int, str]]
    letters_without_reason: int
    replies_not_errors: list[str]
    seconds: float
    sent: int
    """Payloads sent: all of them, unless the engine stopped keeping up."""


async def _send(nats_url: str, namespace: str, corpus: list[Sent], timeout: float,
                **options: Any) -> Storm:
    """Send the corpus from a client of its own (``options``: how it signs in), paced by
    what the engine has answered."""
    nc = await nats.connect(nats_url, name="malformed-bus", **options)
    letters: Counter[tuple[str, int, str]] = Counter()
    wrong_replies: list[str] = []
    done = {"letters": 0, "bytes": 0, "no_reason": 0}
    letter_decoder: Decoder[DeadLetter] = Decoder(DeadLetter)
    reply_decoder: Decoder[ErrorReply] = Decoder(ErrorReply)
    inbox = f"_INBOX.{uuid.uuid4().hex}"

    async def on_letter(msg: Any) -> None:
        letter = letter_decoder.decode(msg.data)
        letters[(letter.subject, letter.size, letter.payload)] += 1
        done["letters"] += 1
        done["bytes"] += letter.size
        if not letter.reason:
            done["no_reason"] += 1

    async def on_reply(msg: Any) -> None:
        sent = corpus[int(msg.subject.rsplit(".", 1)[1])]
        sent.replies += 1
        try:
            reply = reply_decoder.decode(msg.data)
        except DecodeFailure as exc:
            wrong_replies.append(f"{sent.kind}: {exc.reason}")
            return
        if reply.error != "bad_request" or not reply.reason:
            wrong_replies.append(f"{sent.kind}: {reply.error}: {reply.reason}")

    try:
        await nc.subscribe(f"{namespace}.deadletter", cb=on_letter)
        await nc.subscribe(f"{inbox}.*", cb=on_reply)
        await nc.flush()
        started = time.monotonic()
        deadline = started + timeout
        expected_letters = expected_bytes = count = 0
        for sent in corpus:
            while (expected_letters - done["letters"] > WINDOW_LETTERS
                   or expected_bytes - done["bytes"] > WINDOW_BYTES):
                if time.monotonic() > deadline:
                    break  # the engine stopped keeping up: the rest stays unsent
                await asyncio.sleep(0.002)
            else:
                count += 1
                reply = f"{inbox}.{sent.index}" if sent.request else ""
                await nc.publish(sent.target.subject, sent.payload, reply=reply)
                expected_letters += sent.target.subscribers
                expected_bytes += len(sent.payload) * sent.target.subscribers
                if sent.index % BATCH == BATCH - 1:
                    await nc.flush()
                continue
            break
        await nc.flush()
        requests = [s for s in corpus[:count] if s.request]
        while (done["letters"] < expected_letters
               or any(s.replies < s.target.subscribers for s in requests)):
            if time.monotonic() > deadline:
                break  # counted as lost below
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # anything more (there must be nothing) arrives now
        seconds = time.monotonic() - started
    finally:
        await nc.close()
    return Storm(letters, done["no_reason"], wrong_replies, seconds, count)


def _still_answers(host: Host, sid: str, workspace: Path) -> None:
    """Every actor answers a proper request after the storm."""
    s = host.subjects
    listed = ask(host.bus, s.manager, ListSessions(), SessionList, timeout=10)
    assert sid in [row.session_id for row in listed.sessions]
    tool_input = {"path": "README.md"}
    verdict = ask(host.bus, s.gatekeeper, ToolProposal(
        session_id=sid, call_id="after-the-storm", tool="read_file", input=tool_input,
        workspace=str(workspace), action_hash=action_hash("read_file", tool_input)),
        Verdict, timeout=10)
    assert verdict.call_id == "after-the-storm" and verdict.decision == "allow"
    watching = ask(host.bus, s.router, WatchSession(session_id=sid, channel="test"),
                   Watching, timeout=10)
    assert watching.session_id == sid
    # The coordinator takes nothing from the bus, but still answers that it will not.
    with pytest.raises(RemoteError, match="not_allowed"):
        ask(host.bus, s.interactions, QuestionRequest(
            session_id="probe", call_id="probe-call", question="still there?",
            channel="probe"), InteractionOpened, timeout=10)
    tree = ask(host.bus, s.session(sid), TreeQuery(session_id=sid), TreeView, timeout=10)
    assert tree.session_id == sid
    barrier = ask(host.bus, s.ttsr(sid), BarrierCheck(session_id=sid, generation=0, seq=0),
                  BarrierResult, timeout=10)
    assert barrier.generation == 0


@pytest.mark.parametrize("server", ["shared", "locked"])
def test_twenty_thousand_malformed_payloads_are_all_refused_and_nothing_breaks(
    fake_llm: Callable[[str], FakeLLM], make_host: Callable[..., Host],
    watch_channel: Callable[..., Any], workspace: Path, nats_url: str,
    record_property: Callable[[str, object], None], server: str,
) -> None:
    """``shared``: the suite's NATS server, no authentication. ``locked``: the engine's
    own embedded server in its locked-down configuration, the payloads sent with the
    engine's credentials (the worst case: a connector may publish on two subjects)."""
    (workspace / "README.md").write_text("hello\n")
    options: dict[str, Any] = {}
    if server == "locked":
        host = make_host(fake_llm(SCRIPT), nats_url="")
        credentials = read_credentials(host.settings.state_dir)
        assert credentials is not None
        options = engine_auth(credentials).connect_options()
        nats_url = host.nats_url
    else:
        host = make_host(fake_llm(SCRIPT))
    channel = watch_channel(host, "test")
    sid = say(host, "before the storm")
    channel.wait_for("completed")
    targets = _targets(host, sid, workspace) + _principal_inbox(host)
    letters_before = host.system.deadletters
    corpus = _corpus(targets, host.bus.nc.max_payload)
    # Every payload is malformed for its subject: none may reach an actor as a message.
    decoders: dict[str, Decoder[Any]] = {t.subject: Decoder(t.accepts) for t in targets}
    for sent in corpus:
        with pytest.raises(DecodeFailure):
            decoders[sent.target.subject].decode(sent.payload)

    storm = asyncio.run(_send(nats_url, host.subjects.namespace, corpus, timeout=45.0,
                              **options))

    tried = corpus[:storm.sent]
    # Match the dead letters to the payloads: by key, each payload owes one per subscriber.
    owed: Counter[tuple[str, int, str]] = Counter()
    fanout: dict[tuple[str, int, str], int] = {}
    answered_by_key: Counter[tuple[str, int, str]] = Counter()
    sent_by_key: Counter[tuple[str, int, str]] = Counter()
    for sent in tried:
        key = _letter_key(sent.target.subject, sent.payload)
        owed[key] += sent.target.subscribers
        fanout[key] = sent.target.subscribers
        sent_by_key[key] += 1
        if sent.request and sent.replies:
            answered_by_key[key] += 1
    lost = dead_lettered = 0
    for key, count in sent_by_key.items():
        got, per = storm.letters.get(key, 0), fanout[key]
        dead_lettered += min(count, -(-got // per))
        # Conservatively, letters go to the answered requests first; the rest must cover
        # every payload that got no answer.
        unanswered = count - answered_by_key[key]
        covered = -(-max(0, got - per * answered_by_key[key]) // per)
        lost += max(0, unanswered - covered)
    requests = [s for s in tried if s.request]
    answered = sum(1 for s in requests if s.replies)
    letters_total = sum(storm.letters.values())
    stray = storm.letters - owed
    missing = owed - storm.letters
    figures = {
        "tried": len(tried), "requests": len(requests), "publishes": len(tried) - len(requests),
        "answered": answered, "dead-lettered": dead_lettered, "dead letters": letters_total,
        "lost": lost, "seconds": round(storm.seconds, 1),
        "megabytes": round(sum(len(s.payload) for s in tried) / 2**20, 1),
        "unsent (engine fell behind)": len(corpus) - len(tried),
    }
    for name, value in figures.items():
        record_property(name, value)
    print("\nmalformed bus:", ", ".join(f"{name} {value}" for name, value in figures.items()))
    by_kind = Counter(s.kind for s in tried)
    print("kinds:", ", ".join(f"{kind} {count}" for kind, count in sorted(by_kind.items())))

    unlettered = Counter(
        (s.kind, len(s.payload), s.request) for s in tried
        if _letter_key(s.target.subject, s.payload) in missing)
    assert len(tried) == TOTAL, f"the engine fell behind after {len(tried)} payloads"
    assert lost == 0, f"{lost} payloads got neither an answer nor a dead letter: {unlettered}"
    assert answered == len(requests)
    assert all(s.replies == s.target.subscribers for s in requests), "missing or extra replies"
    assert storm.replies_not_errors == []
    assert not missing and not stray, (sum(missing.values()), sum(stray.values()))
    assert storm.letters_without_reason == 0
    assert host.system.deadletters - letters_before == letters_total == sum(owed.values())
    assert host.system.failures == 0 and host.system.stopped_for_good == []

    _still_answers(host, sid, workspace)
    assert say(host, "after the storm", sid) == sid
    assert channel.wait_for("completed").session_id == sid
    assert [m.text for m in channel.seen if m.kind == "reply"][-1] == "Still standing."
    session = host.app.session(sid)
    assert session is not None and session.status == "running" and session.failures == 0
    assert host.system.failures == 0


def _raw_hpub(nats_url: str, subject: str, headers: bytes, payload: bytes) -> None:
    """Publish with a header block of any bytes, as a client other than nats-py can."""
    url = urlsplit(nats_url)
    with socket.create_connection((url.hostname or "127.0.0.1", url.port or 4222), 5) as sock:
        sock.recv(65536)  # INFO
        sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n')
        sock.sendall(f"HPUB {subject} {len(headers)} {len(headers) + len(payload)}\r\n"
                     .encode() + headers + payload + b"\r\nPING\r\n")
        sock.settimeout(5)
        assert b"PONG" in sock.recv(65536)


def test_a_header_that_is_not_utf8_does_not_deafen_the_engine(
    fake_llm: Callable[[str], FakeLLM], make_host: Callable[..., Host], nats_url: str,
) -> None:
    """Headers are bytes on the wire too: nats-py 2.16 decodes a header status line outside
    any ``try``, and the error ended the engine connection's read loop (nothing more was
    heard until the ping check called the connection stale, minutes later)."""
    host = make_host(fake_llm(SCRIPT))
    assert isinstance(ask(host.bus, host.subjects.manager, ListSessions(), SessionList),
                      SessionList)
    _raw_hpub(nats_url, host.subjects.inbox, b"NATS/1.0 \xff\xfe\xfd\r\n\r\n",
              encode(ListSessions()))
    ask(host.bus, host.subjects.manager, ListSessions(), SessionList, timeout=3)
