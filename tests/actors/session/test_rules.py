"""The rule monitor's interrupts, on the session's side, decided on plain values: one
interrupt per generation however often it comes, a message sent during the retry waits
its turn, the partial reply dropped or kept as the monitor says, a reply the barrier
finds breaking a rule never stored nor run, and another completion that breaks a rule
is only dropped.

(Which rules match what, and what the monitor says, are the monitor's: tested end to end
in tests/integration/test_ttsr.py.)
"""

from __future__ import annotations

import json
from typing import Literal

from tests.actors.session.driver import SID, Core, Fed, branch_back, eager, runs
from tether.actors.ports import TextDelta, ToolOutput
from tether.actors.session.effects import CallModel, CancelModel
from tether.actors.session.inputs import ModelDelta, ToolFinished
from tether.events.messages import (
    Generate,
    GenerationDone,
    Interrupt,
    KillSession,
    Reminder,
    StreamDelta,
    TextBlock,
    ToolProposal,
    ToolUseBlock,
    TreeQuery,
    TreeView,
)
from tether.events.session import Session


def texts(core: Core) -> list[str]:
    return [b.text for t in core.session.history if t.role == "assistant" for b in t.content
            if isinstance(b, TextBlock)]


def interrupt(core: Core, generation: int, rule: str, reminder: str) -> Fed:
    return core.feed(Interrupt(session_id=SID, generation=generation, rules=[rule],
                               reminder=reminder, source="text"))


def test_an_interrupt_is_applied_once_and_a_message_mid_retry_waits() -> None:
    core = Core()
    core.say("start please")
    first = core.generation
    core.feed(ModelDelta(first, TextDelta(0, "A TODO here, and more")))
    # Duplicates of the monitor's interrupt (a re-delivery, say) for the same generation.
    applied = interrupt(core, first, "no-todo", "No TODOs.")
    assert applied.names() == ["TtsrInterrupted"] and applied.of(CallModel)
    for _ in range(2):
        again = interrupt(core, first, "no-todo", "No TODOs.")
        assert again.events == [] and again.effects == []
    waits = core.say("a follow-up question")  # arrives while the retry streams
    assert waits.names() == ["UserMessageQueued"] and not waits.of(CallModel)
    retried = core.answer("The retried answer, streamed slowly.")
    assert retried.recorded(Session.TurnCompleted) and retried.of(CallModel)
    assert core.answer("The follow-up answer.").recorded(Session.TurnCompleted)
    assert [type(e).__name__ for e in core.log].count("TtsrInterrupted") == 1
    assert core.session.turns == 2
    assert texts(core) == ["The retried answer, streamed slowly.", "The follow-up answer."]


def test_a_completion_a_rule_drops_is_recorded_and_the_next_one_is_clean() -> None:
    """With several completions, one that breaks a rule is dropped (AlternativeDropped)
    and the next is a generation of its own: nothing of the dropped stream reaches it."""
    core = Core()
    fed = [core.say("name a colour"), core.answer("Red.")]
    branch_back(core)
    user = core.session.conversation.cursor
    fed += [core.feed(Generate(session_id=SID, n=3, tools=False)), core.answer("Red.")]
    blue = core.generation
    fed.append(core.feed(ModelDelta(blue, TextDelta(0, "BLUE and then a long tail"))))
    dropped = interrupt(core, blue, "no-blue", "No blue.")
    assert dropped.names() == ["AlternativeDropped"]
    assert [e.rules for e in dropped.recorded(Session.AlternativeDropped)] == [["no-blue"]]
    fed += [dropped, core.answer("Green.")]
    assert fed[-1].sent(GenerationDone)

    (view,) = core.feed(TreeQuery(session_id=SID)).sent(TreeView)
    answers = [n.text for n in view.nodes if n.parent_id == user]
    assert answers == ["Red.", "Green."]  # the first completion matched the old reply
    generations: dict[int, str] = {}
    for delta in (d for f in fed for d in f.sent(StreamDelta) if d.kind == "text"):
        generations[delta.generation] = generations.get(delta.generation, "") + delta.text
    assert "Green." in generations.values()  # its own generation, nothing else in it
    assert len([c for f in fed for c in f.of(CallModel)]) == 4


