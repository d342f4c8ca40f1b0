"""Static analysis of a bash command line: simple commands, what they read, write, delete.

:func:`parse_shell` splits a command with :mod:`shlex` into simple commands (on ``;``,
``&&``, ``||``, ``|``, ``|&``, ``&``, newlines, parentheses and backticks), follows ``cd``,
literal variable assignments, wrappers (``sudo``, ``env``, ``xargs``, ``timeout`` ...) and
nested shells (``bash -c``, ``sh -c``, ``eval``, ``$(...)`` inside words, ``find -exec``),
and records for each command its file targets (redirections, ``tee``, ``cp``, ``mv``,
``rm``, ``sed -i``, ``ln``, ``truncate``, ``dd of=``, ``install``, ``chmod``/``chown`` ...),
the network hosts it names and its action classes.

The analysis errs towards seeing too much: a quoted ``">"`` is taken for a redirection, an
operand it cannot pin down (a variable it does not know, ``$(...)``, ``xargs`` input) is a
*dynamic* target. Deciding what that means is the caller's job (protection refuses dynamic
writes). The only I/O is ``os.path.isdir`` to tell whether a copy lands inside a folder.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import msgspec

Access = Literal["read", "write", "delete"]

#: Commands whose arguments never cause a file to change (naming a protected file is fine).
READERS: frozenset[str] = frozenset(
    {
        "cat",
        "head",
        "tail",
        "less",
        "more",
        "grep",
        "egrep",
        "fgrep",
        "rg",
        "wc",
        "diff",
        "cmp",
        "file",
        "stat",
        "ls",
        "echo",
        "printf",
        "md5sum",
        "sha1sum",
        "sha256sum",
        "readlink",
        "realpath",
        "basename",
        "dirname",
        "du",
        "nl",
        "test",
        "[",
        "[[",
        "true",
        "false",
        "pwd",
        "which",
        "type",
        "whoami",
        "date",
        "uname",
        "tree",
        "cd",
        "pushd",
        "popd",
        "exit",
        "return",
        "set",
        "export",
        "unset",
        "local",
        "read",
        "shift",
        "sleep",
        "wait",
        "mkdir",
        "source",
        ".",
        "base64",
        "tr",
        "cut",
        "uniq",
        "rev",
        "od",
        "hexdump",
        "strings",
        "jq",
        "awk",
        "ps",
        "env",
        "printenv",
        "id",
        "hostname",
    }
)

#: Interpreters that run a program given as ``-c``/``-e`` text, a file, or stdin.
SHELLS: frozenset[str] = frozenset({"sh", "bash", "zsh", "dash", "ksh", "fish", "ash", "mksh"})
INTERPRETERS: frozenset[str] = SHELLS | frozenset(
    {"python", "python2", "python3", "perl", "ruby", "node", "nodejs", "php", "lua", "osascript"}
)

#: Commands that reach the network.
NETWORK: frozenset[str] = frozenset(
    {
        "curl",
        "wget",
        "nc",
        "ncat",
        "netcat",
        "ssh",
        "scp",
        "sftp",
        "rsync",
        "ftp",
        "telnet",
        "socat",
        "http",
        "https",
        "aria2c",
        "fetch",
    }
)

_SEPARATORS = frozenset({";", "&&", "||", "|", "|&", "&", "\n", "(", ")", "`", ";;"})
_PIPES = frozenset({"|", "|&"})
_WRITE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})
_OPS = (
    "&>>",
    "<<<",
    "<<-",
    "&>",
    ">>",
    ">|",
    ">&",
    "<<",
    "<>",
    "<&",
    "&&",
    "||",
    "|&",
    ";;",
    ";",
    "&",
    "|",
    ">",
    "<",
    "(",
    ")",
    "\n",
    "`",
)
_PUNCT = "();<>|&\n`"
_KEYWORDS = frozenset(
    {
        "if",
        "then",
        "else",
        "elif",
        "fi",
        "do",
        "done",
        "while",
        "until",
        "!",
        "{",
        "}",
        "time",
        "esac",
        "coproc",
    }
)
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\+?=")
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_URL_HOST = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://(?:[^/\s@]*@)?(\[[^\]]+\]|[^/\s:?#]+)")
_REMOTE = re.compile(r"^(?:[^@/\s:]+@)?([A-Za-z0-9.\-\[\]]+):(?!//)")
_SAFE_SINKS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "-"})
MAX_DEPTH = 6


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
    unknown). Commands of one pipeline share ``pipeline``; ``position`` is the index inside
    it and ``pipeline_size`` its length. ``depth`` counts nesting (``bash -c``, ``eval``,
    ``$(...)``). ``opaque`` marks commands whose file effects are not modelled: any of their
    arguments could be a file they write. ``wrappers`` lists stripped wrappers (``sudo``).
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

    @property
    def text(self) -> str:
        """The command's words joined back into shell syntax."""
        return shlex.join(self.words)


