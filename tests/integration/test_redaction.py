"""Secrets in tool output or model text never reach the event log or a channel."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tether.actors.runtime import ask
from tether.adapters.fake_llm import FakeLLM
from tether.adapters.host import Host
from tether.events.messages import Accepted, TextBlock, ToolResultBlock, UserMessage

KEY = "sk-ant-api03-" + "Q" * 40

SCRIPT = f"""
responses:
  - match: "config"
    blocks:
      - text: "Reading the config."
      - tool_use: {{name: read_file, input: {{path: settings.env}}}}
  - match: "REDACTED"
    blocks:
      - text: "The key is {KEY} as far as I remember."
"""


def test_secrets_are_masked_before_storing_and_sending(
    workspace: Path,
    fake_llm: Callable[[str], FakeLLM],
    make_host: Callable[..., Host],
    watch_channel: Callable[..., Any],
) -> None:
    (workspace / "settings.env").write_text(f"ANTHROPIC_API_KEY={KEY}\nMODE=dev\n")
    llm = fake_llm(SCRIPT)
    host = make_host(llm)
    channel = watch_channel(host, "test")
    sid = ask(host.bus, host.subjects.inbox,
              UserMessage(text="show me the config", channel="test"), Accepted).session_id
    channel.wait_for("completed")

    # Nothing a channel got holds the key, not even the live stream joined up: the
    # streaming redactor holds text back while a secret could still be forming.
    assert all(KEY not in m.text for m in channel.seen)
    assert KEY not in "".join(m.text for m in channel.seen if m.kind == "stream")
    assert any("[REDACTED]" in m.text for m in channel.seen if m.kind == "reply")
    session = host.app.session(sid)
    assert session is not None
    blocks = [b for t in session.history for b in t.content]
    result = next(b for b in blocks if isinstance(b, ToolResultBlock))
    assert KEY not in result.content and "[REDACTED]" in result.content
    assert "MODE=dev" in result.content
    texts = [b.text for b in blocks if isinstance(b, TextBlock)]
    assert any("[REDACTED]" in t for t in texts) and all(KEY not in t for t in texts)
    for event in host.app.session_events(sid):
        assert KEY not in repr(vars(event))
    # The model itself was only ever shown the masked tool output.
    assert KEY not in str(llm.requests[-1]["messages"])


PGP = ("-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBGVmZXJ" + "x" * 60
       + "\n=AbCd\n-----END PGP PRIVATE KEY BLOCK-----")


def test_secrets_a_user_pastes_are_masked_before_anything_keeps_them(
    fake_llm: Callable[[str], FakeLLM],
    make_host: Callable[..., Host],
    watch_channel: Callable[..., Any],
) -> None:
    llm = fake_llm("responses: [{match: 'key', blocks: [{text: 'Noted.'}]}]\n")
    host = make_host(llm)
    channel = watch_channel(host, "test")
    text = f"{KEY} is my key, and my signing key:\n{PGP}"
    sid = ask(host.bus, host.subjects.inbox, UserMessage(text=text, channel="test"),
              Accepted).session_id
    channel.wait_for("completed")
    session = host.app.session(sid)
    assert session is not None
    assert KEY[:20] not in session.name  # the name comes from the masked text too
    for event in host.app.session_events(sid):
        assert KEY not in repr(vars(event)) and "lQOYBGVmZXJ" not in repr(vars(event))
    said = str(llm.requests[-1]["messages"])
    assert KEY not in said and "lQOYBGVmZXJ" not in said and "is my key" in said


def test_masking_users_messages_can_be_turned_off(
    fake_llm: Callable[[str], FakeLLM],
    make_host: Callable[..., Host],
    watch_channel: Callable[..., Any],
) -> None:
    llm = fake_llm("responses: [{match: 'key', blocks: [{text: 'Noted.'}]}]\n")
    host = make_host(llm, mask_secrets_in_messages=False)
    channel = watch_channel(host, "test")
    ask(host.bus, host.subjects.inbox, UserMessage(text=f"use the key {KEY}", channel="test"),
        Accepted)
    channel.wait_for("completed")
    assert KEY in str(llm.requests[-1]["messages"])  # as typed: the user chose to
