"""What the shell analysis produces (:class:`Target`, :class:`ShellCommand`,
:class:`ShellParse`), the command families it knows, and the helpers every command model
uses: a getopt-style option reader, host extraction and target construction."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from tether.actors.gatekeeper.security.shell.lexer import Word

Access = Literal["read", "write", "delete"]

#: Shells: they run a program given as ``-c`` text, a file, or standard input.
SHELLS: frozenset[str] = frozenset(
    {"sh", "bash", "zsh", "dash", "ksh", "fish", "ash", "mksh", "yash", "posh", "tcsh", "csh",
     "rbash", "pdksh", "oksh", "loksh", "elvish", "nu", "xonsh"}
)
#: Interpreters that run a program given inline, as a file, or on standard input.
INTERPRETERS: frozenset[str] = SHELLS | frozenset(
    {"python", "python2", "python3", "pypy", "pypy3", "perl", "ruby", "node", "nodejs", "php",
     "lua", "luajit", "osascript", "Rscript", "R", "julia", "tclsh", "wish", "expect", "pwsh",
     "powershell", "deno", "bun", "ts-node", "tsx", "irb", "jshell", "groovy", "scala", "m4",
     "dc", "ipython", "guile", "racket", "sbcl", "clisp", "ghci", "runghc", "elixir", "erl",
     "escript", "swift", "kotlinc", "crystal", "raku", "perl6"}
)
#: Commands that reach the network.
NETWORK: frozenset[str] = frozenset(
    {"curl", "wget", "nc", "ncat", "netcat", "ssh", "scp", "sftp", "rsync", "ftp", "telnet",
     "socat", "http", "https", "aria2c", "fetch", "git-remote-http"}
)
SAFE_SINKS: frozenset[str] = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "-"})
MAX_DEPTH = 6
_URL_HOST = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://(?:[^/\s@]*@)?(\[[^\]]+\]|[^/\s:?#]+)")
REMOTE = re.compile(r"^(?:[^@/\s:]+@)?([A-Za-z0-9.\-\[\]]+):(?!//)")
_VERSIONED = re.compile(r"^(python|pypy|perl|ruby|lua|php|node|tclsh|wish)[0-9][0-9.]*$")


class Target(msgspec.Struct, frozen=True):
    """One file a command touches, as written (variables it knew are expanded).

    ``via`` names the shell form (``>``, ``tee``, ``rm``, ``sed -i`` ...); ``recursive``
    means the whole tree below the path; ``dynamic`` means the real path cannot be known
    before the command runs (unknown variable, command substitution, ``xargs`` input).
    """

    path: str
    access: Access
    via: str
    recursive: bool = False
    dynamic: bool = False


class ShellCommand(msgspec.Struct, frozen=True):
    """One simple command of a command line.

    ``argv`` is the command after assignments, keywords and wrappers are removed (``name``
    is the basename of ``argv[0]``); ``words`` is everything as written, redirections
    included. ``cwd`` is the folder it runs in as far as ``cd`` could be followed (None when
    unknown); ``alt_cwds`` other folders it may run in (a ``cd`` that may have failed).
    Commands of one pipeline share ``pipeline``; ``position`` is the index inside it and
    ``pipeline_size`` its length. ``depth`` counts nesting (``bash -c``, ``eval``,
    ``$(...)``). ``opaque`` marks commands whose file effects are not modelled: any of their
    arguments could be a file they write. ``wrappers`` lists stripped wrappers (``sudo``).
    ``fed`` says data reaches its standard input (a pipe, a here-document, a file).
    ``unreadable`` says why the judge cannot read what this command does completely.
    """

    argv: tuple[str, ...]
    name: str
    words: tuple[str, ...]
    cwd: str | None
    pipeline: int
    position: int
    pipeline_size: int
    depth: int
    classes: tuple[str, ...]
    targets: tuple[Target, ...]
    hosts: tuple[str, ...]
    redirects: tuple[tuple[str, str], ...]
    opaque: bool
    wrappers: tuple[str, ...] = ()
    stdin_is_file: bool = False
    alt_cwds: tuple[str, ...] = ()
    fed: bool = False
    unreadable: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """The command's words joined back into shell syntax."""
        return shlex.join(self.words)


class ShellParse(msgspec.Struct, frozen=True):
    """All simple commands of a command line, problems that stopped the analysis, and what
    the judge could not read completely outside any one command (a function definition)."""

    commands: tuple[ShellCommand, ...]
    problems: tuple[str, ...]
    unreadable: tuple[str, ...] = ()


def is_dynamic(word: str) -> bool:
    """True when ``word`` still holds an expansion the analysis cannot evaluate."""
    if "$" in word or "`" in word:
        return True
    return word.startswith("~") and word != "~" and not word.startswith("~/")


def command_name(word: str) -> str:
    """The name a command word runs (``/usr/bin/env`` -> ``env``; ``python3.12`` ->
    ``python3``)."""
    name = os.path.basename(word) or word
    versioned = _VERSIONED.match(name)
    if versioned and name not in INTERPRETERS:
        return "python3" if versioned.group(1) == "python" else versioned.group(1)
    return name


