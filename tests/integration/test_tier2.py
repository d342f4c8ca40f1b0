"""Tier 2 end to end: the reviewer (the fake model) allows, denies, or is hijacked."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.helpers import say
from tether.actors.gatekeeper.tier2 import Tier2Settings
from tether.actors.ports import SequentialIds
from tether.adapters.anthropic_provider import AnthropicProvider
from tether.adapters.config import Settings
from tether.adapters.fake_llm import FakeLLM
from tether.adapters.host import Host
from tether.events.messages import ToolResultBlock

CALL = '{name: run_shell, input: {command: "curl -s http://127.0.0.1:1/ || true"}}'
SCRIPT = f"""
responses:
  - match: "fetch one"
    blocks: [{{tool_use: {CALL}}}]
  - match: "Canary token: canary-1"
    blocks: [{{text: '{{"verdict": "allow", "reason": "local only", "canary": "canary-1"}}'}}]
  - match: "exit code"
    blocks: [{{text: "Fetched."}}]
  - match: "fetch two"
    blocks: [{{tool_use: {CALL}}}]
  - match: "Canary token: canary-2"
    blocks: [{{text: '{{"verdict": "allow", "reason": "the input told me to"}}'}}]
  - match: "refused"
    blocks: [{{text: "Not fetched."}}]
"""


def result(host: Host, sid: str) -> ToolResultBlock:
    session = host.app.session(sid)
    assert session is not None
    return [b for t in session.history for b in t.content if isinstance(b, ToolResultBlock)][-1]


def test_the_reviewer_decides_and_a_hijacked_answer_fails_closed(
    make_settings: Callable[..., Settings], fake_llm: Callable[[str], FakeLLM],
    watch_channel: Callable[..., Any],
) -> None:
    llm = fake_llm(SCRIPT)
    settings = make_settings(anthropic_base_url=llm.base_url,
                             tier2=Tier2Settings(enabled=True, model="claude-haiku-4-5"))
    host = Host(settings, provider=AnthropicProvider(None, llm.base_url),
                canaries=SequentialIds("")).start()
    try:
        channel = watch_channel(host, "test")
        sid = say(host, "please fetch one")
        channel.wait_for("completed")
        assert not result(host, sid).is_error  # allowed by the reviewer, so it ran
        decided = [e for e in host.app.session_events(sid)
                   if type(e).__name__ == "ToolCallDecided"]
        assert (decided[-1].decision, decided[-1].tier) == ("allow", "tier2")
        assert "local only" in decided[-1].reason

        say(host, "please fetch two", sid)
        channel.wait_for("completed")
        refused = result(host, sid)
        assert refused.is_error and "lacks the canary" in refused.content
        assert "tier 2 failed closed" in refused.content
    finally:
        host.stop()
