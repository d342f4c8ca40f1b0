"""Models of commands that run code: shells, interpreters, ``awk`` and ``sed`` programs,
``source``/``eval`` and the builtins that change how later words are read, ``find -exec``,
editors.

The judge reads shell text it is given literally (``bash -c 'TEXT'`` is analysed as a
child shell). Everything else that runs code it cannot read is unreadable: a program fed
on standard input or taken from a stream (``bash``, ``python -``, ``bash <(...)``),
inline code of other languages (``python -c``, ``perl -e``, ``node -e`` ...), ``source``,
``eval``, ``awk`` programs that run commands or redirect, ``sed`` scripts with ``e``,
``w``, ``W`` (the files ``w`` names are also reported as written), ``find -exec`` and
``-delete``, editors given commands.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable

from tether.actors.gatekeeper.security.shell.model import INTERPRETERS, SHELLS, Ctx, Effects, getopt

#: Commands xargs and find -exec may run without the judge asking: they only read.
XARGS_SAFE: frozenset[str] = frozenset(
    {"cat", "head", "tail", "grep", "egrep", "fgrep", "rg", "wc", "ls", "file", "stat",
     "md5sum", "sha1sum", "sha256sum", "sha512sum", "echo", "printf", "basename", "dirname",
     "realpath", "readlink", "du", "nl", "diff", "cmp", "true", "test", "["}
)
_STREAMS = re.compile(r"^(-|/dev/stdin|/dev/fd/\d+|/proc/[^/]+/fd/\d+|/dev/tty)$")
# interpreter -> (inline-code letters, inline long options, letters taking a value,
#                 letters whose value is code, letters meaning "read stdin")
_INTERP: dict[str, tuple[str, tuple[str, ...], str, str, str]] = {
    "python": ("c", (), "WXQ", "", "i"),
    "pypy": ("c", (), "WXQ", "", "i"),
    "ipython": ("c", (), "", "", "i"),
    "perl": ("eE", (), "I", "Md", ""),
    "raku": ("e", (), "I", "M", ""),
    "ruby": ("e", (), "IrCEFW", "", ""),
    "node": ("ep", ("--eval", "--print"), "r", "", "i"),
    "ts-node": ("ep", ("--eval", "--print"), "r", "", "i"),
    "tsx": ("ep", ("--eval", "--print"), "r", "", "i"),
    "bun": ("ep", ("--eval", "--print"), "r", "", ""),
    "php": ("rBRE", (), "cftS", "dz", "a"),
    "lua": ("e", (), "l", "", "i"),
    "luajit": ("e", (), "ljO", "", "i"),
    "Rscript": ("e", ("--expr",), "", "", ""),
    "R": ("e", (), "f", "", ""),
    "julia": ("eE", ("--eval", "--print"), "LJpt", "", "i"),
    "osascript": ("e", (), "ls", "", ""),
    "expect": ("c", (), "f", "", "i"),
    "dc": ("e", ("--expression",), "f", "", ""),
    "groovy": ("e", (), "", "", ""),
    "scala": ("e", (), "", "", ""),
    "elixir": ("e", ("--eval",), "r", "", ""),
    "racket": ("e", ("--eval",), "lt", "", "i"),
    "guile": ("ce", (), "lL", "", ""),
}
_ALIASES = {"python2": "python", "python3": "python", "pypy3": "pypy", "nodejs": "node",
            "perl6": "raku", "wish": "tclsh"}
_INFO = frozenset({"--version", "-V", "--help", "-h", "-?"})
_AWKS = frozenset({"awk", "gawk", "mawk", "nawk", "busybox-awk"})
_AWK_SAFE_SINKS = ("/dev/stdout", "/dev/stderr", "-")


def shell(ctx: Ctx) -> Effects:
    """``bash``/``sh``/... : ``-c TEXT`` is analysed as a child shell; a script file is
    opaque; a program from standard input or a stream is unreadable."""
    name, args = ctx.name, ctx.args
    eff = Effects()
    if args in (["--version"], ["--help"]):
        return eff
    command = stdin = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("--", "-"):
            i += 1
            break
        if arg in ("--rcfile", "--init-file", "--init-command", "-C") or arg.startswith(
                ("--init-command=", "--rcfile=", "--init-file=")):
            eff.cannot_read(f"{name} {arg} runs another file or command first")
            i += 1 if "=" in arg else 2
            continue
        if arg.startswith("--"):
            if arg.startswith("--command"):
                command = True
            i += 1
            continue
        if arg[:1] in "-+" and len(arg) > 1:
            letters = arg[1:]
            command = command or "c" in letters
            stdin = stdin or "s" in letters or "i" in letters
            i += 1 + letters.count("o") + letters.count("O")
            continue
        break
    operands = args[i:]
    if command:
        index = len(args) - len(operands)
        word = ctx.words[index] if index < len(ctx.words) else None
        if not operands:
            return eff
        if not ctx.literal(word):
            eff.cannot_read(f"{name} -c runs text computed at run time")
        ctx.child(operands[0])
        return eff
    eff.opaque = True
    first = operands[0] if operands else ""
    word = ctx.words[len(args) - len(operands)] if operands and ctx.words else None
    if stdin or not operands or _STREAMS.match(first) or (word is not None and word.procsub):
        eff.cannot_read(f"{name} runs a program read from its standard input or a stream")
    elif first:
        _script(ctx, first, eff)
    return eff


def _script(ctx: Ctx, path: str, eff: Effects) -> None:
    """A program file: read; unreadable when this command line writes it first, or when
    it is not a plain file (a stream, a pipe, a device, a link to one)."""
    eff.read(path, ctx.name)
    if ctx.written(path):
        eff.cannot_read(f"{ctx.name} runs {path}, which this command writes first")
    elif is_stream(path, ctx.cwd):
        eff.cannot_read(f"{ctx.name} runs a program read from a stream ({path})")


def is_stream(path: str, cwd: str | None) -> bool:
    """``path`` names standard input, a descriptor, a pipe or a device, however spelled
    (``//dev/./stdin``), or is a link to one."""
    flat = re.sub(r"/+", "/", path)
    if _STREAMS.match(flat) or _STREAMS.match(os.path.normpath(flat)):
        return True
    if cwd is None or "$" in path:
        return False
    full = os.path.join(cwd, path)
    real = os.path.realpath(full)
    if real.startswith(("/dev/", "/proc/")):
        return True
    try:
        return not stat.S_ISREG(os.stat(full).st_mode)
    except OSError:
        return False


def interpreter(ctx: Ctx) -> Effects:
    """Python, Perl, Ruby, Node and the other interpreters of :data:`INTERPRETERS`."""
    name = _ALIASES.get(ctx.name, ctx.name)
    args = ctx.args
    eff = Effects(opaque=True)
    inline, inline_long, values, code_values, stdin_letters = _INTERP.get(
        name, ("ec", ("--eval", "--print", "--expression"), "", "", ""))
    found_inline = module = stdin = False
    if len(args) == 1 and (args[0] in _INFO or (
            args[0] == "-v" and name in ("perl", "ruby", "node", "php"))):
        return Effects()  # prints its version or help and runs nothing
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if arg == "-" or not arg.startswith("-"):
            break
        if arg.startswith("--"):
            key = arg.split("=", 1)[0]
            if key in inline_long:
                found_inline = True
                break
            if key in ("--require", "--import", "--loader", "--experimental-loader") and (
                    "=" not in arg):
                i += 1
            i += 1
            continue
        j = 1
        while j < len(arg):
            letter = arg[j]
            if letter in inline:
                found_inline = True
                break
            if letter == "m" and name in ("python", "pypy"):
                module = True
                break
            if letter in code_values:
                eff.cannot_read(f"{ctx.name} -{letter} runs code given in its options")
            if letter in stdin_letters:
                stdin = True
            if letter in values or letter in code_values:
                if j + 1 >= len(arg):
                    i += 1
                break
            j += 1
        if found_inline or module:
            break
        i += 1
    if name == "deno" and args[i:i + 1] in (["eval"], ["repl"]):
        found_inline = True
    if found_inline:
        eff.cannot_read(f"{ctx.name} runs inline code")
    elif not module:
        rest = args[i:]
        first = rest[0] if rest else ""
        word = ctx.words[i] if rest and i < len(ctx.words) else None
        if stdin or not rest or _STREAMS.match(first) or (word is not None and word.procsub):
            eff.cannot_read(f"{ctx.name} runs a program read from its standard input or a "
                            "stream")
        else:
            _script(ctx, first, eff)
    if name in ("perl", "ruby") and any(a.startswith("-") and "i" in a[1:2] + a.lstrip("-")[:3]
                                        for a in args if not a.startswith("--")):
        _in_place(ctx, eff)
    return eff


def _in_place(ctx: Ctx, eff: Effects) -> None:
    """``perl -pi -e CODE FILES``: the files are rewritten."""
    o = getopt(ctx.args, "e:E:I:l::i::0::M:m:x::C::F:", ())
    ops = o.operands if o.values("-e", "-E") else o.operands[1:]
    if not any(opt == "-i" for opt, _ in o.opts):
        return
    for op in ops:
        eff.write(op, f"{ctx.name} -i", dynamic=ctx.from_stdin)
    if ctx.from_stdin or not ops:
        eff.write("", f"{ctx.name} -i", dynamic=True)


def awk(ctx: Ctx) -> Effects:
    eff = Effects()
    o = getopt(ctx.args, "F:v:f:e:i:l:E:d::D::o::p::", (
        "field-separator=", "assign=", "file=", "source=", "include=", "load=", "exec=",
        "dump-variables", "debug", "pretty-print", "profile", "sandbox"))
    sandbox = o.has("-S", "--sandbox")
    if o.has("-l", "--load"):
        eff.cannot_read(f"{ctx.name} -l loads a library")
    for opt, default in (("-d", "awkvars.out"), ("-o", "awkprof.out"), ("-p", "awkprof.out"),
                         ("--dump-variables", "awkvars.out"), ("--pretty-print", "awkprof.out"),
                         ("--profile", "awkprof.out")):
        for flag, value in o.opts:
            if flag == opt:
                eff.write(value or default, f"{ctx.name} {opt}")
    files = o.values("-f", "--file", "-i", "--include", "-E", "--exec")
    if any(is_stream(f, ctx.cwd) for f in files):
        eff.cannot_read(f"{ctx.name} reads its program from a stream")
    elif files:
        eff.opaque = True
        for f in files:
            _script(ctx, f, eff)
    programs = o.values("-e", "--source")
    operands = o.operands
    if not files and not programs and operands:
        programs, operands = operands[:1], operands[1:]
        index = ctx.args.index(programs[0]) if programs[0] in ctx.args else -1
        if index >= 0 and not ctx.literal(ctx.words[index] if index < len(ctx.words) else None):
            eff.cannot_read(f"{ctx.name} runs a program computed at run time")
    for program in programs if not sandbox else []:
        reason, written = _awk_scan(program)
        if reason:
            eff.cannot_read(f"{ctx.name} program {reason}")
            eff.opaque = True
        for path in written:
            eff.write(path, f"{ctx.name} print >")
    for op in operands:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", op) and op != "-":
            eff.read(op, ctx.name)
    return eff


def _awk_scan(program: str) -> tuple[str, list[str]]:
    """Why an awk program is unreadable ('' when it only reads and prints), and the files
    its print redirections name literally."""
    written = re.findall(r">>?\s*\"([^\"]*)\"", program)
    stripped = re.sub(r'"(\\.|[^"\\])*"', '""', program)
    stripped = re.sub(r"(^|[(,{};~!&|\n:?=])\s*/(\\.|\[[^\]]*\]|[^/\\\n])*/", r"\1 //",
                      stripped)
    if re.search(r"\bsystem\s*\(|@load|@include|\bgetline\b[^;{}\n|]*<", stripped):
        return "runs a command or reads a file it names", written
    if re.search(r"(?<!\|)\|(?!\|)", stripped):
        return "pipes to or from a command", written
    for match in re.finditer(r"\bprintf?\b", stripped):
        depth = 0
        for ch in stripped[match.end():]:
            if ch in "({[":
                depth += 1
            elif ch in ")}]":
                if depth == 0:
                    break
                depth -= 1
            elif ch in ";\n" and depth == 0:
                break
            elif ch == ">" and depth == 0:
                return "redirects its output to a file", written
    return "", []


def sed(ctx: Ctx) -> Effects:
    eff = Effects()
    o = getopt(ctx.args, "e:f:l:i::", (
        "expression=", "file=", "line-length=", "in-place", "quiet", "silent",
        "regexp-extended", "separate", "sandbox", "debug", "posix", "null-data",
        "zero-terminated", "follow-symlinks", "unbuffered"))
    scripts = o.values("-e", "--expression")
    files = o.values("-f", "--file")
    operands = o.operands
    if not scripts and not files and operands:
        index = ctx.args.index(operands[0]) if operands[0] in ctx.args else -1
        if index >= 0 and not ctx.literal(ctx.words[index] if index < len(ctx.words) else None):
            eff.cannot_read("sed runs a script computed at run time")
        scripts, operands = operands[:1], operands[1:]
    if any(is_stream(f, ctx.cwd) for f in files):
        eff.cannot_read("sed reads its script from a stream")
    elif files:
        eff.opaque = True
    if not o.has("--sandbox"):
        for script in scripts:
            runs, written = _sed_scan(script)
            if runs:
                eff.cannot_read("sed script runs a command or writes a file")
                eff.opaque = True
            for path in written:
                eff.write(path, "sed w")
    in_place = o.has("-i", "--in-place")
    for op in operands:
        if in_place:
            eff.write(op, "sed -i", dynamic=ctx.from_stdin)
        elif op != "-":
            eff.read(op, "sed")
    if in_place and (ctx.from_stdin or not operands):
        eff.write("", "sed -i", dynamic=True)
    return eff


def _sed_scan(script: str) -> tuple[bool, list[str]]:
    """Whether a sed script runs commands or writes files (or cannot be read), and the files
    its ``w``/``W`` commands and ``s///w`` flags name."""
    written: list[str] = []
    i, n = 0, len(script)

    def skip_delimited(pos: int, delim: str) -> int:
        while pos < n and script[pos] != delim:
            pos += 2 if script[pos] == "\\" else 1
        if pos >= n:
            raise ValueError
        return pos + 1

    def to_line_end(pos: int) -> tuple[str, int]:
        end = script.find("\n", pos)
        end = n if end < 0 else end
        return script[pos:end].strip(), end

    try:
        while i < n:
            while i < n and script[i] in " \t\n;":
                i += 1
            if i >= n:
                break
            for _ in range(2):  # up to two addresses
                if script[i].isdigit():
                    while i < n and (script[i].isdigit() or script[i] == "~"):
                        i += 1
                elif script[i] == "$":
                    i += 1
                elif script[i] == "/":
                    i = skip_delimited(i + 1, "/")
                elif script[i] == "\\":
                    i = skip_delimited(i + 2, script[i + 1])
                while i < n and script[i] in "IM":
                    i += 1
                if i < n and script[i] == ",":
                    i += 1
                    continue
                break
            while i < n and script[i] in " \t!":
                i += 1
            if i >= n:
                return True, written
            cmd = script[i]
            i += 1
            if cmd in "{}=dDgGhHlnNpPxzF":
                continue
            if cmd in "qQlL":
                while i < n and script[i].isdigit():
                    i += 1
            elif cmd in "#:btTaicv":
                _, i = to_line_end(i) if cmd in "#aic" else (None, _label_end(script, i))
            elif cmd in "rRwW":
                name, i = to_line_end(i)
                if cmd in "wW":
                    written.append(name)
            elif cmd in "sy":
                delim = script[i]
                i = skip_delimited(skip_delimited(i + 1, delim), delim)
                if cmd == "s":
                    while i < n and script[i] not in ";}\n \t":
                        if script[i] == "e":
                            return True, written
                        if script[i] == "w":
                            name, i = to_line_end(i + 1)
                            written.append(name)
                            break
                        i += 1
            else:
                return True, written
    except (ValueError, IndexError):
        return True, written
    unsafe = [w for w in written if w not in ("/dev/stdout", "/dev/stderr")]
    return bool(unsafe), unsafe


def _label_end(script: str, pos: int) -> int:
    ends = [e for e in (script.find(";", pos), script.find("\n", pos)) if e >= 0]
    return min(ends) if ends else len(script)


def builtin(ctx: Ctx) -> Effects:
    """``source``/``.``, ``eval`` and the builtins that change how later words are read."""
    name, args = ctx.name, ctx.args
    eff = Effects()
    if name in ("source", "."):
        eff.opaque = True
        eff.cannot_read(f"{name} runs the commands of a file in this shell")
        ops = getopt(args, "").operands
        word = ctx.words[len(args) - len(ops)] if ops and ctx.words else None
        if ops and not (word is not None and word.procsub):
            eff.read(ops[0], name)
    elif name == "eval":
        eff.cannot_read("eval runs text as commands")
        if args:
            ctx.same(" ".join(args))
    elif name == "trap":
        ops = [a for a in args if not a.startswith("-")]
        if len(ops) >= 2 and ops[0] != "-":
            eff.cannot_read("trap runs a command later, when a signal comes")
            ctx.same(ops[0])
    elif name == "alias" and any("=" in a for a in args):
        eff.cannot_read("alias gives a command name another meaning")
    elif (name in ("enable", "fc", "let") and args) or (name == "hash" and "-p" in args):
        eff.cannot_read(f"{name} changes what names run or evaluates code")
    elif name == "shopt" and any(a in ("-s", "-u", "-o") for a in args):
        eff.cannot_read("shopt changes how later words are expanded or run")
    elif name in ("complete", "compgen", "bind") and any(a in ("-C", "-x") for a in args):
        eff.cannot_read(f"{name} runs a command")
    elif name in ("mapfile", "readarray") and any(a.startswith("-C") for a in args):
        eff.cannot_read(f"{name} -C runs a callback")
    elif name in ("declare", "typeset", "local", "export", "readonly") and any(
            a.startswith("-") and ("i" in a or "n" in a) and not a.startswith("--")
            for a in args if not re.match(r"^[A-Za-z_]", a)):
        eff.cannot_read(f"{name} -i/-n makes later assignments evaluate or redirect")
    return eff


def find(ctx: Ctx) -> Effects:
    args = ctx.args
    eff = Effects()
    i = 0
    while (i < len(args) and args[i] in ("-H", "-L", "-P", "-D", "-O")) or (
            i < len(args) and re.match(r"^-O\d$", args[i])):
        i += 2 if args[i] == "-D" else 1
    roots: list[str] = []
    for arg in args[i:]:
        if arg.startswith(("-", "(", "!", ")", ",")) and arg != "-":
            break
        roots.append(arg)
    roots = roots or ["."]
    follows = "-L" in args[:i] or "-follow" in args
    for key in ("-exec", "-execdir", "-ok", "-okdir"):
        for start in [k + 1 for k, a in enumerate(args) if a == key]:
            inner: list[str] = []
            for arg in args[start:]:
                if arg in (";", "+"):
                    break
                inner.append(arg)
            inner_name = inner[0].rsplit("/", 1)[-1] if inner else ""
            if inner_name in SHELLS and "-c" in inner[1:-1]:
                ctx.child(inner[inner.index("-c") + 1])
            if inner_name in XARGS_SAFE and not follows:
                continue
            eff.cannot_read(f"find {key} runs {inner_name or 'a command'} on what it finds")
            for root in roots:
                eff.write(root, f"find {key} {inner_name}", recursive=True)
    if "-delete" in args:
        eff.cannot_read("find -delete deletes what it matches")
        names = _values(args, "-name") + _values(args, "-iname")
        negated = any(a in ("!", "-not", "-o", "-or") for a in args)
        for root in roots:
            if names and not negated and "$" not in root:
                for pattern in names:
                    eff.delete(f"{root.rstrip('/')}/**/{pattern}", "find -delete")
            else:
                eff.delete(root, "find -delete", recursive=True)
    for key in ("-fprint", "-fprintf", "-fls", "-fprint0"):
        for value in _values(args, key):
            eff.write(value, f"find {key}")
    for value in _values(args, "-files0-from"):
        eff.read(value, "find")
    for root in roots:
        eff.read(root, "find", recursive=True)
    return eff


def _values(args: list[str], key: str) -> list[str]:
    return [args[k + 1] for k, a in enumerate(args[:-1]) if a == key]


def editor(ctx: Ctx) -> Effects:
    name, args = ctx.name, ctx.args
    eff = Effects(opaque=True)
    if name in ("ed", "red", "ex"):
        eff.cannot_read(f"{name} runs editing commands read from its standard input")
    elif name.startswith("emacs"):
        if any(a.split("=", 1)[0] in ("--eval", "-eval", "-l", "--load", "-f", "--funcall",
                                      "--batch", "-batch", "--script", "-x", "-e") for a in args):
            eff.cannot_read(f"{name} runs Lisp given in its options")
    elif any(a.startswith("+") or a in ("-c", "--cmd", "-S", "-s", "-u", "-U", "--script")
             or (a.startswith("-") and not a.startswith("--") and set(a[1:]) & set("esE"))
             for a in args):
        eff.cannot_read(f"{name} runs editor commands given in its options")
    return eff


MODELS: dict[str, Callable[[Ctx], Effects]] = {
    **dict.fromkeys(SHELLS, shell),
    **dict.fromkeys(INTERPRETERS - SHELLS, interpreter),
    **dict.fromkeys(_AWKS, awk),
    "sed": sed,
    **dict.fromkeys(("source", ".", "eval", "trap", "alias", "enable", "fc", "let", "hash", "shopt",
                     "complete", "compgen", "bind", "mapfile", "readarray", "declare",
                     "typeset", "local", "export", "readonly"), builtin),
    "find": find,
    **dict.fromkeys(("vim", "vi", "nvim", "view", "vimdiff", "gvim", "rvim", "ex", "ed", "red",
                     "emacs", "emacs-nox", "emacsclient"), editor),
}
