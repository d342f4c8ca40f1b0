"""The engine's own tools, pure: definitions, questions, the plan and the reply to a review."""

from __future__ import annotations

import pytest

from tether.actors import engine_tools
from tether.actors.engine_tools import (
    ASK_USER_QUESTION,
    EXIT_PLAN_MODE,
    FALLBACK_PLAN,
    Question,
    definitions,
    implementation_prompt,
    parse_question,
    plan_result,
    read_plan_reply,
    resolve_plan,
    system_prompt,
)

PLAN_FILE = "/work/.tether/plans/s1.md"


def names(mode: str) -> list[str]:
    return [tool["name"] for tool in definitions(mode)]


def test_exit_plan_mode_is_offered_only_while_planning() -> None:
    assert names("plan") == [ASK_USER_QUESTION, EXIT_PLAN_MODE]
    assert names("default") == [ASK_USER_QUESTION]
    assert names("auto") == [ASK_USER_QUESTION]


def test_definitions_are_well_formed_and_not_shared() -> None:
    for tool in definitions("plan"):
        assert tool["description"]
        assert tool["input_schema"]["type"] == "object"
    ask = definitions("default")[0]
    assert ask["input_schema"]["required"] == ["question"]
    ask["name"] = "changed"
    assert names("default") == [ASK_USER_QUESTION]


def test_a_valid_question_is_parsed() -> None:
    assert parse_question({"question": "Which database?"}) == Question("Which database?", [])
    asked = parse_question({"question": "Which one?", "options": ["sqlite", "postgres"]})
    assert isinstance(asked, Question)
    assert asked.question == "Which one?" and asked.options == ["sqlite", "postgres"]


@pytest.mark.parametrize(
    "tool_input",
    [
        {},
        {"options": ["a", "b"]},
        {"question": 42},
        {"question": "Which?", "options": "a, b"},
        {"question": "Which?", "choices": ["a"]},
    ],
    ids=["empty", "missing-question", "not-a-string", "options-not-a-list", "unknown-field"],
)
def test_a_malformed_question_is_an_error_message(tool_input: dict[str, object]) -> None:
    result = parse_question(tool_input)
    assert isinstance(result, str)
    assert result.startswith("AskUserQuestion needs {question: string")


@pytest.mark.parametrize("text", ["", "   \n\t"])
def test_an_empty_question_is_refused(text: str) -> None:
    assert parse_question({"question": text}) == "AskUserQuestion needs a non-empty question"


def test_the_plan_instruction_names_the_plan_file_only_in_plan_mode() -> None:
    base = "You are a careful coding agent."
    planning = system_prompt(base, "plan", PLAN_FILE)
    assert planning.startswith(base + "\n\n")
    assert "plan mode" in planning and PLAN_FILE in planning and EXIT_PLAN_MODE in planning
    assert system_prompt(base, "default", PLAN_FILE) == base
    assert system_prompt(base, "auto", PLAN_FILE) == base


def test_the_plan_comes_from_the_file_first() -> None:
    assert resolve_plan("  1. from disk\n", "1. written", "1. streamed") == (
        "1. from disk", "file")


def test_then_from_what_was_written_to_the_plan_file() -> None:
    assert resolve_plan(None, "1. written\n", "1. streamed") == ("1. written", "written")
    assert resolve_plan("", "1. written", "1. streamed") == ("1. written", "written")
    assert resolve_plan(" \n\t", "1. written", "1. streamed") == ("1. written", "written")


def test_then_from_the_streamed_reply() -> None:
    assert resolve_plan(None, None, "Here is my plan: 1. x") == (
        "Here is my plan: 1. x", "streamed")
    assert resolve_plan("  ", "\n\n", " Here is my plan ") == ("Here is my plan", "streamed")


def test_else_a_fallback_line_that_says_how_to_get_the_plan() -> None:
    for on_disk, written, streamed in ((None, None, ""), ("  ", "\n", " \t ")):
        plan, source = resolve_plan(on_disk, written, streamed)
        assert (plan, source) == (FALLBACK_PLAN, "fallback")
    assert "/adjust" in FALLBACK_PLAN


@pytest.mark.parametrize(
    ("text", "feedback"),
    [
        ("  Use sqlite instead of postgres.  ", "Use sqlite instead of postgres."),
        ("no", "no"),
        ("proceed, but add tests first", "proceed, but add tests first"),
        ("", ""),
        # Seed 000: plain text is feedback, even a yes; approving takes /proceed.
        ("ok", "ok"), ("yes", "yes"), ("go", "go"), ("proceed", "proceed"),
        ("clean", "clean"),
    ],
)
def test_plain_text_is_always_feedback(text: str, feedback: str) -> None:
    assert read_plan_reply(text) == ("adjust", feedback)


def test_proceeding_is_not_an_error() -> None:
    text, is_error = plan_result("proceed", "")
    assert not is_error
    assert "approved" in text and "fresh context" not in text


def test_a_clean_proceed_says_the_context_is_fresh() -> None:
    text, is_error = plan_result("clean_proceed", "")
    assert not is_error
    assert "approved" in text and "fresh context" in text


def test_adjusting_is_an_error_carrying_the_feedback() -> None:
    text, is_error = plan_result("adjust", "split step 3 in two")
    assert is_error
    assert "split step 3 in two" in text and EXIT_PLAN_MODE in text
    text, is_error = plan_result("adjust", "")
    assert is_error and "(no details given)" in text


def test_the_implementation_prompt_contains_the_plan() -> None:
    plan = "1. add the table\n2. migrate\n3. run the tests, then the benchmarks"
    prompt = implementation_prompt(plan)
    assert f"<plan>\n{plan}\n</plan>" in prompt
    assert "approved" in prompt.lower()


def test_a_plan_of_fifty_characters_or_fewer_is_not_embedded() -> None:
    """Seed 000: a stripped plan of 50 characters or fewer gives the plain instruction."""
    short = "  " + "x" * 50 + "\n"
    assert implementation_prompt(short) == "The plan is approved. Implement it now."
    assert "<plan>" in implementation_prompt("x" * 51)


def test_the_engine_tools_are_claude_codes_two_and_the_meta_tools() -> None:
    assert {"AskUserQuestion", "ExitPlanMode", "load_tools", "load_skills"} == (
        engine_tools.ENGINE_TOOLS)


def test_load_tools_offers_what_is_not_loaded_and_checks_the_groups() -> None:
    groups = {"files": "read and write (read_file, write_file)", "git": "git (git_status)"}
    offered = engine_tools.load_tools_definition(groups, loaded=["files"])
    assert "git: git (git_status)" in offered["description"]
    assert "files:" not in offered["description"]
    assert offered["input_schema"]["properties"]["groups"]["items"]["enum"] == ["files", "git"]
    assert engine_tools.parse_load_tools({"groups": ["git", "git"]}, groups) == ["git"]
    assert "no tool group web" in str(engine_tools.parse_load_tools({"groups": ["web"]}, groups))
    assert "at least one" in str(engine_tools.parse_load_tools({"groups": []}, groups))
