"""The tool loop: each call of the reply proposed to the gatekeeper (the engine's own
tools answered here), an allowed one run after its action hash is checked again, every
call given a result, then the next model call or the turn's end."""

from __future__ import annotations

from tether.actors import engine_tools
from tether.actors.engine_tools import (
    ASK_USER_QUESTION,
    ENGINE_TOOLS,
    EXIT_PLAN_MODE,
    LOAD_SKILLS,
    LOAD_TOOLS,
)
from tether.actors.gatekeeper.deny_lists import action_hash
from tether.actors.model.prompt import parse_load_skills
from tether.actors.ports import Grant
from tether.actors.runtime import AskResult
from tether.actors.session import endings, review
from tether.actors.session import turn as turns
from tether.actors.session.effects import Continue, ReadSkills, RunTool
from tether.actors.session.inputs import SkillsRead, ToolFinished
from tether.actors.session.state import Phase
from tether.actors.session.step import Step
from tether.actors.session.tree import publish_placed
from tether.events.messages import QuestionRequest, ToolProposal, ToolUseBlock, Verdict


def next_tool(step: Step) -> None:
    """Propose the queue's next call; with none left, the turn goes on (another model
    call, another completion, a plan review) or ends."""
    turn, session = step.turn, step.session
    if not turn.tool_queue:
        publish_placed(step)  # the message of results is complete: in the tree
        last_stop = turn.done.stop_reason if turn.done else ""
        if not session.pending_tool_calls() and last_stop != "tool_use":
            if session.mode == "plan" and turn.plan.touched and not turn.plan.exited:
                # A plan file was written but ExitPlanMode never called: review anyway.
                review.open_review(step, f"plan-{turn.generation}", is_call=False)
                return
            if turn.completions_left > 0:
                turn.completions_left -= 1
                turn.alternative = True
                turns.call_model(step)
                return
            endings.complete_turn(step, "end_turn")
        elif turn.rounds >= step.config.round_limit:
            endings.complete_turn(step, "round_limit")
        else:
            turns.next_call(step)
        return
    call = turn.tool_queue[0]
    try:
        digest = action_hash(call.name, call.input)
    except ValueError:  # NaN or Infinity in the input: not canonical JSON
        digest = ""
    session.propose_tool_call(call_id=call.id, tool=call.name, tool_input=call.input,
                              action_hash=digest)
    if call.name in ENGINE_TOOLS and digest:
        _engine_tool(step, call)
        return
    group = step.env.tools.group_of(call.name) if step.lazy() else None
    if group is not None and group not in session.loaded_groups:
        # Used by name before it was loaded: that asks for its group as well.
        session.load_tools(groups=[group], reason=f"{call.name} was used")
    if not digest:
        session.decide_tool_call(call_id=call.id, decision="deny",
                                 reason="the input is not valid JSON", tier="protection")
        refuse(step, call, "the input is not valid JSON (NaN or Infinity)")
        return
    step.ask(step.subjects.gatekeeper, ToolProposal(
        session_id=step.session_id, call_id=call.id, tool=call.name, input=call.input,
        workspace=session.workspace, action_hash=digest,
        mode=session.mode,  # type: ignore[arg-type]
        auto_approve=call.name in session.auto_approve,
        plan_file=step.plan_file() if session.mode == "plan" else ""),
        Verdict, tag=f"verdict:{call.id}", timeout=step.config.verdict_timeout)


def on_verdict(step: Step, call_id: str, result: AskResult) -> None:
    """The gatekeeper's verdict on the call at the queue's head (none: denied)."""
    turn = step.turn
    if turn.phase is not Phase.TOOLS or not turn.tool_queue or turn.tool_queue[0].id != call_id:
        return
    call = turn.tool_queue[0]
    verdict = result.message
    if not isinstance(verdict, Verdict):
        verdict = Verdict(call_id=call_id, decision="deny",
                          reason=f"the gatekeeper did not answer ({result.error})",
                          action_hash="", tier="unavailable")
    step.session.decide_tool_call(call_id=call_id, decision=verdict.decision,
                                  reason=verdict.reason, tier=verdict.tier)
    if verdict.decision == "escalate":
        review.ask_approval(step, call, verdict)
    elif verdict.decision != "allow":
        refuse(step, call, verdict.reason)
    else:
        execute(step, call, verdict)