class ShellParse(msgspec.Struct, frozen=True):
    """All simple commands of a command line, and problems that stopped the analysis."""

    commands: tuple[ShellCommand, ...]
    problems: tuple[str, ...]


def is_dynamic(word: str) -> bool:
    """True when ``word`` still holds an expansion the analysis cannot evaluate."""
    if "$" in word or "`" in word:
        return True
    return word.startswith("~") and word != "~" and not word.startswith("~/")


def _split_ops(token: str) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(token):
        for op in _OPS:
            if token.startswith(op, i):
                out.append(op)
                i += len(op)
                break
        else:  # pragma: no cover - every punctuation character is an operator prefix
            out.append(token[i])
            i += 1
    return out


def tokenize(command: str) -> list[str]:
    """Split a command line into words and operators; raises ``ValueError`` when quotes
    are unbalanced. Operators are tokens made only of ``();<>|&``, newline and backtick."""
    lex = shlex.shlex(command, posix=True, punctuation_chars=_PUNCT)
    lex.whitespace = " \t\r"
    lex.whitespace_split = True
    lex.commenters = ""
    tokens: list[str] = []
    for tok in lex:
        if tok and all(ch in _PUNCT for ch in tok):
            tokens.extend(_split_ops(tok))
        else:
            tokens.append(tok)
    return tokens


def _is_op(token: str) -> bool:
    return bool(token) and all(ch in _PUNCT for ch in token)


def substitutions(word: str) -> list[str]:
    """The texts of ``$(...)``, ``<(...)``, ``>(...)`` and backtick substitutions in a word."""
    found: list[str] = []
    i = 0
    while i < len(word):
        if word.startswith(("$(", "<(", ">("), i) and not word.startswith("$((", i):
            depth = 0
            for j in range(i + 1, len(word)):
                if word[j] == "(":
                    depth += 1
                elif word[j] == ")":
                    depth -= 1
                    if depth == 0:
                        found.append(word[i + 2 : j])
                        i = j
                        break
            else:
                found.append(word[i + 2 :])
                break
        elif word[i] == "`":
            end = word.find("`", i + 1)
            found.append(word[i + 1 : end] if end >= 0 else word[i + 1 :])
            if end < 0:
                break
            i = end
        i += 1
    return found


@dataclass
class _State:
    cwd: str | None
    home: str
    variables: dict[str, str]
    pipeline: int = 0
    commands: list[ShellCommand] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def parse_shell(command: str, cwd: str, home: str | None = None) -> ShellParse:
    """Analyse ``command`` as bash would run it from folder ``cwd``.

    ``home`` is the folder ``~`` and ``$HOME`` stand for (default: this process's home).
    Never raises: a command that cannot be tokenized comes back with a problem and no
    commands, which callers must treat as "could do anything".
    """
    home_dir = home if home is not None else os.path.expanduser("~")
    state = _State(cwd=cwd, home=home_dir, variables={"HOME": home_dir})
    _parse_into(command, state, depth=0)
    return ShellParse(commands=tuple(state.commands), problems=tuple(state.problems))


def _parse_into(command: str, state: _State, depth: int) -> None:
    if depth > MAX_DEPTH:
        state.problems.append("the command nests shells too deeply to analyse")
        return
    try:
        tokens = tokenize(command)
    except ValueError as err:
        state.problems.append(f"the command cannot be parsed ({err})")
        return
    groups: list[list[list[str]]] = [[]]
    current: list[str] = []
    for tok in tokens:
        if tok in _SEPARATORS:
            if current:
                groups[-1].append(current)
            current = []
            if tok not in _PIPES:
                groups.append([])
        else:
            current.append(tok)
    if current:
        groups[-1].append(current)
    for group in groups:
        if not group:
            continue
        state.pipeline += 1
        pipeline_id = state.pipeline
        for position, words in enumerate(group):
            _simple(words, state, depth, pipeline_id, position, len(group))


