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

import datetime
import io
import os
import stat
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


class PrivateFileHistory(FileHistory):
    """prompt_toolkit's history file, kept private: every open refuses a symlink in the
    file's place (``O_NOFOLLOW``) and anything but a regular file this user owns with no
    other hard link, and a
    file others could read is made 0600 before it is used. A file that cannot be used so
    is left alone: the history is then kept for this run only (with one warning)."""

    def __init__(self, filename: str) -> None:
        super().__init__(filename)
        self.usable = True

    def _open(self, flags: int) -> int:
        fd = os.open(self.filename, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     0o600)  # O_NONBLOCK: a FIFO in its place cannot hang the chat
        info = os.fstat(fd)
        if (not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid()
                or info.st_nlink != 1):  # a hard link would write into another file
            os.close(fd)
            raise PermissionError(f"{self.filename!s} is not a file of this user's alone")
        if info.st_mode & 0o077:
            os.fchmod(fd, 0o600)
        return fd

    def _refuse(self, exc: OSError) -> None:
        if self.usable:
            self.usable = False
            print(f"tether chat: the history {self.filename!s} is not used ({exc}); "
                  "messages are remembered for this chat only", file=sys.stderr)

    def load_history_strings(self) -> Iterable[str]:
        try:
            fd = self._open(os.O_RDONLY)
        except FileNotFoundError:
            return []
        except OSError as exc:
            self._refuse(exc)
            return []
        with os.fdopen(fd, "rb") as handle:
            raw = handle.read()
        entries: list[str] = []
        lines: list[str] = []
        for line_bytes in io.BytesIO(raw):  # the format FileHistory writes, line by line
            line = line_bytes.decode("utf-8", errors="replace")
            if line.startswith("+"):
                lines.append(line[1:])
            elif lines:
                entries.append("".join(lines)[:-1])
                lines = []
        if lines:
            entries.append("".join(lines)[:-1])
        return list(reversed(entries))

    def store_string(self, string: str) -> None:
        if not self.usable:
            return
        try:
            fd = self._open(os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        except OSError as exc:
            self._refuse(exc)
            return
        with os.fdopen(fd, "ab") as handle:
            lines = "".join(f"+{line}\n" for line in string.split("\n"))
            handle.write(f"\n# {datetime.datetime.now()}\n{lines}".encode(errors="replace"))


def _private_history(path: str) -> History:
    """The history kept in ``path`` (:class:`PrivateFileHistory`), its folder made 0700 if
    missing; this run's only when the folder is not this user's alone."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, mode=0o700, exist_ok=True)
    info = os.stat(folder)
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        print(f"tether chat: {folder} is not this user's alone; messages are remembered "
              "for this chat only", file=sys.stderr)
        return InMemoryHistory()
    return PrivateFileHistory(path)


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
