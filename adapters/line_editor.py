"""The terminal chat's input line: editing, history and completion of the ``/`` commands.

On a terminal, prompt_toolkit reads each line: the arrows move along the line and recall
earlier messages, Ctrl-R searches them, Tab completes a ``/`` command (showing what it
does). The messages typed persist in a history file that only its owner may read (what a
user typed can hold a secret). Off a terminal (a pipe, a script) the plain ``input()``
reads, so ``echo hello | tether chat`` keeps working.

Both readers raise ``EOFError`` at the end of input (Ctrl-D) and ``KeyboardInterrupt`` at
Ctrl-C, as ``input()`` does.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Mapping

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.history import FileHistory, History, InMemoryHistory

__all__ = ["LineReader", "SlashCompleter", "line_readers"]

LineReader = Callable[[str], str]
"""Shows a prompt and returns the line typed (without its newline)."""


class SlashCompleter(Completer):
    """Completes the command word of a line that starts with ``/``: the commands whose
    names begin with what was typed, each shown with what it does."""

    def __init__(self, commands: Mapping[str, str]) -> None:
        self.commands = dict(commands)

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterable[Completion]:
        before = document.text_before_cursor
        if not before.startswith("/") or before.startswith("//") or " " in before:
            return
        typed = before[1:].lower()
        for name, what in self.commands.items():
            if name.startswith(typed):
                yield Completion(f"/{name}", start_position=-len(before), display_meta=what)


def _private_history(path: str) -> History:
    """A history file created with mode 0600 (its folder 0700) before anything is written."""
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600))
    return FileHistory(path)


def line_readers(
    history_path: str | None, commands: Mapping[str, str], *, interactive: bool | None = None,
) -> tuple[LineReader, LineReader]:
    """The readers for the chat's messages and for its answers (approvals, reviews).

    Messages are kept in ``history_path`` (None: only for this run); answers have their
    own history, for this run only, so a ``y`` does not crowd out the messages.
    ``interactive``: whether stdin and stdout are a terminal (None: ask them); when not,
    both readers are ``input``.
    """
    if interactive is None:
        interactive = sys.stdin.isatty() and sys.stdout.isatty()
    if not interactive:
        return input, input
    completer = SlashCompleter(commands)
    history = _private_history(history_path) if history_path else InMemoryHistory()
    messages: PromptSession[str] = PromptSession(history=history, completer=completer,
                                                 complete_while_typing=False)
    answers: PromptSession[str] = PromptSession(history=InMemoryHistory(),
                                                completer=completer,
                                                complete_while_typing=False)
    return messages.prompt, answers.prompt
