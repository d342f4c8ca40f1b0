"""Context assembly: the history as the Messages API expects it."""

from __future__ import annotations

import copy
import datetime as dt
import itertools
from typing import Any

import pytest

from tether.actors.model import compaction, context, turns
from tether.actors.model.compaction import (
    compacted_history,
    context_budget,
    memory_append,
    memory_request,
    needs_compaction,
    parse_facts,
    plan_compaction,
    render_transcript,
    split_for_compaction,
    summary_message,
    summary_request,
)
from tether.actors.model.context import (
    DEFAULT_SYSTEM_PROMPT,
    build_request,
    clamp_max_tokens,
    coalesce,
    context_window,
    estimate_history_tokens,
    estimate_message_tokens,
    estimate_request_tokens,
    estimate_tokens,
    json_tokens,
    shape_messages,
    to_api_messages,
)
from tether.actors.model.models import DEFAULT_MODEL, model_info
from tether.actors.model.stale_results import (
    SUMMARY_MARK,
    content_kind,
    summarize_result,
    summarize_stale_results,
)
from tether.actors.model.turns import can_split_before, json_text, starts_turn, turn_numbers
from tether.events.messages import TextBlock, ToolResultBlock, ToolUseBlock, Usage
from tether.events.session import Session, Turn


def _session_with_tool_round() -> Session:
    s = Session(session_id="s1", name="n", workspace="/ws", model="m", channel="c")
    s.receive_user_message(text="list files", channel="c", user="u")
    s.append_assistant_message(
        content=[TextBlock("Sure."), ToolUseBlock("tu_1", "shell", {"cmd": "ls"}),
                 ToolUseBlock("tu_2", "read_file", {"path": "x"})],
        stop_reason="tool_use", usage=Usage(1, 1), generation=1,
    )
    s.record_tool_result(call_id="tu_1", tool="shell", output="a.py", is_error=False)
    s.refuse_tool_call(call_id="tu_2", reason="outside workspace")
    s.record_ttsr_interruption(rules=["r"], reminder="Remember the rule.", generation=2,
                               partial_text="", source="text", context_mode="discard")
    return s


def test_blocks_render_in_messages_api_shape() -> None:
    messages = to_api_messages(_session_with_tool_round().history)

    assert messages == [
        {"role": "user", "content": [{"type": "text", "text": "list files"}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Sure."},
            {"type": "tool_use", "id": "tu_1", "name": "shell", "input": {"cmd": "ls"}},
            {"type": "tool_use", "id": "tu_2", "name": "read_file", "input": {"path": "x"}},
        ]},
        # tool results and the TTSR reminder merged into one user message
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "tu_1", "content": "a.py", "is_error": False},
            {"type": "tool_result", "tool_use_id": "tu_2",
             "content": "refused: outside workspace", "is_error": True},
            {"type": "text", "text": "Remember the rule."},
        ]},
    ]


def test_roles_alternate_after_merging() -> None:
    history = [
        Turn("user", [TextBlock("a")]),
        Turn("user", [TextBlock("b")]),
        Turn("assistant", [TextBlock("c")]),
        Turn("assistant", [TextBlock("d")]),
        Turn("user", [TextBlock("e")]),
    ]
    messages = to_api_messages(history)
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert [[b["text"] for b in m["content"]] for m in messages] == [["a", "b"], ["c", "d"], ["e"]]


def test_assembly_leaves_the_history_untouched() -> None:
    history = _session_with_tool_round().history
    before = copy.deepcopy(history)
    to_api_messages(history)
    to_api_messages(history)
    assert history == before
    assert to_api_messages(history) == to_api_messages(before)


def test_empty_history() -> None:
    assert to_api_messages([]) == []


