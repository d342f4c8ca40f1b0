"""Strict decoding of every bus message union: bad input becomes a readable DecodeFailure."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from tether.events import messages as m
from tether.events.codec import (
    MAX_DEPTH,
    MAX_PAYLOAD,
    MAX_REASON,
    DecodeFailure,
    Decoder,
    encode,
    nesting_depth_exceeds,
)

UNIONS: dict[str, tuple[Any, list[m.Message]]] = {
    "inbox": (m.InboxMessage, [m.UserMessage(text="hi", channel="web")]),
    "manager": (
        m.ManagerMessage,
        [m.ListSessions(), m.KillSession(session_id="s1"),
         m.UserMessage(text="hi", channel="web", session_id="s1")],
    ),
    "session": (
        m.SessionMessage,
        [m.UserMessage(text="hi", channel="web"),
         m.Interrupt(session_id="s1", generation=2, rules=["r"], reminder="stop"),
         m.KillSession(session_id="s1", reason="bye")],
    ),
    "monitor": (m.MonitorMessage, [m.BarrierCheck(session_id="s1", generation=1, seq=9)]),
    "gatekeeper": (
        m.GatekeeperMessage,
        [m.ToolProposal(session_id="s1", call_id="c1", tool="shell", input={"cmd": "ls"},
                        workspace="/ws", action_hash="h")],
    ),
}


@pytest.mark.parametrize("union", list(UNIONS))
def test_each_union_round_trips_its_members(union: str) -> None:
    kind, samples = UNIONS[union]
    decoder: Decoder[Any] = Decoder(kind)
    for sample in samples:
        decoded = decoder.decode(encode(sample))
        assert type(decoded) is type(sample)
        assert decoded == sample


@pytest.mark.parametrize("union", list(UNIONS))
def test_unknown_tag_is_refused(union: str) -> None:
    decoder: Decoder[Any] = Decoder(UNIONS[union][0])
    with pytest.raises(DecodeFailure) as info:
        decoder.decode(b'{"type": "launch_missiles", "session_id": "s1"}')
    assert "launch_missiles" in info.value.reason
    assert info.value.reason.startswith("invalid message")


@pytest.mark.parametrize("union", list(UNIONS))
def test_member_of_another_union_is_refused(union: str) -> None:
    decoder: Decoder[Any] = Decoder(UNIONS[union][0])
    stranger = m.Verdict(call_id="c", decision="allow", reason="ok", action_hash="h")
    with pytest.raises(DecodeFailure, match="verdict"):
        decoder.decode(encode(stranger))


@pytest.mark.parametrize(
    ("union", "payload", "where"),
    [
        ("inbox", {"type": "user_message", "text": 5, "channel": "web"}, "$.text"),
        ("inbox", {"type": "user_message", "text": "hi"}, "channel"),
        ("manager", {"type": "kill_session", "session_id": ["s1"]}, "$.session_id"),
        ("session", {"type": "interrupt", "session_id": "s", "generation": "2", "rules": [],
                     "reminder": ""}, "$.generation"),
        ("session", {"type": "interrupt", "session_id": "s", "generation": 1, "rules": "r",
                     "reminder": ""}, "$.rules"),
        ("monitor", {"type": "barrier_check", "session_id": "s", "generation": 1,
                     "seq": 1.5}, "$.seq"),
        ("gatekeeper", {"type": "tool_proposal", "session_id": "s", "call_id": "c",
                        "tool": "shell", "input": "ls", "workspace": "/w",
                        "action_hash": "h"}, "$.input"),
    ],
)
def test_wrong_types_are_refused_with_the_field_named(
    union: str, payload: dict[str, Any], where: str
) -> None:
    decoder: Decoder[Any] = Decoder(UNIONS[union][0])
    with pytest.raises(DecodeFailure) as info:
        decoder.decode(json.dumps(payload).encode())
    assert info.value.reason.startswith("invalid message: ")
    assert where in info.value.reason


@pytest.mark.parametrize("payload", [b"hello", b'{"type": "user_message", ', b"", b"\xff\xfe"])
def test_non_json_is_refused(payload: bytes) -> None:
    decoder: Decoder[Any] = Decoder(m.SessionMessage)
    with pytest.raises(DecodeFailure) as info:
        decoder.decode(payload)
    assert info.value.reason.startswith("not valid JSON")


def test_json_that_is_not_an_object_is_refused() -> None:
    decoder: Decoder[Any] = Decoder(m.ManagerMessage)
    with pytest.raises(DecodeFailure, match="invalid message"):
        decoder.decode(b"[1, 2, 3]")


def test_over_size_payload_is_refused_unread() -> None:
    decoder: Decoder[Any] = Decoder(m.InboxMessage)
    big = encode(m.UserMessage(text="x" * MAX_PAYLOAD, channel="web"))
    with pytest.raises(DecodeFailure) as info:
        decoder.decode(big)
    assert info.value.reason == f"payload of {len(big)} bytes exceeds {MAX_PAYLOAD}"


def test_size_limit_is_per_decoder_and_inclusive() -> None:
    payload = encode(m.ListSessions())
    assert Decoder(m.ManagerMessage, max_size=len(payload)).decode(payload) == m.ListSessions()
    with pytest.raises(DecodeFailure, match="exceeds"):
        Decoder(m.ManagerMessage, max_size=len(payload) - 1).decode(payload)


def test_decode_failure_is_the_only_exception() -> None:
    decoder: Decoder[Any] = Decoder(m.GatekeeperMessage)
    for bad in (b"null", b"{}", b'{"type": 3}', b"1e999999", b'"tool_proposal"'):
        with pytest.raises(DecodeFailure) as info:
            decoder.decode(bad)
        assert info.value.reason


@pytest.mark.parametrize(
    ("message", "tag"),
    [
        (m.UserMessage(text="hi", channel="web"), "user_message"),
        (m.ToolProposal(session_id="s", call_id="c", tool="t", input={}, workspace="/w",
                        action_hash="h"), "tool_proposal"),
        (m.ListSessions(), "list_sessions"),
        (m.KillSession(session_id="s"), "kill_session"),
        (m.BarrierCheck(session_id="s", generation=1, seq=1), "barrier_check"),
        (m.BarrierResult(generation=1, clear=True), "barrier_result"),
        (m.StreamDelta(session_id="s", generation=1, seq=1, kind="text"), "stream_delta"),
        (m.ChannelMessage(session_id="s", kind="reply", text="t"), "channel_message"),
        (m.ErrorReply(error="bad", reason="r"), "error_reply"),
        (m.DeadLetter(subject="x", reason="r", payload="p", size=1), "dead_letter"),
        (m.Verdict(call_id="c", decision="deny", reason="r", action_hash="h"), "verdict"),
        (m.Interrupt(session_id="s", generation=1, rules=[], reminder=""), "interrupt"),
    ],
)
def test_json_tags_are_snake_case(message: m.Message, tag: str) -> None:
    assert json.loads(encode(message))["type"] == tag


def test_foreign_json_decodes_without_importing_tether_types() -> None:
    # what a program in another language would publish on the inbox
    raw = b'{"type":"user_message","text":"hello","channel":"bot","session_id":"s9"}'
    decoded: m.UserMessage = Decoder(m.InboxMessage).decode(raw)
    assert decoded == m.UserMessage(text="hello", channel="bot", session_id="s9")
    assert decoded.user == "user"


def test_content_blocks_use_messages_api_tags() -> None:
    blocks = [m.TextBlock("a"), m.ToolUseBlock("id", "n", {"k": 1}), m.ToolResultBlock("id", "o")]
    assert [json.loads(encode(b))["type"] for b in blocks] == ["text", "tool_use", "tool_result"]


@pytest.mark.parametrize("payload", [
    b'{"type": "user_message", "text": "\xff\xfe", "channel": "x"}',  # not UTF-8 in a string
    b'{"type": "user_message", "text": "a", "channel": "x", "k": '
    + b"[" * 100_000 + b"]" * 100_000 + b"}",  # nested past any recursion limit
    b'{"type": "user_message", "text": "a", "channel": "x", "k": '
    + b'{"a":' * 50_000 + b"1" + b"}" * 50_000 + b"}",
])
def test_payloads_that_broke_the_decoder_are_refused_with_a_reason(payload: bytes) -> None:
    decoder: Decoder[m.UserMessage] = Decoder(m.UserMessage)
    with pytest.raises(DecodeFailure) as refused:
        decoder.decode(payload)
    assert refused.value.reason


# --- limits checked before parsing: UTF-8 anywhere, nesting depth --------------------------


@pytest.mark.parametrize(
    ("payload", "at"),
    [
        (b"\xff\xfe", 0),
        (b'{"type": "list_sessions", "x": "\xff"}', 32),  # a field msgspec skips unread
        (b'{"type": "list_sessions", "\xc3": 1}', 27),  # a key it skips
        (b'{"type": "list_sessions", "x": {"y": ["ok", "\xed\xa0\x80"]}}', 45),  # surrogate
        (b'{"type": "list_sessions"}\xc0\x80', 25),  # overlong NUL, outside the JSON
        (b'{"type": "kill_session", "session_id": "s\xe9"}', 41),  # Latin-1, in a string
    ],
)
def test_bytes_that_are_not_utf8_are_refused_wherever_they_are(payload: bytes, at: int) -> None:
    with pytest.raises(DecodeFailure) as info:
        Decoder(m.ManagerMessage).decode(payload)
    assert info.value.reason == f"not valid JSON: invalid UTF-8 at byte {at}"


def test_utf8_text_still_decodes() -> None:
    message = m.UserMessage(text="héllo wörld, 日本語, 😀", channel="web")
    assert Decoder(m.InboxMessage).decode(encode(message)) == message
    escaped = b'{"type":"user_message","text":"\\ud83d\\ude00","channel":"web"}'
    assert Decoder(m.InboxMessage).decode(escaped).text == "\U0001f600"


def _nested(depth: int, opener: bytes = b"[", closer: bytes = b"]") -> bytes:
    return opener * depth + closer * depth


def test_nesting_up_to_the_limit_decodes_and_one_more_level_is_refused() -> None:
    decoder: Decoder[Any] = Decoder(Any)
    assert decoder.decode(_nested(MAX_DEPTH)) is not None
    with pytest.raises(DecodeFailure) as info:
        decoder.decode(_nested(MAX_DEPTH + 1))
    assert info.value.reason == f"nested deeper than {MAX_DEPTH}"
    # The top-level object is the first level: a message's own fields count too.
    head, tail = b'{"type": "user_message", "text": "a", "channel": "x", "k": ', b"}"
    user: Decoder[m.UserMessage] = Decoder(m.UserMessage)
    assert user.decode(head + _nested(MAX_DEPTH - 1) + tail).text == "a"
    with pytest.raises(DecodeFailure, match=f"nested deeper than {MAX_DEPTH}"):
        user.decode(head + _nested(MAX_DEPTH) + tail)


def test_depth_limit_is_per_decoder() -> None:
    shallow: Decoder[Any] = Decoder(Any, max_depth=3)
    assert shallow.decode(b'{"a": [{"b": 1}, [2], {}]}') == {"a": [{"b": 1}, [2], {}]}
    with pytest.raises(DecodeFailure, match="nested deeper than 3"):
        shallow.decode(b'{"a": [{"b": [1]}]}' + b" " * 10 + b"[]" * 3)
    with pytest.raises(ValueError, match="max_depth"):
        Decoder(Any, max_depth=0)


@pytest.mark.parametrize(
    "payload",
    [
        b"[" * MAX_PAYLOAD,  # the whole payload opening arrays
        b"{" * MAX_PAYLOAD,
        b'{"a":' * (MAX_PAYLOAD // 5),
        _nested(100_000),
        _nested(50_000, b"{\"a\":", b"}"),
        b"[1,[" * 100_000 + b"]" * 200_000,  # every level holding a sibling
        b'[{"k": [' * 30_000 + b"]}]" * 30_000,
    ],
    ids=["[x1MiB", "{x1MiB", "{a:x1MiB", "[]x100k", "{a:}x50k", "siblings", "mixed"],
)
def test_deep_nesting_is_refused_before_parsing_without_recursion(payload: bytes) -> None:
    decoder: Decoder[Any] = Decoder(m.InboxMessage)
    with pytest.raises(DecodeFailure) as info:
        decoder.decode(payload)
    assert info.value.reason == f"nested deeper than {MAX_DEPTH}"


def test_brackets_in_strings_do_not_count() -> None:
    text = "[" * 1000 + '\\"{{{' + "}" * 500 + "\\\\" + "]"
    message = m.UserMessage(text=text, channel="web")
    payload = encode(message)
    assert payload.count(b"[") > MAX_DEPTH
    assert Decoder(m.InboxMessage).decode(payload) == message
    # An escaped backslash ends in a real quote: what follows is structure again.
    sneaky = b'{"type": "user_message", "text": "a\\\\", "channel": "x", "k": ' + _nested(
        MAX_DEPTH + 1) + b"}"
    with pytest.raises(DecodeFailure, match="nested deeper"):
        Decoder(m.InboxMessage).decode(sneaky)


@pytest.mark.parametrize(
    "payload",
    [b"[" * 70 + b"1", b"]" * 70 + b"[" * 70, b"[]" * 40 + b"]" + b"[]" * 40,
     b"{" * 40 + b"[" * 40],
)
def test_unbalanced_brackets_are_refused_before_parsing(payload: bytes) -> None:
    with pytest.raises(DecodeFailure) as info:
        Decoder(Any).decode(payload)
    assert info.value.reason in (f"nested deeper than {MAX_DEPTH}",
                                 "not valid JSON: brackets do not balance")


def test_many_shallow_structures_decode() -> None:
    rows = {"rows": [[i, {"k": [i, str(i)], "s": "]]]"}] for i in range(5000)]}
    decoded: Any = Decoder(Any).decode(encode(rows))
    assert decoded == rows
    # Deep pairs side by side: the exact running-sum pass decides, not the rounds.
    side_by_side = b"[" + b",".join([_nested(MAX_DEPTH - 1)] * 3000) + b"]"
    assert nesting_depth_exceeds(side_by_side, MAX_DEPTH) == ""
    deeper = b"[" + b",".join([_nested(MAX_DEPTH - 1)] * 3000 + [_nested(MAX_DEPTH)]) + b"]"
    assert nesting_depth_exceeds(deeper, MAX_DEPTH) == f"nested deeper than {MAX_DEPTH}"


def _reference_depth(data: bytes) -> tuple[int, bool, bool]:
    """(deepest nesting, brackets balance, a string is left open), byte by byte."""
    depth = peak = 0
    negative = in_string = escaped = False
    for byte in data:
        char = chr(byte)
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            peak = max(peak, depth)
        elif char in "]}":
            depth -= 1
            negative = negative or depth < 0
    return peak, depth == 0 and not negative, in_string


def _random_json_ish(rng: random.Random, depth_target: int) -> bytes:
    pieces: list[str] = []
    depth = 0
    for _ in range(rng.randint(0, 60)):
        roll = rng.random()
        if roll < 0.3 and depth < depth_target:
            pieces.append(rng.choice("[{"))
            depth += 1
        elif roll < 0.55 and depth > 0:
            pieces.append(rng.choice("]}"))
            depth -= 1
        elif roll < 0.75:
            body = rng.choices(["[", "]", "{", "}", "\\\\", '\\"', "a", "\\n", "\\u005b"],
                               k=rng.randrange(6))
            pieces.append('"' + "".join(body) + '"')
        else:
            pieces.append(rng.choice([",", "1", " ", ":", "null"]))
    if rng.random() < 0.7:
        pieces.append("]" * depth)
    if rng.random() < 0.1:
        pieces.insert(rng.randrange(len(pieces) + 1), rng.choice("[]}"))
    return "".join(pieces).encode()


def test_depth_scan_agrees_with_a_byte_by_byte_reading() -> None:
    rng = random.Random(13)
    for _ in range(20_000):
        limit = rng.randint(1, 8)
        data = _random_json_ish(rng, rng.randint(1, 12))
        peak, balanced, open_string = _reference_depth(data)
        got = nesting_depth_exceeds(data, limit)
        if balanced and not open_string:
            assert got == ("" if peak <= limit else f"nested deeper than {limit}"), data
        elif got == "":  # unbalanced: "" only for brackets that never go too deep
            assert peak <= limit, data


def test_normal_messages_pass_the_depth_check() -> None:
    decoder: Decoder[Any] = Decoder(m.GatekeeperMessage)
    proposal = encode(m.ToolProposal(session_id="s1", call_id="c1", tool="shell",
                                     input={"cmd": "ls -la", "a": [1, 2, {"b": "c"}]},
                                     workspace="/ws", action_hash="h" * 64))
    assert nesting_depth_exceeds(proposal, MAX_DEPTH) == ""
    assert decoder.decode(proposal).call_id == "c1"


def test_random_and_mutated_bytes_only_ever_raise_decode_failure() -> None:
    rng = random.Random(2013)
    valid = [encode(sample) for _, samples in UNIONS.values() for sample in samples]
    decoders: list[Decoder[Any]] = [Decoder(kind) for kind, _ in UNIONS.values()]
    for i in range(5_000):
        if i % 2:
            payload = rng.randbytes(rng.randrange(0, 2048))
        else:  # a valid message with a few bytes changed, cut or repeated
            data = bytearray(rng.choice(valid))
            for _ in range(rng.randint(1, 4)):
                at = rng.randrange(len(data))
                data[at:at + 1] = rng.choice(
                    [bytes([rng.randrange(256)]), b"", b"[" * 100, b"\\", b'"', b"\x80"])
            payload = bytes(data)
        for decoder in decoders:
            try:
                decoder.decode(payload)
            except DecodeFailure as failure:
                assert failure.reason


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        (b'{"type": "' + b"x" * (MAX_PAYLOAD - 12) + b'"}', "$.type"),  # a tag quoted back
        (b'{"type": "stream_delta", "session_id": "s", "generation": 1, "seq": 1, "kind": "'
         + b"y" * 500_000 + b'"}', "$.kind"),  # an enum value quoted back
    ],
)
def test_a_reason_stays_short_whatever_the_payload_quotes(payload: bytes, field: str) -> None:
    """A reason as long as the payload would make the dead letter and the error reply too
    big to publish (the runtime would lose both): it keeps its start and the field."""
    with pytest.raises(DecodeFailure) as info:
        Decoder(m.StreamDelta).decode(payload)
    reason = info.value.reason
    assert len(reason) <= MAX_REASON and str(info.value) == reason
    assert reason.startswith("invalid message: Invalid ") and reason.endswith(f"`{field}`")
    assert "characters left out" in reason
    dead_letter = encode(m.DeadLetter(subject="t.x", reason=reason, payload="p" * 512,
                                      size=len(payload)))
    assert len(dead_letter) < 2048
