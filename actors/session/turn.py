"""A turn's model calls: the prompt read from the workspace, each request built (after
compaction when the history fills the budget), the reply streamed out redacted, the rule
monitor's barrier, and the reply stored once the monitor vouched for it."""

from __future__ import annotations

from typing import Any

from tether.actors import engine_tools
from tether.actors.model.compaction import memory_request, plan_compaction, summary_request
from tether.actors.model.context import build_request
from tether.actors.model.prompt import assemble_system_prompt, load_skills_definition
from tether.actors.ports import (
    MessageDone,
    ModelRequest,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolUseStart,
)
from tether.actors.runtime import AskResult
from tether.actors.session import endings, tools
from tether.actors.session.effects import CallModel, CancelModel, Compact, ReadWorkspace
from tether.actors.session.inputs import ModelDelta, WorkspaceRead
from tether.actors.session.state import Phase, PlanTracker
from tether.actors.session.step import Step, log
from tether.actors.session.tree import publish_placed
from tether.events.messages import (
    AssistantNode,
    BarrierCheck,
    BarrierResult,
    ContentBlock,
    ProviderRequest,
    ProviderResponse,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from tether.events.session import Turn

MAX_UNCHECKED_RETRIES = 2
"""Model calls repeated because the rule monitor missed part of the stream, per turn."""


def begin_turn(step: Step) -> None:
    """Start a turn on the history as it stands: read the workspace's prompt files first."""
    turn = step.turn
    turn.retries, turn.retry_at = 0, None
    turn.plan = PlanTracker()
    turn.rounds, turn.turn_usage, turn.unchecked_retries = 0, Usage(), 0
    turn.reminders = []
    turn.gen_seq, turn.gen_turn, turn.turn_nodes = 0, step.session.turns, []
    turn.compaction_off = turn.alternative = False
    turn.completions_left = turn.gen.n - 1 if turn.gen is not None else 0
    turn.phase = Phase.PREPARING
    step.active()
    step.effects.append(ReadWorkspace(step.session.workspace))


def on_workspace_read(step: Step, read: WorkspaceRead) -> None:
    """Build the system prompt from the workspace for this turn (redacted; recorded when
    it changed), then make the turn's first call."""
    if step.turn.phase is not Phase.PREPARING:
        return
    step.turn.workspace_texts = read.texts
    for warning in read.texts.warnings:
        log.warning("session %s: %s", step.session_id, warning)
    text = step.env.redactor.text(assemble_system_prompt(step.config.system_prompt,
                                                         read.texts))
    if text != step.session.system_prompt:
        step.session.set_system_prompt(text=text)
    next_call(step)


def next_call(step: Step) -> None:
    """The turn's next model call; when the history fills 70% of the context budget it is
    compacted first (two model calls in the background, then this call)."""
    turn = step.turn
    request = build(step)
    plan = None if turn.compaction_off else plan_compaction(
        step.session.history, system=request.system, window=step.window(),
        sent_tokens=request.history_tokens, tools=request.tools)
    if plan is None:
        call_model(step, request)
        return
    step.active()
    turn.compaction = plan
    turn.generation = step.session.version
    turn.phase = Phase.COMPACTING
    model = step.config.model
    step.effects.append(Compact(memory_request(plan.older, model=model),
                                summary_request(plan.older, model=model), turn.generation))


def build(step: Step) -> ModelRequest:
    """The next call's request from the history."""
    history = step.session.history
    gen = step.turn.gen
    no_tools = gen is not None and not gen.tools
    defined = [] if no_tools and not _holds_tool_blocks(history) else tool_definitions(step)
    request = build_request(history, model=step.config.model, tools=defined,
                            max_tokens=step.config.max_tokens, system=step.system_text(),
                            window=step.config.context_window)
    if no_tools and defined:
        # The API refuses tool blocks in a request that defines no tools: they are
        # defined, and the model is told to use none.
        request.tool_choice = {"type": "none"}
    return request


def tool_definitions(step: Step) -> list[dict[str, Any]]:
    """What the model may call now: the loaded groups (all, without lazy loading), the
    engine's own tools, and the meta-tools for what is not loaded yet."""
    catalog = step.env.tools
    groups = step.lazy()
    loaded = step.session.loaded_groups
    defined = catalog.definitions(loaded if groups else None)
    defined += engine_tools.definitions(step.session.mode)
    if groups and any(g not in loaded for g in groups):
        defined.append(engine_tools.load_tools_definition(groups, loaded))
    if step.turn.workspace_texts.skills:
        defined.append(load_skills_definition())
    return defined


def call_model(step: Step, request: ModelRequest | None = None) -> None:
    """Stream one model call: ``request``, else another completion of the last one, else
    a request built now."""
    turn = step.turn
    step.active()
    turn.streams = {}
    turn.generation = step.session.version
    turn.seq, turn.partial, turn.done = 0, "", None
    turn.phase = Phase.STREAMING
    step.publish("turn_start")
    if request is None:
        # Another completion is of the same context, built once.
        request = turn.request if turn.alternative and turn.request else build(step)
    turn.request = request
    step.emit(ProviderRequest, model=request.model, messages=len(request.messages),
              input_tokens=request.input_tokens, max_tokens=request.max_tokens,
              tools=[t["name"] for t in request.tools],
              tool_choice=(request.tool_choice or {}).get("type", "auto"))
    step.effects.append(CallModel(request, turn.generation))


def on_model_delta(step: Step, message: ModelDelta) -> None:
    """Publish a delta of the running call (redacted); at the message's end, ask the rule
    monitor whether every delta was checked and clear."""
    turn = step.turn
    if message.generation != turn.generation or turn.phase is not Phase.STREAMING:
        return  # a delta of an aborted call
    step.active()
    event = message.event
    if isinstance(event, TextDelta):
        turn.partial += event.text
        _publish_redacted(step, "text", event.index, event.text)
    elif isinstance(event, ThinkingDelta):
        _publish_redacted(step, "thinking", event.index, event.text)
    elif isinstance(event, ToolUseStart):
        step.publish("tool_start", event.name, event.index)
    elif isinstance(event, ToolInputDelta):
        step.publish("tool_input", event.partial_json, event.index)
    elif isinstance(event, MessageDone):
        turn.done = event
        step.emit(ProviderResponse, stop_reason=event.stop_reason, usage=event.usage)
        for (kind, index), stream in turn.streams.items():
            rest = stream.flush()  # what was held back while a secret could form
            if rest:
                step.publish(kind, rest, index)
        turn.streams = {}
        step.publish("end")
        turn.phase = Phase.BARRIER
        step.ask(step.subjects.ttsr(step.session_id),
                 BarrierCheck(session_id=step.session_id, generation=turn.generation,
                              seq=turn.seq),
                 BarrierResult, tag=f"barrier:{turn.generation}")


def _publish_redacted(step: Step, kind: str, index: int, text: str) -> None:
    """Publish ``text`` through the block's streaming redactor: only what cannot be the
    start of a secret goes out now; the rest waits for the next delta or the end."""
    streams = step.turn.streams
    stream = streams.get((kind, index))
    if stream is None:
        stream = streams[(kind, index)] = step.env.redactor.stream()
    safe = stream.feed(text)
    if safe:
        step.publish(kind, safe, index)


def on_barrier(step: Step, generation: str, result: AskResult) -> None:
    """The rule monitor's answer: store the reply, or interrupt, or ask again; no answer
    fails the turn closed."""
    turn = step.turn
    if turn.phase is not Phase.BARRIER or generation != str(turn.generation):
        return
    answer = result.message
    if not isinstance(answer, BarrierResult):
        # Fail closed: nothing the monitor has not vouched for is stored or run.
        endings.record_failure(step, f"the rule monitor did not confirm the reply "
                               f"({result.error}); stopped before storing it or running any tool")
    elif answer.unchecked:
        _retry_unchecked(step)
    elif not answer.clear:
        endings.keep_reminders(step, answer.later)
        interrupt(step, answer.rules, answer.reminder, "text", answer.context_mode)
    else:
        endings.keep_reminders(step, answer.later)
        _commit_message(step)


def _retry_unchecked(step: Step) -> None:
    # The monitor missed part of this stream (it restarted, or a delta was lost): ask the
    # model again so every delta of the reply is checked.
    turn = step.turn
    turn.unchecked_retries += 1
    if turn.unchecked_retries > MAX_UNCHECKED_RETRIES:
        endings.record_failure(step, "the rule monitor could not check the reply")
        return
    log.warning("session %s: the rule monitor missed part of the stream; asking again",
                step.session_id)
    step.session.record_unchecked_stream(attempt=turn.unchecked_retries)
    call_model(step)


def interrupt(step: Step, rules: list[str], reminder: str, source: str,
              context_mode: str = "discard") -> None:
    """A rule fired on the running reply: it is dropped and the model asked again with
    the rule's reminder (another completion breaking one is only dropped)."""
    turn = step.turn
    step.effects.append(CancelModel())
    if turn.alternative:
        # Another completion broke a rule: it is dropped (never in the tree); the history,
        # which holds the first completion, stays as it is.
        log.info("session %s: a completion was dropped: rules %s", step.session_id,
                 ", ".join(rules))
        step.session.drop_alternative(rules=rules)
        turn.phase, turn.done = Phase.TOOLS, None
        tools.next_tool(step)
        return
    step.session.record_ttsr_interruption(
        rules=rules, reminder=reminder, generation=turn.generation,
        partial_text=step.env.redactor.text(turn.partial), source=source,
        context_mode=context_mode)
    call_model(step)


def _over_budget(step: Step) -> bool:
    """The session spent more than its budget: fail it (unanswered calls refused)."""
    session = step.session
    spent = session.cost_usd + step.turn_cost()
    budget = session.budget_usd
    if budget <= 0 or spent <= budget:
        return False
    session.exhaust_budget(cost_usd=spent, budget_usd=budget)
    endings.refuse_pending(step, f"not run: the session's ${budget:.2f} budget is spent")
    endings.record_failure(step, f"budget exhausted: ${spent:.4f} spent of ${budget:.2f}",
                           finish=True, kind="budget")
    return True


def _add_usage(step: Step, usage: Usage) -> None:
    total = step.turn.turn_usage
    step.turn.turn_usage = Usage(total.input_tokens + usage.input_tokens,
                                 total.output_tokens + usage.output_tokens)


def _commit_alternative(step: Step, done: MessageDone) -> None:
    """Another completion: its own branch under the node the first one answers."""
    turn = step.turn
    content = [_redact_block(step, b) for b in done.content]
    node = step.conversation.tree.plan_append(turn.alt_parent, "assistant", content).node_id
    step.session.add_alternative(content=content, stop_reason=done.stop_reason,
                                 usage=done.usage, node_id=node, parent_id=turn.alt_parent)
    _add_usage(step, done.usage)
    if _over_budget(step):
        return
    if node != turn.alt_parent and node not in turn.turn_nodes:
        turn.turn_nodes.append(node)
        step.emit(AssistantNode, node_id=node, parent_id=turn.alt_parent, content=content)
    turn.phase = Phase.TOOLS
    turn.tool_queue.clear()
    tools.next_tool(step)


def _commit_message(step: Step) -> None:
    """Store the vouched-for reply, then take up its tool calls (or end the turn)."""
    turn = step.turn
    done = turn.done
    assert done is not None
    if turn.alternative:
        _commit_alternative(step, done)
        return
    known = set(step.session.call_ids)
    reused = [b.id for b in done.content if isinstance(b, ToolUseBlock) and b.id in known]
    if reused:
        # The request's messages hold only the current branch (and what compaction left):
        # a call of another branch may have this id. The audit keys calls by it.
        endings.record_failure(step, f"the model reused the id {reused[0]!r} of an "
                               "earlier tool call of the session; stopped before storing "
                               "the reply or running any tool")
        return
    step.session.append_assistant_message(
        content=[_redact_block(step, b) for b in done.content], stop_reason=done.stop_reason,
        usage=done.usage, generation=turn.generation)
    _add_usage(step, done.usage)
    turn.rounds += 1
    # Further completions answer what this call answered: the node before the reply's
    # (set when the reply is placed; a reply with nothing to place leaves the cursor there).
    turn.alt_parent = step.conversation.cursor
    if _over_budget(step):
        return
    publish_placed(step)
    said = "".join(b.text for b in done.content if isinstance(b, TextBlock)).strip()
    if said:
        turn.plan.streamed = step.env.redactor.text(said)
    calls = [b for b in done.content if isinstance(b, ToolUseBlock)]
    gen = turn.gen
    if calls and gen is not None and turn.rounds >= max(1, gen.max_tool_iterations):
        # Seed 003: max_tool_iterations = N allows N model calls; running this message's
        # calls would need call N + 1. Checked before any call runs: they are refused,
        # never run with their results thrown away.
        endings.refuse_pending(step, "not run: the generation reached its tool-iteration "
                               "limit")
        endings.record_failure(
            step, f"the generation made {turn.rounds} model calls, its limit "
            "(max_tool_iterations), and the last asked for tools; it stopped before running "
            "them", kind="tool_iteration_limit")
        return
    turn.tool_queue.clear()
    turn.tool_queue.extend(calls)
    turn.phase = Phase.TOOLS
    tools.next_tool(step)


def _redact_block(step: Step, block: ContentBlock) -> ContentBlock:
    # Tool inputs are kept exact: they are what ran, and the action hash covers them.
    if isinstance(block, TextBlock):
        return TextBlock(step.env.redactor.text(block.text))
    return block


def _holds_tool_blocks(history: list[Turn]) -> bool:
    return any(isinstance(b, ToolUseBlock | ToolResultBlock) for t in history for b in t.content)