def test_build_request() -> None:
    tools = [{"name": "shell", "description": "run", "input_schema": {"type": "object"}}]
    history = [Turn("user", [TextBlock("hi")])]

    request = build_request(history, model="claude-sonnet-4", tools=tools, max_tokens=1024)

    assert request.model == "claude-sonnet-4"
    assert request.system == DEFAULT_SYSTEM_PROMPT
    assert request.tools == tools
    assert request.max_tokens == 1024
    assert request.messages == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    custom = build_request(history, model="m", tools=[], max_tokens=1, system="Be terse.")
    assert custom.system == "Be terse."
    # the estimates travel with the request (for compaction and the generation events)
    assert request.history_tokens == estimate_history_tokens(request.messages)
    assert request.input_tokens == estimate_request_tokens(
        DEFAULT_SYSTEM_PROMPT, request.messages, tools)


def test_tool_result_default_is_error_is_explicit() -> None:
    messages = to_api_messages([Turn("user", [ToolResultBlock("t", "ok")])])
    assert messages[0]["content"][0]["is_error"] is False


# --- context shaping ----------------------------------------------------------------------

BIG = "x = 1\n" * 200  # 1200 bytes, long enough that its summary is shorter


def _tool_turn(n: int, output: str = BIG, is_error: bool = False) -> list[Turn]:
    """One user turn with a tool round: text, tool_use, tool_result, answer."""
    return [
        Turn("user", [TextBlock(f"ask {n}")]),
        Turn("assistant", [ToolUseBlock(f"tu_{n}", "read_file", {"path": f"f{n}"})]),
        Turn("user", [ToolResultBlock(f"tu_{n}", output, is_error)]),
        Turn("assistant", [TextBlock(f"done {n}")]),
    ]


def _history(turns: int) -> list[Turn]:
    return [turn for n in range(1, turns + 1) for turn in _tool_turn(n)]


def _results(history: list[Turn]) -> dict[str, str]:
    return {b.tool_use_id: b.content for t in history for b in t.content
            if isinstance(b, ToolResultBlock)}


def _valid_api_messages(messages: list[dict[str, Any]]) -> None:
    """Roles alternate, each tool_use is answered first thing in the next user message."""
    roles = [m["role"] for m in messages]
    assert all(a != b for a, b in itertools.pairwise(roles)), roles
    for i, message in enumerate(messages):
        uses = [b["id"] for b in message["content"] if b["type"] == "tool_use"]
        if uses:
            following = messages[i + 1]["content"]
            head = [b["tool_use_id"] for b in following[: len(uses)]]
            assert head == uses


# tokens and clamping


def test_estimate_tokens() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("a") == 1
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2
    assert estimate_tokens("x" * 4000) == 1000


def test_estimate_request_tokens_counts_every_part() -> None:
    history = _history(1)
    messages = to_api_messages(history)
    tools = [{"name": "shell", "description": "d" * 400, "input_schema": {"type": "object"}}]
    base = estimate_request_tokens("", messages, [])
    assert base == estimate_history_tokens(history)  # API dicts and Turns agree
    assert base >= 1200 // 4  # the tool result dominates
    assert estimate_request_tokens("s" * 400, messages, []) == base + 100
    assert estimate_request_tokens("", messages, tools) > base + 100
    assert estimate_message_tokens(Turn("user", [])) == context.MESSAGE_OVERHEAD


@pytest.mark.parametrize("value", [
    {"name": "read_file", "input_schema": {"type": "object", "required": ["path"]}},
    {"path": "café/naïve.txt", "lines": [1, 2.5, None, True], "big": 2**70},
    {"text": 'quote " backslash \\ tab \t newline \n bell \x07'},
    {1: "an int key", 1.5: "a float key"},
    {None: "a None key"},
    {"when": dt.date(2026, 11, 29)},  # what JSON has not, as its str
    [],
])
def test_json_tokens_measures_json_text(value: Any) -> None:
    """The estimate is the one of :func:`json_text`'s JSON, whichever encoder made it."""
    assert json_tokens(value) == estimate_tokens(json_text(value))


