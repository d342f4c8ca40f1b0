"""Strict decoding of every bus message union: bad input becomes a readable DecodeFailure."""

from __future__ import annotations

import json
from typing import Any

import pytest

from events import messages as m
from events.codec import MAX_PAYLOAD, DecodeFailure, Decoder, encode

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
    decoded = Decoder(m.InboxMessage).decode(raw)
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
