"""What a command line's commands see: the folders they may run in, the variables the
analysis knows, and the words it can take literally.

:class:`State` is shared by the commands of one shell; :meth:`State.child` is a subshell
(its own folders and variables, the same output). Folders are a list of possibilities
(``cd`` may fail, so after it both the old and the new folder may be current); ``None``
means unknown. A variable is known only from an unconditional assignment of literal text
without spaces; ``for NAME in WORDS`` binds NAME to the brace alternation of the words.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from tether.actors.gatekeeper.security.shell.lexer import Word
from tether.actors.gatekeeper.security.shell.model import ShellCommand, is_dynamic


@dataclass
class Out:
    """What the analysis of one command line produces, shared by all its shells: the
    simple commands, problems, unreadable constructs outside any command, the absolute
    paths written so far (a script written and then run is unreadable)."""

    commands: list[ShellCommand] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    written: set[str] = field(default_factory=set)
    pipeline: int = 0


@dataclass
class State:
    """One shell's view: possible folders, known variables, functions defined, whether
    all its commands are fed data (``>(...)``), whether ``CDPATH`` was set, and for each
    open loop the variable it binds with its value before the loop (a loop's own
    redirections are expanded before it runs)."""

    cwds: list[str | None]
    home: str
    variables: dict[str, str]
    out: Out
    functions: set[str] = field(default_factory=set)
    fed_all: bool = False
    cdpath: bool = False
    loops: list[tuple[str, str | None]] = field(default_factory=list)

    @property
    def cwd(self) -> str | None:
        return None if None in self.cwds else self.cwds[0]

    def child(self, fed: bool = False) -> State:
        """A subshell: its own folder and variables, the same output."""
        return State(list(self.cwds), self.home, dict(self.variables), self.out,
                      self.functions, fed or self.fed_all, self.cdpath)


MAX_FOLDERS = 32
"""Possible folders kept at most; past that the folder is unknown. Each ``cd`` that may
fail keeps the folder before it as well, so ``cd a; cd b; ...`` doubles them: forty such
``cd`` held the gatekeeper for hours (and with it every session's calls)."""


def dedupe(cwds: list[str | None]) -> list[str | None]:
    """The folders in order, each once; unknown (``[None]``) when there are more than
    :data:`MAX_FOLDERS`."""
    unique = list(dict.fromkeys(cwds))
    return unique if len(unique) <= MAX_FOLDERS else [None]


def expand(word: str, state: State) -> str:
    """``word`` with ``~`` and the variables the analysis knows expanded."""
    if word == "~" or word.startswith("~/"):
        word = state.home + word[1:]
    if "$" not in word:
        return word

    def sub(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name == "PWD" and state.cwd is not None:
            return state.cwd
        return state.variables.get(name, match.group(0))

    return re.sub(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))", sub, word)


def known(word: Word | None, state: State) -> bool:
    """Bash expands nothing in ``word`` that the analysis does not know."""
    if word is None:
        return True
    if word.procsub and len(word.subs) == 1 and not word.arith and not word.params and (
            word.text == f"{word.procsub}({word.subs[0]})"):
        return True  # a pipe from or to a command that is analysed itself
    if word.subs or word.arith:
        return False
    return all(not p.startswith("{") and (p in state.variables or (p == "PWD" and state.cwd))
               for p in word.params)


def name_literal(word: Word | None, state: State, value: str) -> bool:
    """A command word that names one literal command."""
    if word is None:
        return True
    if value in ("[", "[["):
        return True
    return (known(word, state) and not word.ansi and not word.glob and not word.brace
            and not re.search(r"[\s*?\[\]{}]", value) and not value.startswith("-"))


def absolute(base: str, path: str) -> str:
    return os.path.normpath(os.path.join(base, path))


def assign(state: State, name: str, value: str, word: Word | None, *, append: bool = False,
            conditional: bool = False) -> None:
    text = expand(value, state)
    if append:
        old = state.variables.get(name)
        text = old + text if old is not None else "$" + name
    if (conditional or not known(word, state) or is_dynamic(text) or re.search(r"\s", text)
            or text.startswith("(")):
        state.variables.pop(name, None)
    else:
        state.variables[name] = text


def bind_loop(words: list[Word], state: State) -> None:
    """``for NAME in WORDS``: NAME stands for any of the words (a brace alternation)."""
    if not words:
        return
    name = words[0].text
    values = words[2:] if len(words) > 1 and words[1].text == "in" else None
    texts = [expand(w.text, state) for w in values or []]
    if (not values or any(not known(w, state) or w.brace for w in values)
            or any(re.search(r"[\s{},]", t) for t in texts)):
        state.variables.pop(name, None)
    else:
        state.variables[name] = texts[0] if len(texts) == 1 else "{" + ",".join(texts) + "}"


def change_dir(name: str, args: list[str], words: list[Word | None],
        state: State) -> tuple[list[str | None], list[str]]:
    if name != "cd":
        return [None], []
    reasons: list[str] = []
    options = [a for a in args if a.startswith("-") and a != "-" and a != "--"]
    operands = [a for a in args if a not in options and a != "--"]
    if any(set(o[1:]) & {"P", "L"} for o in options):
        reasons.append("cd -P/-L resolves links in a way the judge does not follow")
    if not operands:
        return [state.home], reasons
    target = operands[0]
    index = args.index(target)
    if target == "-" or not known(words[index] if index < len(words) else None, state) or (
            is_dynamic(target) or (state.cdpath and not target.startswith(("/", ".")))):
        return [None], reasons
    moved: list[str | None] = []
    for base in state.cwds:
        if base is None:
            moved.append(None)
            continue
        joined = os.path.join(base, target)
        moved.extend([os.path.normpath(joined), os.path.realpath(joined)])
    return dedupe(moved), reasons