def test_clamp_max_tokens() -> None:
    sonnet = model_info("claude-sonnet-4-6")
    assert clamp_max_tokens(4096, "claude-sonnet-4-6", 1000) == 4096  # the request
    assert clamp_max_tokens(10**6, "claude-sonnet-4-6", 1000) == sonnet.max_output  # limit
    left = clamp_max_tokens(4096, "claude-sonnet-4-6", sonnet.context_window - 100)
    assert left == 100  # what the window leaves
    # at least 1, even when the input fills or overflows the window
    assert clamp_max_tokens(4096, "claude-sonnet-4-6", sonnet.context_window) == 1
    assert clamp_max_tokens(4096, "claude-sonnet-4-6", sonnet.context_window + 5000) == 1
    assert clamp_max_tokens(0, "claude-sonnet-4-6", 0) == 1
    # an unknown model is clamped to the default's figures
    assert clamp_max_tokens(10**6, "mystery", 0) == DEFAULT_MODEL.max_output
    assert clamp_max_tokens(10**6, "mystery", DEFAULT_MODEL.context_window - 7) == 7


# turns


def test_turns_start_at_user_messages_without_tool_results() -> None:
    history = [
        Turn("assistant", [TextBlock("before anything")]),
        *_tool_turn(1),
        Turn("user", [TextBlock("reminder")]),  # text on its own starts a turn
        Turn("assistant", [TextBlock("ok")]),
    ]
    assert turn_numbers(history) == [0, 1, 1, 1, 1, 2, 2]
    # a user message of results then text ends a turn and starts the next, but is no
    # place to cut: its results answer the tool_use before it
    mixed = {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": "r"},
        {"type": "text", "text": "reminder"}]}
    assert starts_turn(mixed)
    assert not can_split_before(mixed)
    assert can_split_before(history[1])
    assert not can_split_before(history[3])
    assert not starts_turn(history[3])
    merged = to_api_messages([*history[1:4], Turn("user", [TextBlock("next")])])
    assert turn_numbers(merged) == [1, 1, 2]
    assert starts_turn({"role": "user", "content": "plain string"})
    assert not starts_turn({"role": "user", "content": []})
    assert not starts_turn({"role": "assistant", "content": "hi"})


# stale tool results


def test_results_four_turns_old_are_summarized() -> None:
    history = _history(5)
    shaped = summarize_stale_results(history)
    results = _results(shaped)
    # turn 1 is 4 turns old (the current turn, 5, is 0 turns old): seed 001 summarizes
    # once current - turn >= 4
    assert results["tu_1"].startswith(SUMMARY_MARK)
    assert "\n" not in results["tu_1"]
    # turns 2..5 are at most 3 turns old: whole
    assert [results[f"tu_{n}"] for n in range(2, 6)] == [BIG] * 4


def test_a_result_three_turns_old_is_kept_whole() -> None:
    history = _history(4)  # turn 1 is 3 turns old
    assert summarize_stale_results(history) == history


def test_summaries_follow_as_turns_pass() -> None:
    history = _history(7)
    results = _results(summarize_stale_results(history))
    assert [results[f"tu_{n}"].startswith(SUMMARY_MARK) for n in range(1, 8)] == [
        True, True, True, False, False, False, False]
    results = _results(summarize_stale_results(history, keep_turns=1))
    assert [results[f"tu_{n}"] == BIG for n in range(1, 8)] == [False] * 6 + [True]


def test_summarizing_never_changes_the_stored_history() -> None:
    session = Session(session_id="s1", name="n", workspace="/ws", model="m", channel="c")
    for n in range(1, 7):
        session.receive_user_message(text=f"ask {n}", channel="c", user="u")
        session.append_assistant_message(
            content=[ToolUseBlock(f"tu_{n}", "read_file", {"path": "x"})],
            stop_reason="tool_use", usage=Usage(1, 1), generation=n)
        session.record_tool_result(call_id=f"tu_{n}", tool="read_file", output=BIG,
                                   is_error=False)
    before = copy.deepcopy(session.history)
    shaped = summarize_stale_results(session.history)
    assert shaped != before
    assert session.history == before
    api = to_api_messages(session.history)
    api_before = copy.deepcopy(api)
    shaped_api = summarize_stale_results(api)
    assert api == api_before
    assert shaped_api == to_api_messages(shaped)  # same result on API dicts and Turns