def test_discard_drops_the_partial_reply_and_keep_keeps_it() -> None:
    core = Core()
    tasks: list[tuple[str, str, Literal["discard", "keep"], str]] = [
        ("first task", "Sure, here is a TODO", "discard", "Done properly."),
        ("second task", "A quick HACK will", "keep", "Done cleanly.")]
    for task, partial, mode, retried in tasks:
        core.say(task)
        core.feed(ModelDelta(core.generation, TextDelta(0, partial)))
        fed = core.feed(Interrupt(session_id=SID, generation=core.generation, rules=["r"],
                                  reminder="Follow the rule.", source="text",
                                  context_mode=mode))
        (interrupted,) = fed.recorded(Session.TtsrInterrupted)
        assert (interrupted.partial_text, interrupted.context_mode) == (partial, mode)
        core.answer(retried)
    # discard: the partial reply is gone; keep: what had streamed stays, before the reminder.
    assert texts(core) == ["Done properly.", "A quick HACK will", "Done cleanly."]


def test_the_barrier_stops_a_violating_tool_call_before_it_runs() -> None:
    core = eager()
    core.say("save the data")
    secret = ToolUseBlock(id="c1", name="write_file",
                          input={"path": "secrets.txt", "content": "x"})
    core.stream([TextBlock("Saving it."), secret], stop="tool_use")
    stopped = core.barrier(clear=False, rules=["no-secrets-file"],
                           reminder="Never touch secrets.txt.")
    assert stopped.names() == ["TtsrInterrupted"]
    assert not stopped.sent(ToolProposal) and not runs(stopped)
    (again,) = stopped.of(CallModel)
    assert "Never touch secrets.txt." in str(again.request.messages)
    notes = ToolUseBlock(id="c2", name="write_file", input={"path": "notes.txt", "content": "x"})
    assert [p.call_id for p in core.call_tools(notes).sent(ToolProposal)] == ["c2"]
    assert [r.call.id for r in runs(core.verdict(notes))] == ["c2"]
    core.feed(ToolFinished(core.generation, "c2", "write_file", ToolOutput("wrote notes.txt")))
    assert core.answer("Saved to notes.txt instead.").recorded(Session.TurnCompleted)
    calls = [b.input["path"] for t in core.session.history for b in t.content
             if isinstance(b, ToolUseBlock)]
    assert calls == ["notes.txt"]  # the violating call was never stored, nor run


def test_a_rule_that_never_interrupts_reminds_after_the_turn() -> None:
    """A reminder the barrier's clear answer carries (a rule with ``interrupt: never``)
    stops nothing: the reply is stored as it came, the reminder joins the history once,
    after the turn, and the next call carries it."""
    core = Core()
    core.say("explain it")
    core.stream([TextBlock("Obviously, it works.")])
    tone = Reminder(["tone"], "Avoid condescension.")
    fed = core.barrier(later=[tone, tone])  # told twice: added once
    assert not fed.of(CancelModel) and not fed.recorded(Session.TtsrInterrupted)
    assert texts(core) == ["Obviously, it works."]
    (added,) = fed.recorded(Session.TtsrReminderAdded)
    assert (added.rules, added.reminder) == (["tone"], "Avoid condescension.")
    assert fed.names().index("AssistantMessageAppended") < fed.names().index(
        "TtsrReminderAdded") < fed.names().index("TurnCompleted")
    (call,) = core.say("again please").of(CallModel)
    assert "Avoid condescension." in json.dumps(call.request.messages)
    assert not core.answer("It works because of the cache.").recorded(
        Session.TtsrReminderAdded)  # the next turn adds none of its own


def test_a_killed_turn_keeps_the_reminders_it_held() -> None:
    """A turn killed while its tool runs adds the reminders it held, as a failed turn
    does: the rule's injection is recorded, so a rule that fires once would otherwise
    never reach the model."""
    core = eager()
    core.say("tidy the notes")
    call = ToolUseBlock(id="c1", name="read_file", input={"path": "notes.md"})
    core.stream([call], stop="tool_use")
    tone = Reminder(["tone"], "Avoid condescension.")
    core.barrier(later=[tone])
    assert runs(core.verdict(call))
    fed = core.feed(KillSession(session_id=SID))
    (added,) = fed.recorded(Session.TtsrReminderAdded)
    assert (added.rules, added.reminder) == (["tone"], "Avoid condescension.")
    (resumed,) = core.say("go on").of(CallModel)
    assert "Avoid condescension." in json.dumps(resumed.request.messages)
