"""What every built-in tool shares: its limits, its error type and the small helpers that
keep its paths inside the workspace and its output within bounds."""

from __future__ import annotations

from tether.actors.gatekeeper.deny_lists import resolve_in_workspace

DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_READ_CHARS = 100_000
DEFAULT_MAX_OUTPUT_CHARS = 30_000
#: Most files ``glob`` lists and matching lines ``grep`` returns.
DEFAULT_MAX_RESULTS = 200
#: ``grep`` skips files larger than this (bytes).
DEFAULT_MAX_GREP_FILE_BYTES = 5_000_000


class ToolError(Exception):
    """A tool's own failure, reported to the model as an error result."""


class ToolLimits:
    """The bounds every tool family reads (set by :class:`adapters.tools.BuiltinTools`)."""

    timeout: float
    max_read_chars: int
    max_output_chars: int
    max_results: int
    max_grep_file_bytes: int

    @staticmethod
    def _confine(path: str, workspace: str) -> str:
        resolved = resolve_in_workspace(path, workspace)
        if resolved is None:
            raise ToolError(f"refused: path {path} is outside the workspace {workspace}")
        return resolved

    def _capped(self, text: str, note: str) -> str:
        """``text`` cut to ``max_output_chars`` at a line end if possible, with ``note``."""
        if len(text) <= self.max_output_chars:
            return text
        cut = text.rfind("\n", 0, self.max_output_chars)
        kept = text[: cut if cut > 0 else self.max_output_chars]
        return f"{kept}\n[output capped at {self.max_output_chars} characters; {note}]"




def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"