def test_a_summary_keeps_the_call_id_and_the_error_flag() -> None:
    history = [*_tool_turn(1, "E" * 500, is_error=True), *_history(5)[4:]]
    block = summarize_stale_results(history)[2].content[0]
    assert isinstance(block, ToolResultBlock)
    assert block.tool_use_id == "tu_1"
    assert block.is_error is True


def test_a_summary_is_not_summarized_again() -> None:
    once = summarize_stale_results(_history(6))
    again = summarize_stale_results(once)
    assert again == once
    assert _results(again)["tu_1"].count(SUMMARY_MARK) == 1
    # even when the summary itself is the content of a later, equally stale result
    long_summary = SUMMARY_MARK + " " + "y" * 500 + "]"
    history = [*_tool_turn(1, long_summary), *_history(5)[4:]]
    assert _results(summarize_stale_results(history))["tu_1"] == long_summary


def test_a_result_the_summary_would_not_shorten_stays() -> None:
    history = [*_tool_turn(1, "a.py"), *_history(5)[4:]]
    assert _results(summarize_stale_results(history))["tu_1"] == "a.py"


def test_summary_wording() -> None:
    assert summarize_result(BIG) == f"{SUMMARY_MARK} 1200 bytes, 200 lines, text]"
    py = "import os\n\ndef main():\n    return os.getcwd()\n"
    assert summarize_result(py) == f"{SUMMARY_MARK} {len(py)} bytes, 4 lines, Python source]"
    assert "2 bytes, 1 line, " in summarize_result("é")  # bytes, not characters
    error = "\n  FileNotFoundError: " + "z" * 200 + "\nmore\n"
    summary = summarize_result(error, is_error=True)
    first = ("FileNotFoundError: " + "z" * 200)[:100]
    assert summary.startswith(f"{SUMMARY_MARK} error, ")
    assert summary.endswith(f"; first line: {first}]")
    assert "\n" not in summary
    assert "first line" not in summarize_result("   \n", is_error=True)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("", "empty"),
        ("  \n", "empty"),
        ('{"a": [1, 2]}', "JSON"),
        ("[1, 2, 3]\n", "JSON"),
        ("{not json}", "text"),
        ("diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n", "a diff"),
        ("from x import y\n\nclass A:\n    pass\n", "Python source"),
        ("import os", "Python source"),
        ("README.md\nsrc/\nsrc/app.py\ntests/\n", "a listing"),
        ("drwxr-xr-x 2 u u 4096 Jan 1 00:00 src\n-rw-r--r-- 1 u u 10 Jan 1 00:00 a\n",
         "a listing"),
        ("The build passed.\nAll 12 tests ran.\n", "text"),
        ("one-word", "text"),
    ],
)
def test_content_kind(text: str, kind: str) -> None:
    assert content_kind(text) == kind


# coalescing


def _text(role: str, *texts: str) -> dict[str, Any]:
    return {"role": role, "content": [{"type": "text", "text": t} for t in texts]}


def test_adjacent_text_messages_of_a_role_are_joined() -> None:
    messages = [_text("user", "a"), _text("user", "b", "c"), _text("assistant", "d"),
                _text("user", "e")]
    assert coalesce(messages) == [_text("user", "a\n\nb\n\nc"), _text("assistant", "d"),
                                  _text("user", "e")]


def test_coalescing_never_crosses_tool_blocks() -> None:
    use = {"type": "tool_use", "id": "t", "name": "shell", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "t", "content": "out", "is_error": False}
    messages = [
        _text("user", "ask"),
        _text("assistant", "let me look"),
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [result]},
        _text("user", "reminder"),
        _text("user", "and more"),
        _text("assistant", "ok"),
    ]
    out = coalesce(messages)
    assert out == [
        _text("user", "ask"),
        # the text message and the tool_use message are put together, not joined
        {"role": "assistant", "content": [{"type": "text", "text": "let me look"}, use]},
        # the results stay first; the two text messages after them are joined
        {"role": "user", "content": [result, {"type": "text", "text": "reminder\n\nand more"}]},
        _text("assistant", "ok"),
    ]
    _valid_api_messages(out)
    # no text block ever holds text from both sides of a tool block
    texts = [b["text"] for m in out for b in m["content"] if b["type"] == "text"]
    assert all(not ("let me look" in t and "reminder" in t) for t in texts)


