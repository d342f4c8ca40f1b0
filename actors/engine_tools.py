"""The tools the engine answers itself: ``AskUserQuestion`` and ``ExitPlanMode``. Pure.

They never reach the tool executor: the session turns them into interactions with the
chat (a question, a plan review). Their names are Claude Code's, which models know.
This module holds their definitions, the planning instruction, how the plan text is found
and how a chat's reply to a plan review is read.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

ASK_USER_QUESTION = "AskUserQuestion"
EXIT_PLAN_MODE = "ExitPlanMode"
LOAD_TOOLS = "load_tools"
LOAD_SKILLS = "load_skills"
ENGINE_TOOLS = frozenset({ASK_USER_QUESTION, EXIT_PLAN_MODE, LOAD_TOOLS, LOAD_SKILLS})

_ASK_DEFINITION: dict[str, Any] = {
    "name": ASK_USER_QUESTION,
    "description": (
        "Ask the user a question and wait for the answer (it comes back as this tool's "
        "result). Use it when you cannot go on without their decision; offer options when "
        "there are a few obvious ones."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "question": {"type": "string", "description": "The question, in one message."},
            "options": {"type": "array", "items": {"type": "string"},
                        "description": "Suggested answers (the user may answer otherwise)."},
        },
        "required": ["question"],
    },
}

_EXIT_PLAN_DEFINITION: dict[str, Any] = {
    "name": EXIT_PLAN_MODE,
    "description": (
        "Call this when the plan is written to the plan file and ready for the user's "
        "review. The user will proceed, proceed with a fresh context, or ask for changes."
    ),
    "input_schema": {"type": "object", "properties": {}},
}

PLAN_INSTRUCTION = (
    "You are in plan mode. Explore the workspace and plan before changing anything: read "
    "files and run inspection commands, but do not edit, create or delete files other than "
    "the plan file. Write the complete plan to {plan_file} (what to change, in which files, "
    "in what order, and how to check it), then call ExitPlanMode for the user's review."
)

FALLBACK_PLAN = (
    "(The agent finished planning but no plan text was found: not in the plan file, not "
    "written to it, not in its reply. Ask it to show the plan with /adjust.)"
)

PlanSource = Literal["file", "written", "streamed", "fallback"]
Choice = Literal["proceed", "clean_proceed", "default", "adjust"]
"""A plan review's answer: implement it (auto mode), with a fresh context, in the default
mode (every escalation asked), or change it."""

SHORT_PLAN = 50
"""A plan this short (stripped) is not embedded in the implementation prompt (seed 000)."""


class Question(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The input of ``AskUserQuestion``."""

    question: str
    options: list[str] = []


def definitions(mode: str) -> list[dict[str, Any]]:
    """The engine's tool definitions for a session in ``mode`` (ExitPlanMode only while
    planning)."""
    tools = [_ASK_DEFINITION]
    if mode == "plan":
        tools.append(_EXIT_PLAN_DEFINITION)
    return [dict(tool) for tool in tools]


def load_tools_definition(groups: dict[str, str], loaded: list[str]) -> dict[str, Any]:
    """The ``load_tools`` meta-tool: the groups not loaded yet, what each holds."""
    offered = {name: what for name, what in groups.items() if name not in loaded}
    listing = "; ".join(f"{name}: {what}" for name, what in offered.items())
    return {
        "name": LOAD_TOOLS,
        "description": (
            "Load groups of tools; their definitions are available from your next step on, "
            f"for the rest of the session. Groups: {listing or 'all are loaded'}."
        ),
        "input_schema": {
            "type": "object",
            "properties": {"groups": {"type": "array",
                                      "items": {"type": "string", "enum": sorted(groups)}}},
            "required": ["groups"],
        },
    }


def parse_load_tools(tool_input: dict[str, Any], known: dict[str, str]) -> list[str] | str:
    """The groups asked for, or why the input is not valid (the tool's error result)."""
    groups = tool_input.get("groups")
    if not isinstance(groups, list) or not groups or not all(
            isinstance(g, str) for g in groups):
        return "load_tools needs {groups: [string]} naming at least one group"
    unknown = [g for g in groups if g not in known]
    if unknown:
        return f"no tool group {', '.join(unknown)}; the groups are {', '.join(known)}"
    return list(dict.fromkeys(groups))


def parse_question(tool_input: dict[str, Any]) -> Question | str:
    """The question asked, or why the input is not one (the tool's error result)."""
    try:
        question = msgspec.convert(tool_input, Question)
    except msgspec.ValidationError as exc:
        return f"AskUserQuestion needs {{question: string, options?: [string]}}: {exc}"
    if not question.question.strip():
        return "AskUserQuestion needs a non-empty question"
    return question


def system_prompt(base: str, mode: str, plan_file: str) -> str:
    """The system prompt for a model call: ``base``, plus the planning instruction in
    plan mode."""
    if mode != "plan":
        return base
    return f"{base}\n\n{PLAN_INSTRUCTION.format(plan_file=plan_file)}"


def resolve_plan(on_disk: str | None, written: str | None, streamed: str) -> tuple[str,
                                                                                    PlanSource]:
    """The plan text and where it came from: the plan file on disk, else the last content
    written to it, else the text the model streamed, else a fallback line."""
    for text, source in ((on_disk, "file"), (written, "written"), (streamed, "streamed")):
        if text and text.strip():
            return text.strip(), source  # type: ignore[return-value]
    return FALLBACK_PLAN, "fallback"


def implementation_prompt(plan: str) -> str:
    """The message that starts the implementation once a plan is approved: the plan
    embedded, unless it is :data:`SHORT_PLAN` characters or fewer (seed 000: then the
    plain instruction)."""
    if len(plan.strip()) <= SHORT_PLAN:
        return "The plan is approved. Implement it now."
    return (
        "The plan below is approved. Implement it now, step by step, and check the result "
        f"as the plan says.\n\n<plan>\n{plan}\n</plan>"
    )


def read_plan_reply(text: str) -> tuple[Choice, str]:
    """A chat's plain-text reply to a plan review: always feedback (adjust), as in seed
    000, even "ok" or "yes": approving takes ``/proceed``, ``/clean`` or ``/default`` (or
    the connector's button)."""
    return "adjust", text.strip()


def plan_result(choice: str, feedback: str) -> tuple[str, bool]:
    """The ExitPlanMode tool result for the user's choice: its text and whether it is an
    error (adjust: the model must change the plan and stay in plan mode)."""
    if choice == "adjust":
        return (f"The user wants the plan changed before anything is implemented: "
                f"{feedback.rstrip('.') or '(no details given)'}. Stay in plan mode, update "
                "the plan file and call ExitPlanMode again."), True
    how = {"clean_proceed": " with a fresh context",
           "default": " in the default mode (each escalated call is asked)"}.get(choice, "")
    return f"The user approved the plan; implementation follows{how}.", False
