"""Tier 3: a call that needs approval waits for the chat's answer; first answer wins.

End to end, the wiring: the real gatekeeper's escalation, the host's clock and ticks, a
kill through the manager, the terminal's prompt, the audit index. The coordinator's own
decisions (ids, which answer wins, who may answer, expiry, cancel) are tested on plain
values in tests/actors/chat/; the session's side in tests/actors/session/test_approvals.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.helpers import say as say_as
from tests.helpers import wait_until
from tether.actors.chat.interactions import Tick
from tether.actors.ports import ManualClock
from tether.actors.runtime import RemoteError, ask
from tether.adapters.anthropic_provider import AnthropicProvider
from tether.adapters.config import Settings
from tether.adapters.fake_llm import FakeLLM
from tether.adapters.host import Host
from tether.events.codec import encode
from tether.events.messages import (
    Accepted,
    ForkSession,
    InteractionAnswer,
    InteractionOpened,
    Killed,
    KillSession,
    ListSessions,
    QuestionRequest,
    SessionList,
    ToolResultBlock,
)

SCRIPT = """
responses:
  - match: "publish"
    blocks:
      - tool_use: {name: run_shell, input: {command: "git push origin main"}}
  - match: "exit code"
    blocks: [{text: "It ran."}]
  - match: "refused"
    blocks: [{text: "It did not run."}]