def test_text_blocks_with_extra_keys_are_not_joined() -> None:
    cached = {"role": "user", "content": [
        {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}}]}
    out = coalesce([cached, _text("user", "b")])
    assert out == [{"role": "user", "content": [cached["content"][0],
                                                {"type": "text", "text": "b"}]}]


def test_coalesce_leaves_its_input_and_blank_texts() -> None:
    messages = [_text("user", "a"), _text("user", "  "), {"role": "user", "content": "b"}]
    before = copy.deepcopy(messages)
    assert coalesce(messages) == [_text("user", "a\n\nb")]
    assert messages == before
    assert coalesce([]) == []
    blank = [_text("user", ""), _text("user", " ")]
    assert coalesce(blank) == [{"role": "user", "content": [{"type": "text", "text": ""},
                                                             {"type": "text", "text": " "}]}]


def test_coalesce_works_on_turns() -> None:
    history = [Turn("user", [TextBlock("a")]), Turn("user", [TextBlock("b")]),
               Turn("assistant", [TextBlock("c")])]
    assert coalesce(history) == [Turn("user", [TextBlock("a\n\nb")]),
                                 Turn("assistant", [TextBlock("c")])]


def _cont(role: str, text: str) -> Turn:
    return Turn(role, [TextBlock(text)], continues=True)


def test_a_continuation_is_glued_to_the_text_before_it() -> None:
    history = [Turn("user", [TextBlock("what colour is the ")]), _cont("user", "grass"),
               Turn("assistant", [TextBlock("green")]), _cont("assistant", " mostly"),
               Turn("user", [TextBlock("and")]), Turn("user", [TextBlock(" then")]),
               _cont("user", " more  ")]
    assert coalesce(history) == [
        Turn("user", [TextBlock("what colour is the grass")]),
        Turn("assistant", [TextBlock("green mostly")]),
        Turn("user", [TextBlock("and\n\n then more  ")]),  # nothing stripped
    ]
    assert [m["content"][0]["text"] for m in shape_messages(history)] == [
        "what colour is the grass", "green mostly", "and\n\n then more  "]


def test_a_continuation_is_never_glued_across_a_tool_block() -> None:
    call = Turn("assistant", [ToolUseBlock("t", "ls", {})])
    result = Turn("user", [ToolResultBlock("t", "a.py", False)])
    history = [Turn("user", [TextBlock("look")]), call, result, _cont("user", "on")]
    out = coalesce(history)
    assert out[-1] == Turn("user", [ToolResultBlock("t", "a.py", False), TextBlock("on")])
    # of several text blocks only the first goes on from the text before
    two = [Turn("user", [TextBlock("a ")]), Turn("user", [TextBlock("b"), TextBlock("c")],
                                                  continues=True)]
    assert coalesce(two) == [Turn("user", [TextBlock("a b\n\nc")])]


def test_a_continuation_starts_no_turn_and_is_never_cut_from_its_message() -> None:
    history = [Turn("user", [TextBlock("what colour is the ")]), _cont("user", "grass")]
    assert not starts_turn(history[1]) and not can_split_before(history[1])
    assert turns.turn_numbers(history) == [1, 1]
    assert render_transcript(history) == "User: what colour is the grass"
    # summarizing stale results keeps the flag
    old = [Turn("assistant", [ToolUseBlock("t", "ls", {})]),
           Turn("user", [ToolResultBlock("t", "x" * 5000, False)]), *history,
           Turn("assistant", [TextBlock("green")])]
    shaped = summarize_stale_results([*old, Turn("user", [TextBlock("q")]),
                                      _cont("user", "uh")], keep_turns=1)
    assert shaped[1] is not old[1] and [t.continues for t in shaped] == [
        False, False, False, True, False, False, True]