def _engine_tool(step: Step, call: ToolUseBlock) -> None:
    """The engine's own tools: the meta-tools answered at once, AskUserQuestion and
    ExitPlanMode by the chat."""
    session = step.session
    if call.name == LOAD_TOOLS:
        groups = engine_tools.parse_load_tools(call.input, step.env.tools.groups())
        if isinstance(groups, str):
            _refuse_engine_call(step, call, groups)
            return
        _allow_engine_call(step, call, "the engine loads tool groups")
        new = [g for g in groups if g not in session.loaded_groups]
        if new:  # a group loaded already changes nothing: no event
            session.load_tools(groups=new, reason="load_tools")
        names = ", ".join(d["name"] for d in step.env.tools.definitions(groups))
        finish_engine_call(step, call, f"loaded {', '.join(groups)}: {names}", False)
    elif call.name == LOAD_SKILLS:
        skills = parse_load_skills(call.input)
        if isinstance(skills, str):
            _refuse_engine_call(step, call, skills)
            return
        _allow_engine_call(step, call, "the engine reads skills")
        step.effects.append(ReadSkills(call.id, step.turn.workspace_texts, skills,
                                       session.workspace))
    elif call.name == ASK_USER_QUESTION:
        question = engine_tools.parse_question(call.input)
        if isinstance(question, str):
            _refuse_engine_call(step, call, question)
            return
        _allow_engine_call(step, call, "the engine asks the chat")
        review.open_interaction(step, Phase.QUESTION, call.id, QuestionRequest(
            session_id=step.session_id, call_id=call.id, question=question.question,
            options=question.options, channel=session.channel, owner=session.owner,
            home_channel=session.home_channel))
    elif call.name == EXIT_PLAN_MODE:
        if session.mode != "plan":
            _refuse_engine_call(step, call, f"not in plan mode (the mode is {session.mode})")
            return
        _allow_engine_call(step, call, "the engine asks the chat to review the plan")
        review.open_review(step, call.id, is_call=True)


def _allow_engine_call(step: Step, call: ToolUseBlock, reason: str) -> None:
    step.session.decide_tool_call(call_id=call.id, decision="allow", reason=reason,
                                  tier="engine")


def _refuse_engine_call(step: Step, call: ToolUseBlock, reason: str) -> None:
    step.session.decide_tool_call(call_id=call.id, decision="deny", reason=reason,
                                  tier="engine")
    refuse(step, call, reason)


def finish_engine_call(step: Step, call: ToolUseBlock, output: str, is_error: bool) -> None:
    """Record an engine tool's result and go on with the next call."""
    step.session.record_tool_result(call_id=call.id, tool=call.name,
                                    output=step.env.redactor.text(output), is_error=is_error)
    step.turn.tool_queue.popleft()
    next_tool(step)


def execute(step: Step, call: ToolUseBlock, verdict: Verdict) -> None:
    """Run an allowed call (the shell runs it on a helper thread), after checking it is
    the one judged; its start is recorded before it runs, so no end means interrupted."""
    turn, session = step.turn, step.session
    # Right before execution: the call must still be the one the gatekeeper judged.
    if action_hash(call.name, call.input) != verdict.action_hash:  # already known valid
        refuse(step, call, "action hash mismatch: the call changed after it was judged")
        return
    turn.phase = Phase.EXECUTING
    grant = Grant(network=verdict.network, writes=tuple(verdict.writes))
    session.start_tool_call(call_id=call.id, tool=call.name,
                            sandbox=step.env.tools.sandbox_profile(call.name, grant))
    root = step.config.workspace_root or session.workspace
    step.effects.append(RunTool(call, grant, session.workspace, turn.generation, root,
                                step.plan_file() if session.mode == "plan" else ""))


def on_continued(step: Step, then: str) -> None:
    """Go on after a saved decision: the next call, or the approved call's run."""
    turn = step.turn
    if turn.phase is not Phase.TOOLS:
        return
    if then == "next_tool":
        next_tool(step)
    elif then == "execute" and turn.awaiting is not None and turn.tool_queue:
        verdict, turn.awaiting = turn.awaiting, None
        call = turn.tool_queue[0]
        if verdict.call_id == call.id:  # the very call that was approved runs, no other
            execute(step, call, verdict)
        else:
            refuse(step, call, "the approval was for another call")


def on_skills_read(step: Step, read: SkillsRead) -> None:
    """The skills the model asked for, as the call's result."""
    turn = step.turn
    if turn.phase is Phase.TOOLS and turn.tool_queue and turn.tool_queue[0].id == read.call_id:
        finish_engine_call(step, turn.tool_queue[0], read.body, False)


def refuse(step: Step, call: ToolUseBlock, reason: str) -> None:
    """Answer the call with a refusal and go on with the next."""
    step.session.refuse_tool_call(call_id=call.id, reason=reason)
    step.turn.tool_queue.popleft()
    next_tool(step)


def on_tool_finished(step: Step, message: ToolFinished) -> None:
    """Record the running call's result (and the snapshot taken before it), then go on."""
    turn, session = step.turn, step.session
    if turn.phase is not Phase.EXECUTING or not turn.tool_queue:
        return
    step.active()
    if message.generation != turn.generation or turn.tool_queue[0].id != message.call_id:
        return
    if message.snapshot is not None:
        session.record_snapshot(call_id=message.call_id, snapshot_id=message.snapshot.id,
                                folder=message.snapshot.folder,
                                paths=[e.path for e in message.snapshot.entries])
    if message.wrote_plan:
        call = turn.tool_queue[0]
        content = call.input.get("content") if call.name == "write_file" else None
        turn.plan.candidate = content if isinstance(content, str) else ""
    turn.plan.finished(message.output.is_error)
    session.record_tool_result(call_id=message.call_id, tool=message.tool,
                               output=step.env.redactor.text(message.output.content),
                               is_error=message.output.is_error)
    turn.tool_queue.popleft()
    turn.phase = Phase.TOOLS
    step.effects.append(Continue("next_tool"))  # the result is saved before anything else