@dataclass
class Effects:
    """What a command model found: files, hosts, extra classes, and whether the command is
    ``opaque`` (its file effects are not modelled), ``known`` to Tether at all, or does
    something the judge cannot read completely (``unreadable`` reasons)."""

    targets: list[Target] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    classes: set[str] = field(default_factory=set)
    opaque: bool = False
    known: bool = True
    unreadable: list[str] = field(default_factory=list)

    def write(self, path: str, via: str, *, dynamic: bool = False,
              recursive: bool = False) -> None:
        self.targets.append(target(path, "write", via, dynamic=dynamic, recursive=recursive))

    def read(self, path: str, via: str, *, recursive: bool = False) -> None:
        self.targets.append(target(path, "read", via, recursive=recursive))

    def delete(self, path: str, via: str, *, dynamic: bool = False,
               recursive: bool = False) -> None:
        self.targets.append(target(path, "delete", via, dynamic=dynamic, recursive=recursive))

    def cannot_read(self, reason: str) -> None:
        self.unreadable.append(reason)


@dataclass
class Ctx:
    """One command as a model sees it: its name, expanded arguments (``words`` are the
    lexed words, aligned with ``args`` where they came from the command line), the folder
    it runs in, nesting depth, whether its operands come from ``xargs`` input and whether
    data is fed to its standard input. ``child`` analyses text run by a child shell;
    ``same`` text run by this shell (``eval``); ``literal`` says whether a word holds
    nothing computed; ``written`` whether a path was written earlier in the command line."""

    name: str
    args: list[str]
    words: list[Word | None]
    cwd: str | None
    depth: int
    from_stdin: bool
    fed: bool
    child: Callable[[str], None]
    same: Callable[[str], None]
    literal: Callable[[Word | None], bool]
    written: Callable[[str], bool] = lambda path: False
    alt_cwds: tuple[str, ...] = ()

    @property
    def cwds(self) -> list[str]:
        """Every folder the command may run in (none when it is unknown)."""
        return [self.cwd, *self.alt_cwds] if self.cwd is not None else []


@dataclass
class Opts:
    """Options and operands read the way getopt_long reads them."""

    opts: list[tuple[str, str | None]]
    operands: list[str]

    def has(self, *names: str) -> bool:
        return any(o in names for o, _ in self.opts)

    def values(self, *names: str) -> list[str]:
        return [v for o, v in self.opts if o in names and v is not None]


def getopt(args: Iterable[str], short: str = "", long: Iterable[str] = (), *,
           permute: bool = True) -> Opts:
    """Read ``args`` like GNU getopt_long: ``short`` lists letters (``o:`` takes a value,
    ``i::`` an optional attached one), ``long`` names (``output=`` takes a value). Bundles
    (``-sSLo FILE``) and unambiguous prefixes of long names (``--outp=F``) are understood;
    a prefix that fits several names counts as each. ``permute`` False stops at the first
    operand (POSIX commands that run the rest)."""
    arglist = list(args)
    spec: dict[str, str] = {}
    j = 0
    while j < len(short):
        colons = len(short[j + 1 :]) - len(short[j + 1 :].lstrip(":"))
        spec[short[j]] = ":" * min(colons, 2)
        j += 1 + colons
    longs = {n.rstrip("="): n.endswith("=") for n in long}
    opts: list[tuple[str, str | None]] = []
    operands: list[str] = []
    i = 0
    only = False
    while i < len(arglist):
        arg = arglist[i]
        i += 1
        if only or arg == "-" or not arg.startswith("-"):
            operands.append(arg)
            only = only or not permute
            continue
        if arg == "--":
            only = True
            continue
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            found = [name] if name in longs else [n for n in longs if n.startswith(name)]
            if not found:
                opts.append(("--" + name, value if eq else None))
                continue
            if not eq and any(longs[n] for n in found) and i < len(arglist):
                value, eq = arglist[i], "="
                i += 1
            opts.extend(("--" + n, value if eq else None) for n in found)
            continue
        for k in range(1, len(arg)):
            letter = arg[k]
            kind = spec.get(letter, "")
            if kind == ":":
                rest = arg[k + 1 :]
                if not rest and i < len(arglist):
                    rest = arglist[i]
                    i += 1
                opts.append(("-" + letter, rest))
                break
            if kind == "::":
                opts.append(("-" + letter, arg[k + 1 :] or None))
                break
            opts.append(("-" + letter, None))
    return Opts(opts, operands)


def target(path: str, access: Access, via: str, *, dynamic: bool = False,
           recursive: bool = False) -> Target:
    return Target(path, access, via, recursive=recursive, dynamic=dynamic or is_dynamic(path))


def hosts_in(args: Iterable[str]) -> list[str]:
    """Host names of the URLs in ``args``."""
    return [m.group(1).strip("[]") for arg in args for m in _URL_HOST.finditer(arg)]


def url_leaf(url: str) -> str:
    """The file name a download of ``url`` is saved under by default."""
    path = re.sub(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/]*", "", url).split("?", 1)[0].split("#", 1)[0]
    leaf = path.rstrip("/").rsplit("/", 1)[-1] if path.strip("/") else ""
    return leaf or "index.html"