def test_shape_messages_gives_a_valid_request() -> None:
    session = _session_with_tool_round()
    session.receive_user_message(text="and now?", channel="c", user="u")
    shaped = shape_messages(session.history)
    _valid_api_messages(shaped)
    assert shaped[-1] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "tu_1", "content": "a.py", "is_error": False},
        {"type": "tool_result", "tool_use_id": "tu_2",
         "content": "refused: outside workspace", "is_error": True},
        {"type": "text", "text": "Remember the rule.\n\nand now?"},
    ]}
    long = shape_messages(_history(6))
    _valid_api_messages(long)
    assert long[2]["content"][0]["content"].startswith(SUMMARY_MARK)


# compaction planning


def test_context_budget() -> None:
    assert context_budget(200_000, 10_000) == 200_000 - 10_000 - 4096
    assert context_budget(200_000, 10_000, reserve=0) == 190_000
    assert context_budget(32_000, 30_000) == compaction.BUDGET_FLOOR  # the floor
    assert context_budget(32_000, 30_000, floor=1000) == 1000
    assert context_budget(100_000, 0, floor=1000) == 100_000 - 4096


def test_compaction_starts_at_70_percent() -> None:
    assert not needs_compaction(6999, 10_000)
    assert needs_compaction(7000, 10_000)
    assert needs_compaction(9000, 10_000)
    assert not needs_compaction(69, 100)
    assert needs_compaction(70, 100)
    assert not needs_compaction(0, 0)
    assert needs_compaction(1, 0)


