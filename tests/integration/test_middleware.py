"""Refused messages are not stored as user messages, but are in the audit trail."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from tether.actors.middleware import MiddlewareSettings
from tether.actors.ports import ManualClock
from tether.actors.runtime import RemoteError, ask
from tether.adapters.anthropic_provider import AnthropicProvider
from tether.adapters.config import Settings
from tether.adapters.fake_llm import FakeLLM
from tether.adapters.host import Host
from tether.adapters.store import open_view
from tether.events.messages import Accepted, UserMessage
from tether.projections.audit_index import AuditIndex
from tether.projections.follower import Follower


def test_refusals_reach_the_sender_and_the_audit_trail(
    make_settings: Callable[..., Settings], fake_llm: Callable[[str], FakeLLM],
    watch_channel: Callable[..., Any],
) -> None:
    llm = fake_llm("responses:\n  - blocks: [{text: hello}]\n  - blocks: [{text: again}]\n")
    settings = make_settings(
        anthropic_base_url=llm.base_url,
        middleware=MiddlewareSettings(allow={"test": ["ana"]}, rate_per_minute=1, burst=1),
    )
    clock = ManualClock()
    host = Host(settings, provider=AnthropicProvider(None, llm.base_url), clock=clock).start()
    try:
        channel = watch_channel(host, "test")
        with pytest.raises(RemoteError, match="not allowed"):
            ask(host.bus, host.subjects.inbox,
                UserMessage(text="let me in", channel="test", user="mallory"), Accepted)
        sid = ask(host.bus, host.subjects.inbox,
                  UserMessage(text="hi", channel="test", user="ana"), Accepted).session_id
        channel.wait_for("completed")
        with pytest.raises(RemoteError, match="too many messages"):
            ask(host.bus, host.subjects.inbox,
                UserMessage(text="again", channel="test", user="ana", session_id=sid), Accepted)
        clock.advance(60)
        ask(host.bus, host.subjects.inbox,
            UserMessage(text="again", channel="test", user="ana", session_id=sid), Accepted)
        channel.wait_for("completed")
        errors = [m.text for m in channel.seen if m.kind == "error"]
        assert any("not allowed" in e for e in errors) and any("wait" in e for e in errors)

        session = host.app.session(sid)
        assert session is not None
        user_texts = [e.text for e in host.app.session_events(sid)
                      if type(e).__name__ == "UserMessageReceived"]
        assert user_texts == ["hi", "again"]  # the refused ones never became user messages
        audit = open_view(AuditIndex, host.app, settings, "audit-check")
        try:
            Follower(host.app, name="t", position=audit.position,
                     consume=audit.consume).catch_up()
            refused = audit.refusals()
        finally:
            audit.close()
        assert [(r.user, r.kind) for r in refused] == [("mallory", "not_allowed"),
                                                      ("ana", "rate_limited")]
        assert refused[0].excerpt == "let me in"
    finally:
        host.stop()


def test_middleware_settings_load_from_toml(tmp_path: Any) -> None:
    from tether.adapters.config import load_settings

    (tmp_path / "tether.toml").write_text(
        '[middleware]\nrate_per_minute = 12\nburst = 3\n[middleware.allow]\ntelegram = ["1"]\n')
    settings = load_settings(env={}, cwd=str(tmp_path))
    assert settings.middleware == msgspec.convert(
        {"rate_per_minute": 12, "burst": 3, "allow": {"telegram": ["1"]}}, MiddlewareSettings)
