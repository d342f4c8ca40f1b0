"""Generations decided on plain values (seed 003): the limits that end them, the events
that tell them, and the tree they leave."""

from __future__ import annotations

from tests.actors.session.driver import SID, Core, Fed, branch_back, eager, generation_events
from tether.actors.conversation import render_tree
from tether.actors.ports import ToolOutput
from tether.actors.session import Phase
from tether.actors.session.effects import CallModel, RunTool
from tether.actors.session.inputs import ToolFinished
from tether.events.messages import (
    AssistantNode,
    Generate,
    GenerationDone,
    GenerationError,
    InteractionSettled,
    KillSession,
    ProviderRequest,
    TextBlock,
    ToolResultBlock,
    ToolResultNode,
    ToolUseBlock,
    TreeQuery,
    TreeView,
)
from tether.events.session import Session


def list_dir(call_id: str) -> ToolUseBlock:
    return ToolUseBlock(id=call_id, name="list_dir", input={"path": "."})


def run_round(core: Core, call: ToolUseBlock) -> Fed:
    """The model asks for ``call``, the gatekeeper allows it, it runs."""
    fed = core.call_tools(call)
    if not fed.of(RunTool):
        fed = core.verdict(call)
    return core.feed(ToolFinished(core.generation, call.id, call.name, ToolOutput("a b")))


def back_to_the_question(core: Core) -> None:
    branch_back(core, len(core.session.history) - 1)


def test_n_tool_iterations_allow_n_model_calls_then_a_typed_error() -> None:
    core = eager()
    core.say("hello")
    core.answer("Hi.")
    back_to_the_question(core)
    started = core.feed(Generate(session_id=SID, max_tool_iterations=2))
    first = run_round(core, list_dir("c1"))
    assert first.of(CallModel)  # call 2 of 2
    second = core.call_tools(list_dir("c2"))
    (error,) = second.sent(GenerationError)
    assert error.kind == "tool_iteration_limit"
    assert len(started.sent(ProviderRequest) + first.sent(ProviderRequest)) == 2
    assert [r.reason for r in second.recorded(Session.ToolCallRefused)] == [
        "not run: the generation reached its tool-iteration limit"]
    assert not second.of(RunTool) and core.session.pending_tool_calls() == []


def test_the_round_limit_ends_a_turn_with_the_final_message_as_its_node() -> None:
    core = eager()
    assert core.state.env.config.round_limit == 25
    core.say("keep listing")
    calls = 0
    for n in range(25):
        fed = run_round(core, list_dir(f"c{n}"))
        calls += 1
        if fed.sent(GenerationDone):
            break
    (done,) = fed.sent(GenerationDone)
    assert calls == 25 and done.stop == "round_limit" and len(done.nodes) == 1
    (completed,) = fed.recorded(Session.TurnCompleted)
    assert (completed.rounds, completed.stop) == (25, "round_limit")
    assert not fed.of(CallModel) and core.session.pending_tool_calls() == []


def test_a_tree_asked_for_mid_turn_never_holds_half_a_message_of_results() -> None:
    core = eager()
    core.say("do both please")
    first = list_dir("c1")
    push = ToolUseBlock(id="c2", name="run_shell", input={"command": "git push origin main"})
    core.call_tools(first, push)
    core.verdict(first)
    core.feed(ToolFinished(core.generation, "c1", "list_dir", ToolOutput("a b")))
    core.verdict(push, "escalate")
    assert core.phase is Phase.APPROVAL
    (middle,) = core.feed(TreeQuery(session_id=SID)).sent(TreeView)
    assert [n.role for n in middle.nodes] == ["system", "user", "assistant"]
    assert middle.cursor == middle.nodes[-1].node_id  # the calls, not half their results
    core.feed(InteractionSettled(session_id=SID, call_id="c2", interaction_id="i",
                                 kind="approval", outcome="approved", by="alice"))
    whole = core.feed(ToolFinished(core.generation, "c2", "run_shell", ToolOutput("ok")))
    results = [b for b in core.session.history[-1].content if isinstance(b, ToolResultBlock)]
    assert len(results) == 2 and whole.of(CallModel)
    (after,) = core.feed(TreeQuery(session_id=SID)).sent(TreeView)
    assert [n.role for n in after.nodes] == ["system", "user", "assistant", "user"]