def test_split_keeps_recent_within_30_percent() -> None:
    history = _history(10)
    per_turn = estimate_history_tokens(_tool_turn(1))
    budget = per_turn * 10  # 30%: three turns fit
    older, recent = split_for_compaction(history, budget)
    assert older + recent == history
    assert estimate_history_tokens(recent) <= budget * 30 // 100
    assert recent == history[-12:]  # the three last turns, whole
    assert can_split_before(recent[0])
    # one token less and only two turns fit
    _, recent = split_for_compaction(history, (3 * per_turn * 100 + 29) // 30 - 4)
    assert len(recent) == 8


def test_split_never_separates_a_tool_use_from_its_result() -> None:
    history = _history(6)
    for budget in range(1, estimate_history_tokens(history) * 4, 37):
        older, recent = split_for_compaction(history, budget)
        assert older + recent == history
        assert not recent or can_split_before(recent[0])
        used = {b.id for t in older for b in t.content if isinstance(b, ToolUseBlock)}
        answered = {b.tool_use_id for t in older for b in t.content
                    if isinstance(b, ToolResultBlock)}
        assert used == answered


def test_split_when_the_last_turn_alone_is_too_big() -> None:
    history = [*_history(2), *_tool_turn(3, "y" * 40_000)]
    older, recent = split_for_compaction(history, 10_000)
    assert recent == []
    assert older == history


def test_split_of_a_small_history_keeps_it_all() -> None:
    history = _history(2)
    assert split_for_compaction(history, 10**6) == ([], history)
    assert split_for_compaction([], 100) == ([], [])


def test_split_at_a_reminder_keeps_the_round_before_it_whole() -> None:
    history = [*_tool_turn(1), Turn("user", [TextBlock("reminder")]),
               Turn("assistant", [TextBlock("ok")])]
    older, recent = split_for_compaction(history, 100)
    assert recent == history[4:]
    assert older == history[:4]


def test_plan_compaction_triggers_at_70_percent_of_the_budget() -> None:
    big = "x" * 2000  # about 500 tokens per message
    history = [Turn("user" if i % 2 == 0 else "assistant", [TextBlock(f"{i} {big}")])
               for i in range(12)]
    # a 6,000-token window leaves less than the floor, so the budget is the floor: 4,096
    # tokens (seed 001); the trigger 2,867: five messages stay under
    assert compaction.BUDGET_FLOOR == 4096
    assert plan_compaction(history[:5], system="s", window=6_000) is None
    assert plan_compaction(history[:6], system="s", window=6_000) is not None
    plan = plan_compaction(history, system="s", window=6_000)
    assert plan is not None and plan.budget == compaction.BUDGET_FLOOR
    assert plan.tokens == estimate_history_tokens(history) >= plan.budget * 70 // 100
    # the recent part (within 30% of 4,096 tokens: 1,228) is the last user message and
    # the reply to it
    assert plan.replaced == 10 and plan.older == history[:10]
    # a bigger window leaves the same history under the trigger
    assert plan_compaction(history, system="s", window=200_000) is None
    # a measure the caller already has decides the trigger; the split is the same
    assert plan_compaction(history, system="s", window=6_000, sent_tokens=100) is None
    given = plan_compaction(history[:5], system="s", window=6_000, sent_tokens=3000)
    assert given is not None and given.tokens == 3000 and given.replaced == 4


def test_the_budget_of_an_8000_token_window_is_within_the_window() -> None:
    assert context_budget(10_000, 100) == 10_000 - 100 - 4096  # above the floor
    assert context_budget(8_000, 4_000) == 4096 < 8_000  # the floor


def test_plan_compaction_leaves_room_for_the_tool_definitions() -> None:
    big = "x" * 4000
    history = [Turn("user" if i % 2 == 0 else "assistant", [TextBlock(f"{i} {big}")])
               for i in range(12)]
    # 12,000 tokens of history in a 40,000-token window: budget 35,903, no compaction...
    assert plan_compaction(history, system="s", window=40_000) is None
    # ...until 80 tool definitions of about 300 tokens each come with it
    tools = [{"name": f"srv__tool_{n}", "description": "d" * 1100,
              "input_schema": {"type": "object"}} for n in range(80)]
    plan = plan_compaction(history, system="s", window=40_000, tools=tools)
    assert plan is not None
    assert plan.budget == 40_000 - estimate_request_tokens("s", [], tools) - 4096


def test_plan_compaction_measures_the_history_as_sent() -> None:
    # Old tool results count as their summaries: the same history is under the trigger
    # when its bulk is in results more than four turns old.
    history = [*_tool_turn(1, "y" * 30_000), *_history(5)]
    assert estimate_history_tokens(history) > 8192 * 70 // 100
    assert plan_compaction(history, system="s", window=10_000) is None


def test_plan_compaction_does_not_summarize_a_summary_alone() -> None:
    recent = [Turn("user", [TextBlock("z" * 9000)]), Turn("assistant", [TextBlock("ok")])]
    history = [summary_message("earlier " * 2500), *recent]
    assert plan_compaction(history, system="s", window=12_000) is None


def test_context_window_override_and_clamp() -> None:
    assert context_window("claude-sonnet-4-6") == model_info("claude-sonnet-4-6").context_window
    assert context_window("claude-sonnet-4-6", 10_000) == 10_000
    assert clamp_max_tokens(4096, "claude-sonnet-4-6", 9_000, window=10_000) == 1000
    assert clamp_max_tokens(4096, "claude-sonnet-4-6", 12_000, window=10_000) == 1


def test_summary_message() -> None:
    message = summary_message("  The user wants a CLI.\n")
    assert message == Turn("user", [TextBlock(
        "[Previous conversation summary: The user wants a CLI.]")])
    history = compacted_history("S", _history(1))
    assert history[0] == summary_message("S")
    assert history[1:] == _history(1)
    assert starts_turn(history[0])
    _valid_api_messages(to_api_messages(history))


def test_compaction_requests() -> None:
    older = _history(1)
    memory = memory_request(older, model="claude-haiku-4-5")
    summary = summary_request(older, model="claude-haiku-4-5", max_tokens=500)
    assert memory.system == compaction.MEMORY_PROMPT
    assert summary.system == compaction.SUMMARY_PROMPT
    assert "MEMORY.md" in memory.system and "NONE" in memory.system
    assert summary.max_tokens == 500 and summary.tools == []
    text = summary.messages[0]["content"][0]["text"]
    assert text.startswith("<conversation>") and "User: ask 1" in text
    assert "Assistant called read_file (tu_1)" in text


def test_transcript_cuts_long_results() -> None:
    text = render_transcript(_tool_turn(1, "r" * 5000, is_error=True))
    cut = compaction.TRANSCRIPT_RESULT_CHARS
    assert "Tool error (tu_1): " + "r" * cut + "\n[... 3000 more characters cut]" in text
    assert "r" * (compaction.TRANSCRIPT_RESULT_CHARS + 1) not in text


def test_parse_facts() -> None:
    assert parse_facts("NONE") == []
    assert parse_facts(" none.\n") == []
    assert parse_facts("") == []
    assert parse_facts("- Uses uv.\n\n* Tabs, not spaces\nPrefers pytest\n") == [
        "Uses uv.", "Tabs, not spaces", "Prefers pytest"]


def test_memory_append() -> None:
    day = dt.date(2026, 3, 4)
    assert memory_append("# Memory\n", [], day) == "# Memory\n"  # none: nothing appended
    assert memory_append("# Memory\n", ["  ", ""], day) == "# Memory\n"
    first = memory_append("# Memory\n", ["Uses uv", "- Tabs", "Uses uv"], day)
    assert first == "# Memory\n\n## 2026-03-04\n\n- Uses uv\n- Tabs\n"
    # the same day again: under the same heading; known facts are not repeated
    second = memory_append(first, ["Tabs", "Line\nbreaks"], day)
    assert second == first + "- Line breaks\n"
    assert memory_append(second, ["Uses uv"], day) == second
    # another day: a new heading
    third = memory_append(second, ["New"], "2026-03-05")
    assert third == second + "\n## 2026-03-05\n\n- New\n"
    assert memory_append("", ["Fact"], day) == "## 2026-03-04\n\n- Fact\n"


def test_split_of_merged_messages_never_cuts_before_a_mixed_message() -> None:
    session = Session(session_id="s1", name="n", workspace="/ws", model="m", channel="c")
    for n in range(1, 6):
        session.receive_user_message(text=f"ask {n}", channel="c", user="u")
        session.append_assistant_message(
            content=[ToolUseBlock(f"tu_{n}", "read_file", {"path": "x"})],
            stop_reason="tool_use", usage=Usage(1, 1), generation=n)
        session.record_tool_result(call_id=f"tu_{n}", tool="read_file", output=BIG,
                                   is_error=False)
    # results and the next question merge: only the first message is a clean turn start
    api = to_api_messages(session.history)
    assert [can_split_before(m) for m in api] == [True] + [False] * 10
    for budget in range(1, estimate_history_tokens(api) * 4, 53):
        _, recent = split_for_compaction(api, budget)
        assert recent in ([], api)


def test_the_summary_memo_forgets_the_least_recently_used_within_its_bound() -> None:
    from tether.actors.model.stale_results import _SummaryMemo

    memo = _SummaryMemo(max_chars=10)
    memo.put("aaaa", False, "A")
    memo.put("bbbb", False, "B")
    assert memo.get("aaaa", False) == "A"  # now the most recently used
    memo.put("cccc", True, "C")  # 12 characters: the least recently used, bbbb, goes
    assert memo.get("bbbb", False) is None
    assert (memo.get("aaaa", False), memo.get("cccc", True)) == ("A", "C")
    assert memo.get("cccc", False) is None  # an error's summary is another summary
    memo.put("x" * 11, False, "X")  # larger than the bound: never kept
    assert memo.get("x" * 11, False) is None


def test_a_long_result_is_told_by_its_first_lines() -> None:
    source = "def f():\n    return 1\n" * 2000  # 44,000 characters
    assert summarize_result(source).endswith("4000 lines, Python source]")
    listing = "\n".join(f"src/module_{n}.py" for n in range(3000))
    assert content_kind(listing) == "a listing"
    assert content_kind("some words\r\nmore words\r\n") == "text"
    assert content_kind("--- a/x\r\n+++ b/x\r\n@@ -1 +1 @@\r\n-a\r\n+b\r\n") == "a diff"
