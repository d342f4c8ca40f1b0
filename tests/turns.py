"""Messages of a history, for the tests of the conversation tree."""

from __future__ import annotations

from tether.events.conversation import Turn
from tether.events.messages import TextBlock, ToolResultBlock, ToolUseBlock


def user(text: str) -> Turn:
    return Turn("user", [TextBlock(text)])


def assistant(text: str) -> Turn:
    return Turn("assistant", [TextBlock(text)])


CALL = Turn("assistant", [TextBlock("Looking."), ToolUseBlock("t1", "list_dir", {"path": "."})])
RESULT = Turn("user", [ToolResultBlock("t1", "a.py", False)])
CALLS = Turn("assistant", [ToolUseBlock("t1", "ls", {}), ToolUseBlock("t2", "cat", {})])
