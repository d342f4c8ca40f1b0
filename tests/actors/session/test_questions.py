"""The model asks the chat (AskUserQuestion), decided on plain values: a bad question is
refused to the model, text while a question waits goes to the coordinator (never into the
conversation), and no answer is an error result the model goes on from.

(Which chat text answers which interaction, and when a question expires, are the
coordinator's: tests/actors/chat/test_questions.py and test_endings.py.)
"""

from __future__ import annotations

from tests.actors.session.driver import SID, Core, calls_model
from tether.events.messages import (
    Accepted,
    ChatText,
    InteractionSettled,
    QuestionRequest,
    ToolResultBlock,
    ToolUseBlock,
)
from tether.events.session import Session


def tool_results(core: Core) -> list[ToolResultBlock]:
    return [b for t in core.session.history for b in t.content if isinstance(b, ToolResultBlock)]


def ask(core: Core, text: str) -> ToolUseBlock:
    """``text`` starts a turn whose model asks which colour."""
    core.say(text)
    call = ToolUseBlock(id=f"q{len(core.log)}", name="AskUserQuestion",
                        input={"question": "Which colour?", "options": ["blue", "red"]})
    assert core.call_tools(call).sent(QuestionRequest)
    return call


def settled(call: ToolUseBlock, outcome: str, **fields: str) -> InteractionSettled:
    return InteractionSettled(session_id=SID, call_id=call.id, interaction_id="i1",
                              kind="question", outcome=outcome, **fields)  # type: ignore[arg-type]


def test_a_bad_question_is_refused_to_the_model() -> None:
    core = Core()
    core.say("ask me")
    fed = core.call_tools(ToolUseBlock(id="q1", name="AskUserQuestion",
                                       input={"prompt": "wrong field"}))
    refused = tool_results(core)[-1]
    assert refused.is_error and "AskUserQuestion needs" in refused.content
    decided = [(e.decision, e.tier) for e in core.log if isinstance(e, Session.ToolCallDecided)]
    assert decided == [("deny", "engine")]
    assert not fed.sent(QuestionRequest) and calls_model(fed)


def test_text_answers_a_question_and_silence_is_no_answer() -> None:
    core = Core()
    call = ask(core, "paint the fence")
    text = core.say("blue, please")  # to the coordinator, which settles the question
    assert [(m.text, m.user) for m in text.sent(ChatText)] == [("blue, please", "alice")]
    assert text.sent(Accepted) and text.events == [] and not calls_model(text)
    core.feed(settled(call, "answered", by="alice", answer="blue, please"))
    answered = tool_results(core)[-1]
    assert not answered.is_error and answered.content == "The user answered: blue, please"
    core.answer("Painting it.")

    call = ask(core, "paint the shed")
    fed = core.feed(settled(call, "expired", by="timeout", reason="no answer within 300 s"))
    unanswered = tool_results(core)[-1]
    assert unanswered.is_error and "no answer within 300 s" in unanswered.content
    assert calls_model(fed)
    # The question's answer never became a user message of the conversation.
    received = [e.text for e in core.log if isinstance(e, Session.UserMessageReceived)]
    assert received == ["paint the fence", "paint the shed"]
