"""What the coordinator tells a chat: the prompts that put an interaction to it, and the
words of its answers. Pure text, no state."""

from __future__ import annotations

from tether.actors.chat.interactions.state import Request
from tether.events.messages import ApprovalRequest, NoticeKind, QuestionRequest

CHOSEN = {"proceed": "proceed", "clean_proceed": "proceed with a fresh context",
          "default": "proceed in the default mode", "adjust": "adjust"}
"""A plan review's choice, as the chat is told it."""

ANSWER = {"approval": "answer the approvals of", "question": "answer the questions of",
          "plan_review": "review the plans of"}
"""What a refused text tried to do, by the kind of what it would have answered."""

TOO_LATE = ("nothing was waiting for an answer any more, so your message was not used; "
            "send it again")


NOTICE: dict[str, NoticeKind] = {"approval": "approval", "question": "question",
                                  "plan_review": "plan"}
"""The chat notice kind for an interaction kind (a plan review's is ``plan``)."""


def prompt(request: Request, interaction_id: str, timeout: float) -> str:
    """What the chat is asked, and how to answer."""
    if isinstance(request, ApprovalRequest):
        return (f"approval {interaction_id}: may I run {request.tool} {request.summary}? "
                f"({request.reason}) Reply /approve {interaction_id} or /deny "
                f"{interaction_id} [why]; any other message says no. No answer in "
                f"{timeout:g} s is a no.")
    if isinstance(request, QuestionRequest):
        options = "".join(f"\n  - {o}" for o in request.options)
        return (f"question {interaction_id}: {request.question}{options}\nReply with "
                f"your answer (no answer in {timeout:g} s counts as none).")
    return (f"plan {interaction_id} is ready for review:\n\n{request.plan}\n\n"
            "Reply /proceed to implement it, /clean to implement it with a fresh "
            "context, /default to implement it with every escalated call asked, "
            "or /adjust (or any other text) with what to change.")
