"""Session titles: when, the request, and cleaning the answer."""

from __future__ import annotations

from tether.actors.model.titles import (
    TITLE_MAX,
    clean_title,
    exchange_messages,
    title_request,
    wants_title,
)
from tether.events.messages import TextBlock, ToolResultBlock, ToolUseBlock
from tether.events.session import Turn


def test_a_title_is_wanted_from_six_messages_until_there_is_one() -> None:
    assert not wants_title(5, "")
    assert wants_title(6, "")
    assert not wants_title(12, "Fix the login bug")


def test_tool_calls_and_results_are_not_exchanges() -> None:
    call = Turn("assistant", [TextBlock("Let me look."),
                              ToolUseBlock(id="t1", name="read_file", input={"path": "a"})])
    results = Turn("user", [ToolResultBlock(tool_use_id="t1", content="...")])
    # one busy turn: a question, five rounds of tools, an answer -- 12 messages, 2 counted
    busy = [Turn("user", [TextBlock("fix it")]), *[call, results] * 5,
            Turn("assistant", [TextBlock("Fixed.")])]
    assert len(busy) == 12 and exchange_messages(busy) == 2
    assert not wants_title(exchange_messages(busy), "")
    three = [*busy, Turn("user", [TextBlock("thanks")]), Turn("assistant", [TextBlock("ok")]),
             Turn("user", [TextBlock("bye")]), Turn("assistant", [TextBlock("bye")])]
    assert exchange_messages(three) == 6 and wants_title(exchange_messages(three), "")


def test_the_request_carries_the_conversation_and_no_tools() -> None:
    history = [Turn("user", [TextBlock("fix the login bug")]),
               Turn("assistant", [TextBlock("Looking at auth.py")])]
    request = title_request(history, model="claude-haiku-4-5")
    text = request.messages[0]["content"][0]["text"]
    assert "fix the login bug" in text and "auth.py" in text
    assert request.tools == [] and request.max_tokens == 64 and "title" in request.system


def test_answers_are_cleaned() -> None:
    assert clean_title('"Fix the login bug."') == "Fix the login bug"
    assert clean_title("Title: **Refactor   the parser**\nmore text") == "Refactor the parser"
    assert clean_title("\n\n  'Deploy notes'  ") == "Deploy notes"
    assert clean_title("") == ""
    assert clean_title("\u201cCurly quotes\u201d") == "Curly quotes"


def test_long_answers_are_cut_at_a_word_within_the_limit() -> None:
    long = "word " * 30
    cut = clean_title(long)
    assert len(cut) <= TITLE_MAX and cut.endswith("word") and "  " not in cut
    unbroken = "x" * 100
    assert clean_title(unbroken) == "x" * TITLE_MAX
