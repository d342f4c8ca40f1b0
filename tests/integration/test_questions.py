"""The model asks the chat (AskUserQuestion); text answers it, after any pending approval.

End to end, the wiring: the answer and the expiry on the host's clock through the bus and
the store, and the terminal's prompt. Which text answers what and when a question expires
are the coordinator's, tested on plain values in tests/actors/chat/test_questions.py and
test_endings.py; what the session does with a question (a bad one refused, the answer as
the call's result) in tests/actors/session/test_questions.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.helpers import say
from tether.actors.chat.interactions import Tick
from tether.actors.ports import ManualClock
from tether.adapters.anthropic_provider import AnthropicProvider
from tether.adapters.config import Settings
from tether.adapters.fake_llm import FakeLLM
from tether.adapters.host import Host
from tether.events.interactions import Interaction
from tether.events.messages import ToolResultBlock

SCRIPT = """
responses:
  - match: "paint"
    blocks:
      - tool_use: {name: AskUserQuestion, input: {question: "Which colour?", options: [blue, red]}}
  - match: "The user answered"
    blocks: [{text: "Painting it."}]
  - match: "No answer"
    blocks: [{text: "I will pick one myself."}]
  - match: "publish"
    blocks:
      - tool_use: {name: run_shell, input: {command: "git push origin main"}}
  - match: "refused"
    blocks: [{text: "It did not run."}]
"""


def start(make_settings: Callable[..., Settings], fake_llm: Callable[[str], FakeLLM],
          ) -> tuple[Host, ManualClock]:
    llm = fake_llm(SCRIPT + SCRIPT.split("responses:\n", 1)[1])
    clock = ManualClock()
    settings = make_settings(anthropic_base_url=llm.base_url, approval_timeout=300.0)
    host = Host(settings, provider=AnthropicProvider(None, llm.base_url), clock=clock)
    return host.start(), clock


def tool_results(host: Host, sid: str) -> list[ToolResultBlock]:
    session = host.app.session(sid)
    assert session is not None
    return [b for t in session.history for b in t.content if isinstance(b, ToolResultBlock)]


def interactions(host: Host) -> list[Interaction]:
    """Every stored Interaction, oldest first (read back through the store)."""
    found: dict[Any, Interaction] = {}
    for item in host.app.recorder.select_notifications(start=1, limit=10_000):
        if item.topic.startswith(f"{Interaction.__module__}:Interaction"):
            loaded = host.app.repository.get(item.originator_id)
            found.setdefault(item.originator_id, loaded)
    return list(found.values())


def test_text_answers_a_question_and_silence_is_no_answer(
    make_settings: Callable[..., Settings], fake_llm: Callable[[str], FakeLLM],
    watch_channel: Callable[..., Any],
) -> None:
    host, clock = start(make_settings, fake_llm)
    try:
        channel = watch_channel(host, "test")
        sid = say(host, "paint the fence", user="ana")
        asked = channel.wait_for("question").text
        assert "Which colour?" in asked and "- blue" in asked and "- red" in asked
        say(host, "blue, please", sid, user="ana")
        channel.wait_for("completed")
        answered = tool_results(host, sid)[-1]
        assert not answered.is_error and answered.content == "The user answered: blue, please"

        say(host, "paint the shed", sid, user="ana")
        channel.wait_for("question")
        clock.advance(301)
        host.coordinator.tell(Tick())
        channel.wait_for("completed")
        unanswered = tool_results(host, sid)[-1]
        assert unanswered.is_error and "no answer within 300 s" in unanswered.content
        stored = [(i.kind, i.outcome) for i in interactions(host)]
        assert stored == [("question", "answered"), ("question", "expired")]
        # The question's answer never became a user message of the conversation.
        received = [e.text for e in host.app.session_events(sid)
                    if type(e).__name__ == "UserMessageReceived"]
        assert received == ["paint the fence", "paint the shed"]
    finally:
        host.stop()


def test_the_terminal_asks_the_person_and_sends_the_answer(
    make_settings: Callable[..., Settings], fake_llm: Callable[[str], FakeLLM],
) -> None:
    import io

    from tether.adapters.terminal import TerminalConnector

    host, _ = start(make_settings, fake_llm)
    try:
        out = io.StringIO()
        prompts: list[str] = []
        terminal = TerminalConnector(host.bus, host.subjects, channel="term", out=out,
                                     answer=lambda prompt: prompts.append(prompt) or "red")
        terminal.say("paint the door")
        assert terminal.print_turn(timeout=30).kind == "completed"
        assert prompts == ["answer> "] and "Which colour?" in out.getvalue()
        assert tool_results(host, terminal.session_id)[-1].content == "The user answered: red"
        terminal.close()
    finally:
        host.stop()