def test_completions_without_tools_over_tool_calls_define_them_and_choose_none() -> None:
    core = eager()
    core.say("look around")
    run_round(core, list_dir("c1"))
    core.answer("Looked.")
    core.say("summarize")
    core.answer("Done.")
    branch_back(core)
    fed = core.feed(Generate(session_id=SID, n=2, tools=False))
    (call,) = fed.of(CallModel)
    assert call.request.tool_choice == {"type": "none"}
    assert "list_dir" in {t["name"] for t in call.request.tools}
    assert [r.tool_choice for r in fed.sent(ProviderRequest)] == ["none"]


def test_a_stop_mid_stream_ends_the_generation_with_one_aborted_error() -> None:
    core = Core()
    core.say("tell me a long story")
    fed = core.say("/stop")
    (error,) = fed.sent(GenerationError)
    assert error.kind == "aborted" and not fed.of(CallModel)
    late = core.stream([ToolUseBlock(id="c1", name="list_dir", input={})], stop="tool_use")
    assert late.events == [] and late.effects == []  # the stopped call's rest is dropped


def test_a_resumed_session_s_next_turn_has_a_number_of_its_own() -> None:
    core = Core()
    first = core.say("tell me a long story")
    core.feed(KillSession(session_id=SID))
    again = core.say("a short one then")
    (before,) = first.sent(ProviderRequest)
    (after,) = again.sent(ProviderRequest)
    assert after.turn == before.turn + 1


def kinds(events: list[object]) -> list[str]:
    return [type(e).__name__ for e in events]


def test_a_turn_s_generation_events_come_in_order_and_the_tree_mirrors_it() -> None:
    core = Core()  # tools load lazily, as configured by default
    listing = ToolUseBlock(id="c1", name="list_dir", input={"path": "."})
    started = core.say("look around")
    streamed = core.stream([TextBlock("Listing."), listing], stop="tool_use")
    cleared = core.barrier()
    allowed = core.verdict(listing)
    ran = core.feed(ToolFinished(core.generation, "c1", "list_dir", ToolOutput(". is empty")))
    answered = core.answer("The folder is empty.")
    events = generation_events(started, streamed, cleared, allowed, ran, answered)
    assert kinds(events) == [
        "ProviderRequest", "ProviderResponse", "AssistantNode", "ToolResultNode",
        "ProviderRequest", "ProviderResponse", "AssistantNode", "GenerationDone",
    ]
    assert [e.seq for e in events] == list(range(1, 9))
    assert {(e.session_id, e.turn) for e in events} == {(SID, 0)}
    first_request, listed, result, final, done = (
        events[0], events[2], events[3], events[6], events[7])
    assert first_request.messages == 1 and first_request.max_tokens >= 1
    assert first_request.tools == ["AskUserQuestion", "load_tools"]  # lazy tools
    assert isinstance(result, ToolResultNode) and result.content == ". is empty"
    assert result.call_id == listed.content[1].id
    assert isinstance(final, AssistantNode) and final.parent_id == result.node_id
    # Seed 003: done carries the final node, not every node made on the way.
    assert done.nodes == [final.node_id] and done.stop == "end_turn"

    (view,) = core.feed(TreeQuery(session_id=SID)).sent(TreeView)
    assert view.cursor == final.node_id
    assert [n.role for n in view.nodes] == ["system", "user", "assistant", "user", "assistant"]
    assert [n.depth for n in view.nodes] == [0, 1, 2, 3, 4]
    lines = render_tree(view.nodes, view.cursor)
    assert lines[-1].startswith("* ") and "The folder is empty." in lines[-1]
    assert lines[1].startswith("| ") and "look around" in lines[1]
    assert "calls list_dir()" in lines[2] and "1 tool result" in lines[3]
