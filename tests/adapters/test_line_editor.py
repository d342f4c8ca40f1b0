"""The terminal chat's line: completion of / commands, editing and history, through a
real pseudo-terminal driving ``tether chat`` against the model stand-in."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from tests.helpers import engine_env
from tether.actors.commands import COMMANDS
from tether.adapters.fake_llm import FakeLLM
from tether.adapters.line_editor import SlashCompleter, line_readers

UP, LEFT, TAB = "\x1b[A", "\x1b[D", "\t"
CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\r")
"""The terminal's control sequences: what prompt_toolkit draws with, not what it shows."""


def completions(text: str) -> list[tuple[str, str]]:
    completer = SlashCompleter(COMMANDS)
    return [(c.text, c.display_meta_text) for c in
            completer.get_completions(Document(text), CompleteEvent(completion_requested=True))]


def test_a_slash_prefix_completes_to_the_commands_it_begins() -> None:
    assert [text for text, _ in completions("/de")] == ["/deny", "/default"]
    assert completions("/HE") == [("/help", COMMANDS["help"])]
    assert completions("/") and len(completions("/")) == len(COMMANDS)


def test_only_the_command_word_of_a_command_line_completes() -> None:
    assert completions("de") == []  # an ordinary message
    assert completions("/approve ab") == []  # the argument
    assert completions("//de") == []  # a message that starts with a slash
    assert completions("/zz") == []


def test_off_a_terminal_the_plain_input_reads() -> None:
    assert line_readers(None, COMMANDS, interactive=False) == (input, input)


class Pty:
    """A child process on a pseudo-terminal: type into it, wait for what it prints."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.fd, child = pty.openpty()
        self.proc = subprocess.Popen(argv, stdin=child, stdout=child, stderr=child, env=env,
                                     start_new_session=True)
        os.close(child)
        self.seen = ""

    def expect(self, pattern: str, timeout: float = 60.0) -> str:
        """Read until ``pattern`` (a regex) appears in what was printed since the last
        match; return that text."""
        deadline = time.monotonic() + timeout
        while not (found := re.search(pattern, self.seen)):
            left = deadline - time.monotonic()
            if left <= 0 or (self.proc.poll() is not None and not self._ready(0)):
                raise AssertionError(f"{pattern!r} not printed; got:\n{self.seen[-2000:]}")
            if self._ready(min(left, 0.5)):
                try:
                    printed = os.read(self.fd, 65536).decode(errors="replace")
                    self.seen += CONTROL.sub("", printed)
                except OSError:  # the child closed the terminal
                    continue
        text, self.seen = self.seen[:found.end()], self.seen[found.end():]
        return text

    def _ready(self, timeout: float) -> bool:
        return bool(select.select([self.fd], [], [], timeout)[0])

    def type(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def close(self, wait: float = 30.0) -> int:
        """Wait up to ``wait`` seconds for the child to leave (then stop it); its exit code."""
        try:
            return self.proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGTERM)
            return self.proc.wait(timeout=30)
        finally:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1


SCRIPT = """
responses:
  - match: "hello there"
    blocks: [{text: "First answer."}]
  - match: "hello there"
    blocks: [{text: "Second answer."}]
  - match: "hello there"
    blocks: [{text: "Third answer."}]
"""


@pytest.fixture
def chat(tmp_path: Path, nats_url: str, namespace: str, workspace: Path,
         fake_llm: Callable[[str], FakeLLM]) -> Iterator[Callable[[], Pty]]:
    llm = fake_llm(SCRIPT)
    env = {**engine_env(tmp_path, nats_url, namespace, workspace, llm.base_url),
           "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1", "COLUMNS": "120", "LINES": "40"}
    started: list[Pty] = []

    def start() -> Pty:
        started.append(Pty([sys.executable, "-m", "tether.adapters.cli", "chat"], env))
        return started[-1]

    yield start
    for child in started:
        if child.fd >= 0:
            child.close(wait=0)


def test_the_chat_line_edits_recalls_and_completes(chat: Callable[[], Pty],
                                                  tmp_path: Path) -> None:
    term = chat()
    term.expect("you>")
    term.type("/he" + TAB + "\r")  # Tab completes the command
    term.expect(r"/stop\s+stop the turn")  # the whole list of commands came back
    term.expect("you>")
    term.type("hello thre" + LEFT + LEFT + "e" + "\r")  # a letter put back mid-line
    term.expect("First answer")
    term.expect(r"\[completed\]")
    term.expect("you>")
    term.type(UP + "\r")  # the arrow recalls the last message
    term.expect("Second answer")
    term.expect("you>")
    term.type("/quit\r")
    term.expect("continue with: tether chat --session")
    assert term.close() == 0

    history = tmp_path / "state" / "chat_history"
    assert stat.S_IMODE(history.stat().st_mode) == 0o600
    assert "+hello there" in history.read_text().splitlines()

    again = chat()  # a new chat recalls the messages of the last one
    again.expect("you>")
    again.type(UP + UP + "\r")  # /quit, then the message before it
    again.expect("Third answer")
    again.expect("you>")
    again.type("\x04")  # Ctrl-D leaves
    again.expect("continue with")
    assert again.close() == 0


def test_sigterm_at_the_prompt_leaves_cleanly(chat: Callable[[], Pty]) -> None:
    term = chat()
    term.expect("you>")
    term.type("hello there\r")
    term.expect(r"\[completed\]")
    term.expect("you>")
    os.kill(term.proc.pid, signal.SIGTERM)
    term.expect("continue with: tether chat --session")
    assert term.close() == 0


def test_the_history_file_stays_private_and_never_follows_a_link(tmp_path: Path) -> None:
    from tether.adapters.line_editor import PrivateFileHistory, _private_history

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    victim = tmp_path / "victim.txt"
    victim.write_text("the victim's file\n")
    (state / "chat_history").symlink_to(victim)  # planted before the chat runs
    history = _private_history(str(state / "chat_history"))
    assert list(history.load_history_strings()) == []
    history.store_string("a secret the user typed")
    assert victim.read_text() == "the victim's file\n"  # not written through the link

    loose = state / "loose_history"
    loose.write_text("\n# earlier\n+old message\n")
    loose.chmod(0o666)
    kept = PrivateFileHistory(str(loose))
    assert list(kept.load_history_strings()) == ["old message"]
    kept.store_string("new\nmessage")
    assert stat.S_IMODE(loose.stat().st_mode) == 0o600
    assert list(kept.load_history_strings()) == ["new\nmessage", "old message"]

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    in_memory = _private_history(str(shared / "chat_history"))
    in_memory.store_string("not kept on disk")
    assert not (shared / "chat_history").exists()


def test_a_fifo_or_a_hard_link_in_the_history_s_place_is_left_alone(tmp_path: Path) -> None:
    from tether.adapters.line_editor import PrivateFileHistory

    fifo = tmp_path / "fifo_history"
    os.mkfifo(fifo)
    assert list(PrivateFileHistory(str(fifo)).load_history_strings()) == []  # no hang
    other = tmp_path / "other.txt"
    other.write_text("another file of the user's\n")
    linked = tmp_path / "linked_history"
    os.link(other, linked)
    history = PrivateFileHistory(str(linked))
    history.store_string("typed")
    assert other.read_text() == "another file of the user's\n"
