"""One-line details of stored events in ``tether events``."""

from __future__ import annotations

from tether.adapters.render import event_summary
from tether.events.messages import TextBlock, ToolUseBlock, Usage
from tether.events.session import Turn

NODE = "0d1e2f3a-1111-5222-8333-944455556666"


def test_moved_to_names_the_node_the_messages_and_the_reason() -> None:
    history = [Turn("user", [TextBlock("hi")]), Turn("assistant", [TextBlock("hello")])]
    assert event_summary("MovedTo", {"node_id": NODE, "history": history,
                                     "reason": "edited by ana"}) == (
        "-> node 0d1e2f3a, 2 messages (edited by ana)")
    assert event_summary("MovedTo", {"node_id": NODE, "history": history[:1],
                                     "reason": "branched by ana"}) == (
        "-> node 0d1e2f3a, 1 message (branched by ana)")


def test_generation_started_says_how_many_completions_and_tools() -> None:
    assert event_summary("GenerationStarted", {
        "n": 3, "tools": False, "max_tool_iterations": 25, "user": "ana"}) == (
        "3 completions, no tools, by ana")
    assert event_summary("GenerationStarted", {
        "n": 1, "tools": True, "max_tool_iterations": 5, "user": "ana"}) == (
        "1 completion, tools on, at most 5 tool rounds, by ana")


def test_alternative_generated_names_its_node_and_what_it_said() -> None:
    assert event_summary("AlternativeGenerated", {
        "content": [TextBlock("Green, " * 20), ToolUseBlock("t", "ls", {})],
        "stop_reason": "end_turn", "usage": Usage(120, 30), "node_id": NODE}) == (
        "node 0d1e2f3a [end_turn, 120+30 tokens] Green, Green, Green, Green, Green, Green, "
        "Green, … | tool_use ls")
    assert event_summary("AlternativeGenerated", {
        "content": [], "stop_reason": "max_tokens", "usage": None, "node_id": NODE}) == (
        "node 0d1e2f3a [max_tokens]")