"""


def start(make_settings: Callable[..., Settings], fake_llm: Callable[[str], FakeLLM],
          script: str = SCRIPT) -> tuple[Host, ManualClock]:
    llm = fake_llm(script + script.split("responses:\n", 1)[1] * 3)
    clock = ManualClock()
    settings = make_settings(anthropic_base_url=llm.base_url, approval_timeout=300.0)
    host = Host(settings, provider=AnthropicProvider(None, llm.base_url), clock=clock)
    return host.start(), clock


def say(host: Host, text: str, sid: str = "", user: str = "ana") -> str:
    return say_as(host, text, sid, user=user)


def result_of(host: Host, sid: str) -> ToolResultBlock:
    session = host.app.session(sid)
    assert session is not None
    return next(b for t in session.history for b in t.content if isinstance(b, ToolResultBlock))


def test_approve_runs_and_text_rejects(
    make_settings: Callable[..., Settings], fake_llm: Callable[[str], FakeLLM],
    watch_channel: Callable[..., Any],
) -> None:
    host, _ = start(make_settings, fake_llm)
    try:
        channel = watch_channel(host, "test")
        sid = say(host, "please publish it")
        asked = channel.wait_for("approval").text
        assert "git push origin main" in asked and "a person (tier 3)" in asked
        interaction = asked.split()[1].rstrip(":")
        say(host, f"/approve {interaction}", sid)
        channel.wait_for("completed")
        result = result_of(host, sid)
        assert "exit code" in result.content  # it ran (git fails outside a repository)
        decided = [e for e in host.app.session_events(sid)
                   if type(e).__name__ == "ToolCallDecided"]
        assert [(e.decision, e.tier) for e in decided] == [("escalate", "escalation"),
                                                         ("allow", "human")]
        assert "approved by ana" in decided[-1].reason

        say(host, "publish it again", sid)
        channel.wait_for("approval")
        say(host, "no, not on a Friday", sid)  # plain text: a no, with the text as reason
        channel.wait_for("completed")
        session = host.app.session(sid)
        assert session is not None
        refused = [b for t in session.history for b in t.content
                   if isinstance(b, ToolResultBlock)][-1]
        assert refused.is_error and "not on a Friday" in refused.content
        texts = [e.text for e in host.app.session_events(sid)
                 if type(e).__name__ == "UserMessageReceived"]
        assert "no, not on a Friday" not in texts  # the answer never reached the model
    finally:
        host.stop()


def test_no_answer_in_time_is_a_no_and_a_kill_cancels(
    make_settings: Callable[..., Settings], fake_llm: Callable[[str], FakeLLM],
    watch_channel: Callable[..., Any],
) -> None:
    host, clock = start(make_settings, fake_llm)
    try:
        channel = watch_channel(host, "test")
        sid = say(host, "please publish it")
        channel.wait_for("approval")
        clock.advance(299)
        host.coordinator.tell(Tick())
        clock.advance(2)
        host.coordinator.tell(Tick())
        assert "expired" in channel.wait_for("approval").text
        channel.wait_for("completed")
        assert "no answer within 300 s" in result_of(host, sid).content

        sid2 = say(host, "please publish it")
        channel.wait_for("approval")
        ask(host.bus, host.subjects.manager, KillSession(session_id=sid2), Killed)
        assert "cancelled" in channel.wait_for("approval").text
        outcomes = [n for n in host.app.recorder.select_notifications(start=1, limit=1000)
                    if n.topic.endswith("Interaction.Expired")
                    or n.topic.endswith("Interaction.Cancelled")]
        assert len(outcomes) == 2
    finally:
        host.stop()


def test_the_terminal_answers_approvals_during_the_turn_and_reasons_need_no_id(
    make_settings: Callable[..., Settings], fake_llm: Callable[[str], FakeLLM],
    watch_channel: Callable[..., Any],
) -> None:
    import io

    from tether.adapters.terminal import TerminalConnector

    host, _ = start(make_settings, fake_llm)
    try:
        out = io.StringIO()
        asked: list[str] = []
        terminal = TerminalConnector(host.bus, host.subjects, channel="term", out=out,
                                     answer=lambda prompt: asked.append(prompt) or "y")
        terminal.say("please publish it")
        assert terminal.print_turn(timeout=30).kind == "completed"
        assert len(asked) == 1 and "approval" in out.getvalue()  # asked once, not again
        assert "approved by" in out.getvalue()
        assert "exit code" in result_of(host, terminal.session_id).content

        channel = watch_channel(host, "test")
        sid = say(host, "please publish it")
        channel.wait_for("approval")
        say(host, "/deny not today please", sid)
        channel.wait_for("completed")
        assert "not today please" in result_of(host, sid).content
        terminal.close()
    finally:
        host.stop()


def test_typing_what_the_notice_says_at_the_terminals_prompt_does_what_it_says(
    make_settings: Callable[..., Settings], fake_llm: Callable[[str], FakeLLM],
) -> None:
    """The notice says "Reply /approve ID": typed at the approval prompt, it approves (it
    used to deny the call with "/approve ID" as the reason)."""
    import io
    import re

    from tether.adapters.terminal import TerminalConnector

    host, _ = start(make_settings, fake_llm)
    try:
        out = io.StringIO()

        def as_the_notice_says(prompt: str) -> str:
            found = re.findall(r"Reply (/approve \w+)", out.getvalue())
            return found[-1]

        terminal = TerminalConnector(host.bus, host.subjects, channel="term", out=out,
                                     answer=as_the_notice_says)
        terminal.say("please publish it")
        assert terminal.print_turn(timeout=30).kind == "completed"
        assert "exit code" in result_of(host, terminal.session_id).content  # it ran
        decided = _calls(host, terminal.session_id, "ToolCallDecided")
        assert decided[-1].decision == "allow" and decided[-1].tier == "human"
        terminal.close()
    finally:
        host.stop()


def _calls(host: Host, sid: str, kind: str) -> list[Any]:
    return [e for e in host.app.session_events(sid) if type(e).__name__ == kind]


def test_only_the_owner_or_a_named_approver_decides(
    make_settings: Callable[..., Settings], fake_llm: Callable[[str], FakeLLM],
    watch_channel: Callable[..., Any],
) -> None:
    """bo may not approve ana's call, deny it by text, switch her session to auto mode,
    move its folder or clear its context: each message is refused and recorded, and the
    call still waits. Nor does an answer published straight to the coordinator count (it
    takes nothing from the bus). An
    approver the settings name for the session's home channel may decide."""
    llm = fake_llm(SCRIPT + SCRIPT.split("responses:\n", 1)[1] * 3)
    settings = make_settings(anthropic_base_url=llm.base_url,
                             approvers={"test": ["carol"], "bo-chat": ["bo"]})
    host = Host(settings, provider=AnthropicProvider(None, llm.base_url)).start()
    try:
        channel = watch_channel(host, "test")
        bo_sees = watch_channel(host, "bo-chat")
        sid = say(host, "please publish it")
        interaction = channel.wait_for("approval").text.split()[1].rstrip(":")
        tries = [f"/approve {interaction}", "no, never", "/edit", "/dir sub", "/clear"]
        for text in tries:  # bo approves for bo-chat, not for ana's session's home chat
            with pytest.raises(RemoteError, match="not_allowed"):
                say_as(host, text, sid, channel="bo-chat", user="bo")
            assert "bo may not send messages to session" in bo_sees.wait_for("error").text
        # Published straight to the coordinator, it is refused before anyone reads it:
        # the coordinator takes nothing from the bus (a request is answered not_allowed,
        # and is handled after the answer published before it).
        host.bus.publish(host.subjects.interactions, encode(InteractionAnswer(
            session_id=sid, interaction_id=interaction, approved=True, user="bo",
            channel="bo-chat")))
        with pytest.raises(RemoteError, match="not_allowed"):
            ask(host.bus, host.subjects.interactions, QuestionRequest(
                session_id=sid, call_id="probe", question="?", channel="bo-chat"),
                InteractionOpened)
        session = host.app.session(sid)
        assert session is not None and session.mode == "default"
        assert session.workspace == settings.workspace and session.history
        assert [e.tier for e in _calls(host, sid, "ToolCallDecided")] == ["escalation"]
        assert not _calls(host, sid, "ToolCallStarted")  # nothing ran, nothing refused

        say_as(host, f"/approve {interaction}", sid, user="carol")  # a named approver
        channel.wait_for("completed")
        decided = _calls(host, sid, "ToolCallDecided")
        assert "approved by carol" in decided[-1].reason
        assert _calls(host, sid, "ToolCallStarted")

        wait_until(lambda: len(host.audit.refusals("bo")) == 5, "the audit index")
        refused = host.audit.refusals("bo")
        assert [(r.kind, r.channel) for r in refused] == [("not_approver", "bo-chat")] * 5
        assert [r.excerpt for r in refused] == tries
        assert not host.audit.refusals("carol") and not host.audit.refusals("ana")
    finally:
        host.stop()


