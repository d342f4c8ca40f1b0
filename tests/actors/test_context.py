"""Context assembly: the history as the Messages API expects it."""

from __future__ import annotations

import copy

from actors.context import DEFAULT_SYSTEM_PROMPT, build_request, to_api_messages
from events.messages import TextBlock, ToolResultBlock, ToolUseBlock, Usage
from events.session import Session, Turn


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


def test_tool_result_default_is_error_is_explicit() -> None:
    messages = to_api_messages([Turn("user", [ToolResultBlock("t", "ok")])])
    assert messages[0]["content"][0]["is_error"] is False
