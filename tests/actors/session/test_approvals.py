"""Tier 3 from the session's side, decided on plain values: while a call waits for its
approval, /approve and plain text go to the coordinator (never to the model), and the
answer it settles is recorded with who gave it.

(Which answer wins, ids, expiry and who may answer are the coordinator's:
tests/actors/chat/test_approvals.py, test_who_answers.py, test_endings.py; an approval's
run: test_tools.py.)
"""

from __future__ import annotations

from tests.actors.session.driver import SID, Core, calls_model, eager, runs
from tether.actors.session import Phase
from tether.events.messages import (
    Accepted,
    ApprovalRequest,
    ChannelMessage,
    ChatText,
    InteractionAnswer,
    InteractionSettled,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)
from tether.events.session import Session

PUSH = ToolUseBlock(id="c1", name="run_shell", input={"command": "git push origin main"})


def waiting(core: Core) -> None:
    """The model asks to push; the gatekeeper escalates it to a person."""
    core.say("please publish it")
    core.call_tools(PUSH)
    core.verdict(PUSH, "escalate", reason="pushing needs a person")
    assert core.phase is Phase.APPROVAL


def decided(core: Core) -> list[tuple[str, str]]:
    return [(e.decision, e.tier) for e in core.log if isinstance(e, Session.ToolCallDecided)]


def reasons(core: Core) -> list[str]:
    return [e.reason for e in core.log if isinstance(e, Session.ToolCallDecided)]


def test_approve_and_text_go_to_the_coordinator_never_to_the_model() -> None:
    core = eager()
    waiting(core)
    fed = core.say("/approve a1b2")
    (answer,) = fed.sent(InteractionAnswer)
    assert (answer.interaction_id, answer.approved, answer.call_id, answer.user) == (
        "a1b2", True, "c1", "alice")
    assert [m.text for m in fed.sent(ChannelMessage)] == ["answer sent"]
    assert not runs(fed)  # the call runs once the coordinator settles it
    approved = core.feed(InteractionSettled(session_id=SID, call_id="c1", interaction_id="a1b2",
                                            kind="approval", outcome="approved", by="alice",
                                            reason="approved by alice"))
    assert runs(approved)
    # The escalation's tier is the gatekeeper's; the answer's is the session's record.
    assert decided(core)[-1] == ("allow", "human")
    assert "approved by alice" in reasons(core)[-1]

    core = eager()
    waiting(core)
    text = core.say("no, not on a Friday")  # plain text: the coordinator makes it a no
    assert [m.text for m in text.sent(ChatText)] == ["no, not on a Friday"]
    assert text.sent(Accepted) and text.events == [] and not calls_model(text)
    core.feed(InteractionSettled(session_id=SID, call_id="c1", interaction_id="a1b2",
                                 kind="approval", outcome="denied", by="alice",
                                 reason="no, not on a Friday"))
    refused = [b for t in core.session.history for b in t.content
               if isinstance(b, ToolResultBlock)][-1]
    assert refused.is_error and "not on a Friday" in refused.content
    texts = [e.text for e in core.log if isinstance(e, Session.UserMessageReceived)]
    assert "no, not on a Friday" not in texts  # the answer never reached the model


def test_no_answer_in_time_is_a_no_and_timeouts_are_not_people() -> None:
    core = eager()
    waiting(core)
    fed = core.feed(InteractionSettled(session_id=SID, call_id="c1", interaction_id="a1b2",
                                       kind="approval", outcome="expired", by="timeout",
                                       reason="no answer within 300 s"))
    assert decided(core)[-1] == ("deny", "approval-timeout")
    refused = [b for t in core.session.history for b in t.content
               if isinstance(b, ToolResultBlock)][-1]
    assert refused.is_error and "no answer within 300 s" in refused.content
    assert not runs(fed) and calls_model(fed)


def test_an_approval_is_asked_in_the_latest_chat_for_the_home_chats_approvers() -> None:
    """The session started on "term"; its owner writes from "ops": the approval is asked
    in "ops", and names "term" as the home whose approvers count (what the coordinator
    does with it: tests/actors/chat/test_who_answers.py)."""
    core = eager()
    core.feed(UserMessage(text="please publish it", channel="ops", session_id=SID,
                          user="alice"))
    core.call_tools(PUSH)
    fed = core.verdict(PUSH, "escalate", reason="pushing needs a person")
    (request,) = fed.sent(ApprovalRequest)
    assert (request.channel, request.home_channel, request.owner) == ("ops", "term", "alice")