def test_a_fork_belongs_to_its_sources_owner_and_replies_go_only_to_request_inboxes(
    make_settings: Callable[..., Settings], fake_llm: Callable[[str], FakeLLM],
    watch_channel: Callable[..., Any],
) -> None:
    """A fork request names no principal NATS vouched for, so its ``user`` does not make
    an owner; and the manager, which connectors may publish on, never answers onto a
    subject the sender chose."""
    host, _ = start(make_settings, fake_llm)
    try:
        channel = watch_channel(host, "test")
        sid = say(host, "please publish it")
        channel.wait_for("approval")
        forked = ask(host.bus, host.subjects.manager, ForkSession(
            session_id=sid, user="mallory"), Accepted)
        wait_until(lambda: host.app.session(forked.session_id) is not None, "the fork")
        fork = host.app.session(forked.session_id)
        assert fork is not None and fork.owner == "ana"

        victim = host.subjects.session(sid)
        landed: list[bytes] = []
        sub = host.bus.subscribe(victim, lambda m: landed.append(m.data))
        try:
            host.bus.publish(host.subjects.manager, encode(ListSessions()), reply=victim)
            ask(host.bus, host.subjects.manager, ListSessions(), SessionList)  # a barrier
            host.bus.flush()
        finally:
            sub.close()
        assert landed == []
    finally:
        host.stop()