def _expand(word: str, state: _State) -> str:
    if word == "~" or word.startswith("~/"):
        word = state.home + word[1:]

    def sub(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name == "PWD" and state.cwd is not None:
            return state.cwd
        return state.variables.get(name, match.group(0))

    return _VAR.sub(sub, word) if "$" in word else word


def _simple(
    raw: list[str], state: _State, depth: int, pipeline_id: int, position: int, size: int
) -> None:
    words: list[str] = []
    redirects: list[tuple[str, str]] = []
    stdin_is_file = False
    cwd = state.cwd
    i = 0
    while i < len(raw):
        tok = raw[i]
        if _is_op(tok):
            nxt = raw[i + 1] if i + 1 < len(raw) else ""
            i += 2
            if tok in ("<<", "<<-", "<<<"):
                continue
            if tok in (">&", "<&") and (nxt.isdigit() or nxt == "-"):
                continue
            redirects.append((tok, nxt))
            if tok == "<":
                stdin_is_file = True
            continue
        words.append(tok)
        i += 1
    # command substitutions inside words run first, in the same folder
    for word in [*words, *(t for _, t in redirects)]:
        for inner in substitutions(word):
            _parse_into(inner, state, depth + 1)

    # leading assignments; a command made only of assignments sets variables
    k = 0
    pending: dict[str, str] = {}
    while k < len(words) and _ASSIGN.match(words[k]):
        name, _, value = words[k].partition("=")
        pending[name.rstrip("+")] = _expand(value, state)
        k += 1
    argv_raw = words[k:]
    while argv_raw and argv_raw[0] in _KEYWORDS:
        argv_raw = argv_raw[1:]
    if argv_raw and argv_raw[0] in ("for", "select", "case", "function"):
        argv_raw = []
    if not argv_raw:
        for name, value in pending.items():
            if is_dynamic(value):
                state.variables.pop(name, None)
            else:
                state.variables[name] = value
    argv = [_expand(w, state) for w in argv_raw]
    targets: list[Target] = []
    for op, target in redirects:
        path = _expand(target, state) if target else ""
        dynamic = not path or is_dynamic(path) or _is_op(path)
        if op in _WRITE_REDIRECTS:
            if path not in _SAFE_SINKS and not path.startswith("/dev/fd/"):
                targets.append(Target(path or target, "write", op, dynamic=dynamic))
        elif op == "<" and path:
            targets.append(Target(path, "read", op, dynamic=dynamic))

    wrappers: list[str] = []
    argv, wrappers, from_stdin = _strip_wrappers(argv, state, depth)
    name = _command_name(argv[0]) if argv else ""
    classes: set[str] = {"execute"} if argv else set()
    hosts: list[str] = []
    opaque = False
    if argv:
        effects = _effects(name, argv[1:], state, depth, from_stdin)
        targets.extend(effects.targets)
        hosts.extend(effects.hosts)
        opaque = effects.opaque
        if name in NETWORK or effects.hosts:
            classes.add("network")
        if name in ("cd", "pushd") and position == 0 and size == 1:
            _change_dir(argv[1:], state)
        elif name == "popd":
            state.cwd = None
    for t in targets:
        classes.add(t.access)
    state.commands.append(
        ShellCommand(
            argv=tuple(argv),
            name=name,
            words=tuple(raw),
            cwd=cwd,
            pipeline=pipeline_id,
            position=position,
            pipeline_size=size,
            depth=depth,
            classes=tuple(sorted(classes)),
            targets=tuple(targets),
            hosts=tuple(dict.fromkeys(hosts)),
            redirects=tuple(redirects),
            opaque=opaque,
            wrappers=tuple(wrappers),
            stdin_is_file=stdin_is_file,
        )
    )


def _command_name(word: str) -> str:
    return os.path.basename(word.lstrip("\\")) or word


def _change_dir(args: list[str], state: _State) -> None:
    operands = [a for a in args if not a.startswith("-")]
    if not operands:
        state.cwd = state.home
        return
    target = operands[0]
    if is_dynamic(target) or state.cwd is None:
        state.cwd = None
        return
    state.cwd = os.path.normpath(os.path.join(state.cwd, target))


_WRAPPER_VALUE_OPTS: Mapping[str, frozenset[str]] = {
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T"}),
    "doas": frozenset({"-u", "-C"}),
    "env": frozenset({"-u", "-C", "--unset", "--chdir"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "ionice": frozenset({"-c", "-n", "-p"}),
    "timeout": frozenset({"-s", "-k", "--signal", "--kill-after"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "xargs": frozenset({"-I", "-n", "-d", "-a", "-P", "-L", "-s", "-E", "-i"}),
    "nohup": frozenset(),
    "time": frozenset({"-f", "-o"}),
    "command": frozenset(),
    "builtin": frozenset(),
    "exec": frozenset({"-a"}),
    "setsid": frozenset(),
    "unbuffer": frozenset(),
    "busybox": frozenset(),
    "chronic": frozenset(),
    "caffeinate": frozenset(),
    "flock": frozenset({"-w", "-E"}),
    "watch": frozenset({"-n", "-d"}),
    "strace": frozenset({"-o", "-e", "-p", "-s"}),
}


def _strip_wrappers(
    argv: list[str], state: _State, depth: int
) -> tuple[list[str], list[str], bool]:
    """Remove wrapper commands; returns (argv, wrappers, operands-come-from-stdin)."""
    wrappers: list[str] = []
    from_stdin = False
    while argv:
        name = _command_name(argv[0])
        if name not in _WRAPPER_VALUE_OPTS:
            break
        wrappers.append(name)
        value_opts = _WRAPPER_VALUE_OPTS[name]
        rest = argv[1:]
        j = 0
        while j < len(rest):
            arg = rest[j]
            if arg == "--":
                j += 1
                break
            if name == "env" and _ASSIGN.match(arg):
                j += 1
                continue
            if name == "env" and arg in ("-S", "--split-string") and j + 1 < len(rest):
                _parse_into(rest[j + 1], state, depth + 1)
                j += 2
                continue
            if not arg.startswith("-") or arg == "-":
                break
            j += 2 if arg in value_opts else 1
        rest = rest[j:]
        if name == "timeout" and rest:
            rest = rest[1:]
        if name == "xargs":
            from_stdin = True
            if not rest:
                rest = ["echo"]
        argv = rest
    return argv, wrappers, from_stdin


@dataclass
class _Effects:
    targets: list[Target] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    opaque: bool = False


def _operands(args: Iterable[str], value_opts: frozenset[str] = frozenset()) -> list[str]:
    out: list[str] = []
    args = list(args)
    j = 0
    only_operands = False
    while j < len(args):
        arg = args[j]
        if only_operands or not arg.startswith("-") or arg == "-":
            out.append(arg)
        elif arg == "--":
            only_operands = True
        elif arg in value_opts:
            j += 1
        j += 1
    return out


def _flags(args: Iterable[str]) -> set[str]:
    """Single-letter and long flags present (``-rf`` -> ``{"r", "f"}``), before ``--``."""
    flags: set[str] = set()
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("--"):
            flags.add(arg.split("=", 1)[0])
        elif arg.startswith("-") and len(arg) > 1:
            flags.update(arg[1:])
    return flags


def _option_value(args: list[str], short: str, long: str | None = None) -> list[str]:
    """Values of ``-X VALUE``, ``-XVALUE``, ``--long VALUE`` and ``--long=VALUE``."""
    values: list[str] = []
    for j, arg in enumerate(args):
        if arg == short or (long and arg == long):
            if j + 1 < len(args):
                values.append(args[j + 1])
        elif long and arg.startswith(long + "="):
            values.append(arg[len(long) + 1 :])
        elif short and arg.startswith(short) and len(arg) > len(short) and not arg.startswith("--"):
            values.append(arg[len(short) :])
    return values


def _t(
    path: str, access: Access, via: str, dynamic: bool = False, recursive: bool = False
) -> Target:
    return Target(path, access, via, recursive=recursive, dynamic=dynamic or is_dynamic(path))


def _hosts_in(args: Iterable[str]) -> list[str]:
    hosts: list[str] = []
    for arg in args:
        for match in _URL_HOST.finditer(arg):
            hosts.append(match.group(1).strip("[]"))
    return hosts


def _copy_like(
    name: str, args: list[str], state: _State, from_stdin: bool, value_opts: frozenset[str]
) -> _Effects:
    eff = _Effects()
    flags = _flags(args)
    recursive = bool(flags & {"r", "R", "a", "--recursive", "--archive"}) or name == "mv"
    ops = _operands(args, value_opts)
    target_dir = _option_value(args, "-t", "--target-directory")
    if name == "install" and "d" in flags:
        for op in ops:
            eff.targets.append(_t(op, "write", name, from_stdin))
        return eff
    if target_dir:
        dest, sources, into = target_dir[0], ops, True
    elif len(ops) >= 2:
        dest, sources = ops[-1], ops[:-1]
        into = (
            len(sources) > 1
            or dest.endswith("/")
            or (
                "T" not in flags
                and "--no-target-directory" not in flags
                and state.cwd is not None
                and not is_dynamic(dest)
                and os.path.isdir(os.path.join(state.cwd, dest))
            )
        )
    else:
        # one operand: with xargs the rest come from stdin; otherwise the command fails
        for op in ops:
            access: Access = "delete" if name == "mv" else "read"
            eff.targets.append(_t(op, access, name, from_stdin))
        if from_stdin:
            eff.targets.append(Target("", "write", f"xargs {name}", dynamic=True))
        return eff
    for src in sources:
        access = "delete" if name == "mv" else ("write" if name == "ln" else "read")
        eff.targets.append(_t(src, access, name, from_stdin, recursive and name == "mv"))
        if name == "mv":
            eff.targets.append(_t(src, "read", name, from_stdin))
        if into:
            contents = src.endswith(("/.", "/")) and name != "ln" and src.rstrip("/") != ""
            leaf = os.path.basename(os.path.normpath(src)) if not contents else ""
            written = dest if not leaf or leaf in (".", "..") else os.path.join(dest, leaf)
            eff.targets.append(_t(written, "write", name, from_stdin or is_dynamic(src), recursive))
    if not into:
        eff.targets.append(_t(dest, "write", name, from_stdin, recursive))
    if from_stdin:
        eff.targets.append(Target("", "write", f"xargs {name}", dynamic=True))
    if name in ("scp", "rsync"):
        eff.hosts.extend(m.group(1) for op in ops if (m := _REMOTE.match(op)))
    return eff


def _effects(name: str, args: list[str], state: _State, depth: int, from_stdin: bool) -> _Effects:
    eff = _Effects()
    flags = _flags(args)
    if name in ("rm", "unlink", "rmdir", "shred", "srm"):
        recursive = bool(flags & {"r", "R", "--recursive"})
        ops = _operands(args, frozenset({"-n", "-s", "--iterations", "--size"}))
        for op in ops:
            eff.targets.append(_t(op, "delete", name, from_stdin, recursive))
        if from_stdin:
            eff.targets.append(Target("", "delete", f"xargs {name}", dynamic=True))
    elif name in ("cp", "mv", "ln", "install"):
        value_opts = frozenset(
            {
                "-t",
                "-S",
                "--suffix",
                "-m",
                "-o",
                "-g",
                "--mode",
                "--owner",
                "--group",
                "--target-directory",
            }
        )
        return _copy_like(name, args, state, from_stdin, value_opts)
    elif name in ("scp", "rsync"):
        value_opts = frozenset(
            {
                "-P",
                "-p",
                "-i",
                "-o",
                "-F",
                "-e",
                "-c",
                "-l",
                "-S",
                "-J",
                "--rsh",
                "--exclude",
                "--include",
                "--port",
            }
        )
        remote = [op for op in _operands(args, value_opts) if _REMOTE.match(op)]
        if name == "rsync" and not remote:
            return _copy_like(name, args, state, from_stdin, value_opts)
        ops = _operands(args, value_opts)
        eff.hosts.extend(m.group(1) for op in ops if (m := _REMOTE.match(op)))
        if ops and not _REMOTE.match(ops[-1]):
            eff.targets.append(_t(ops[-1], "write", name, from_stdin, True))
        for op in ops[:-1]:
            if not _REMOTE.match(op):
                eff.targets.append(_t(op, "read", name, from_stdin))
    elif name == "tee":
        for op in _operands(args):
            if op not in _SAFE_SINKS:
                eff.targets.append(_t(op, "write", name, from_stdin))
    elif name in ("sed", "perl", "ruby") and (
        "i" in flags or "--in-place" in flags or any(a.startswith("--in-place") for a in args)
    ):
        scripts = _option_value(args, "-e", "--expression") + _option_value(args, "-f", "--file")
        value_opts = frozenset({"-e", "-f", "--expression", "--file", "-l", "-M", "-I"})
        ops = _operands(args, value_opts)
        if not scripts and ops:
            ops = ops[1:]
        via = f"{name} -i"
        for op in ops:
            eff.targets.append(_t(op, "write", via, from_stdin))
        if from_stdin or not ops:
            eff.targets.append(Target("", "write", via, dynamic=True))
    elif name == "truncate":
        for op in _operands(args, frozenset({"-s", "-r", "--size", "--reference"})):
            eff.targets.append(_t(op, "write", name, from_stdin))
    elif name == "dd":
        for arg in args:
            if arg.startswith("of="):
                eff.targets.append(_t(arg[3:], "write", "dd of="))
            elif arg.startswith("if="):
                eff.targets.append(_t(arg[3:], "read", "dd if="))
    elif name in ("chmod", "chown", "chgrp", "chattr", "setfacl"):
        recursive = bool(flags & {"R", "--recursive"})
        ops = _operands(args, frozenset({"--reference"}))
        if not any(a.startswith("--reference") for a in args) and ops:
            ops = ops[1:]
        for op in ops:
            eff.targets.append(_t(op, "write", name, from_stdin, recursive))
        if from_stdin:
            eff.targets.append(Target("", "write", f"xargs {name}", dynamic=True))
    elif name in ("touch", "mkfifo", "mknod", "split", "csplit"):
        for op in _operands(args, frozenset({"-d", "-r", "-t", "--reference", "--date"})):
            eff.targets.append(_t(op, "write", name, from_stdin))
    elif name == "sort" and ("o" in flags or "--output" in flags):
        for value in _option_value(args, "-o", "--output"):
            eff.targets.append(_t(value, "write", "sort -o"))
        eff.opaque = False
    elif name == "curl":
        eff.hosts.extend(_hosts_in(args))
        eff.hosts.extend(a for a in _operands(args, _CURL_VALUE_OPTS) if "://" not in a)
        for value in _option_value(args, "-o", "--output"):
            eff.targets.append(_t(value, "write", "curl -o"))
        if "O" in flags or "--remote-name" in flags:
            for url in _operands(args, _CURL_VALUE_OPTS):
                eff.targets.append(_t(_url_leaf(url), "write", "curl -O"))
    elif name == "wget":
        eff.hosts.extend(_hosts_in(args))
        outputs = _option_value(args, "-O", "--output-document")
        for value in outputs:
            if value != "-":
                eff.targets.append(_t(value, "write", "wget -O"))
        if not outputs:
            prefix = _option_value(args, "-P", "--directory-prefix")
            for url in _operands(args, frozenset({"-P", "-o", "-a", "-t", "-T", "-U", "-e"})):
                leaf = _url_leaf(url)
                path = os.path.join(prefix[0], leaf) if prefix else leaf
                eff.targets.append(_t(path, "write", "wget", recursive="r" in flags))
    elif name in ("nc", "ncat", "netcat", "telnet", "socat", "ssh", "sftp", "ftp"):
        value_opts = frozenset(
            {
                "-p",
                "-i",
                "-o",
                "-F",
                "-l",
                "-e",
                "-c",
                "-w",
                "-s",
                "-P",
                "-J",
                "-L",
                "-R",
                "-D",
                "-W",
                "-b",
                "-q",
            }
        )
        ops = _operands(args, value_opts)
        if ops:
            host = ops[0].split("@")[-1]
            eff.hosts.append(host)
            if name == "ssh" and len(ops) > 1:
                pass  # the remote command runs elsewhere
        eff.hosts.extend(_hosts_in(args))
    elif name in SHELLS or name == "eval":
        texts = [" ".join(args)] if name == "eval" else _option_value(args, "-c")
        if name != "eval":
            ops = _operands(args, frozenset({"-c", "-o", "-O"}))
            texts = [args[args.index("-c") + 1]] if "-c" in args[:-1] else texts[:0]
            if not texts:
                for op in ops[:1]:
                    eff.targets.append(_t(op, "read", name))
        for text in texts:
            _parse_into(text, state, depth + 1)
        if from_stdin:
            eff.targets.append(Target("", "write", f"xargs {name}", dynamic=True))
    elif name in ("source", "."):
        for op in _operands(args)[:1]:
            eff.targets.append(_t(op, "read", name))
    elif name == "find":
        roots: list[str] = []
        for arg in args:
            if arg.startswith(("-", "(", "!")) and arg != "-":
                break
            roots.append(arg)
        roots = roots or ["."]
        if "-exec" in args or "-execdir" in args or "-ok" in args or "-okdir" in args:
            for key in ("-exec", "-execdir", "-ok", "-okdir"):
                if key in args:
                    start = args.index(key) + 1
                    inner = []
                    for arg in args[start:]:
                        if arg in (";", "\\;", "+"):
                            break
                        inner.append(arg)
                    inner_name = _command_name(inner[0]) if inner else ""
                    if inner_name in READERS:
                        continue
                    if inner:
                        for root in roots:
                            eff.targets.append(
                                _t(root, "write", f"find -exec {inner_name}", recursive=True)
                            )
        if "-delete" in args:
            names = _option_value(args, "-name") + _option_value(args, "-iname")
            negated = any(a in ("!", "-not", "-o", "-or") for a in args)
            for root in roots:
                if names and not negated and not is_dynamic(root):
                    for pattern in names:
                        eff.targets.append(
                            _t(os.path.join(root, "**", pattern), "delete", "find -delete")
                        )
                else:
                    eff.targets.append(_t(root, "delete", "find -delete", recursive=True))
        for arg in ("-fprint", "-fprintf", "-fls", "-fprint0"):
            eff.targets.extend(_t(v, "write", f"find {arg}") for v in _option_value(args, arg))
        for root in roots:
            eff.targets.append(_t(root, "read", "find", recursive=True))
    elif name == "git":
        git_sub = next((a for a in args if not a.startswith("-")), "")
        if git_sub in ("clone", "fetch", "pull", "push", "ls-remote", "remote", "submodule"):
            eff.hosts.extend(_hosts_in(args))
            eff.hosts.extend(m.group(1) for a in args if (m := _REMOTE.match(a)))
            if not eff.hosts and git_sub != "remote":
                eff.hosts.append("(git remote)")
        eff.opaque = git_sub not in (
            "status",
            "log",
            "diff",
            "show",
            "blame",
            "add",
            "grep",
            "ls-files",
            "branch",
            "rev-parse",
            "describe",
            "shortlog",
            "config",
            "remote",
            "fetch",
            "ls-remote",
        )
    elif name in READERS:
        if name in (
            "cat",
            "head",
            "tail",
            "less",
            "more",
            "nl",
            "base64",
            "strings",
            "od",
            "hexdump",
            "md5sum",
            "sha1sum",
            "sha256sum",
            "wc",
            "diff",
            "cmp",
            "file",
            "stat",
        ):
            for op in _operands(args, frozenset({"-n", "-c", "-w"})):
                if op != "-":
                    eff.targets.append(_t(op, "read", name))
        elif name in ("grep", "egrep", "fgrep", "rg"):
            ops = _operands(
                args,
                frozenset(
                    {"-e", "-f", "-m", "-A", "-B", "-C", "--include", "--exclude", "-g", "-t"}
                ),
            )
            if not _option_value(args, "-e"):
                ops = ops[1:]
            for op in ops:
                eff.targets.append(_t(op, "read", name, recursive=bool(flags & {"r", "R"})))
    else:
        eff.opaque = True
        if name in INTERPRETERS:
            ops = _operands(args, frozenset({"-c", "-e", "-m", "-W", "-X", "-I", "-r"}))
            if ops and not (flags & {"c", "e", "m", "E", "p", "n"}):
                eff.targets.append(_t(ops[0], "read", name))
    return eff


_CURL_VALUE_OPTS = frozenset(
    {
        "-o",
        "-d",
        "-F",
        "-H",
        "-X",
        "-u",
        "-A",
        "-e",
        "-b",
        "-c",
        "-T",
        "-x",
        "-m",
        "-w",
        "-K",
        "-E",
        "-r",
        "-z",
        "-C",
        "-Y",
        "-y",
        "--data",
        "--data-binary",
        "--data-raw",
        "--data-urlencode",
        "--form",
        "--header",
        "--request",
        "--user",
        "--output",
        "--upload-file",
        "--proxy",
        "--max-time",
        "--cookie",
        "--cookie-jar",
        "--config",
        "--connect-timeout",
        "--retry",
        "--user-agent",
        "--referer",
        "--cert",
        "--key",
        "--json",
    }
)


def _url_leaf(url: str) -> str:
    path = re.sub(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/]*", "", url).split("?", 1)[0].split("#", 1)[0]
    leaf = path.rstrip("/").rsplit("/", 1)[-1] if path.strip("/") else ""
    return leaf or "index.html"
