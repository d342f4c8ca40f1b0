"""Bash command lines into simple commands, with the folder and variables each one sees.

:func:`parse_shell` lexes a command line (:mod:`~actors.gatekeeper.security.shell.lexer`), splits it
into pipelines and lists, and analyses every simple command: redirections, assignments,
keywords, wrappers (:mod:`~actors.gatekeeper.security.shell.wrappers`), then the command's own model
(:mod:`~actors.gatekeeper.security.shell.code`, :mod:`~actors.gatekeeper.security.shell.git`,
:mod:`~actors.gatekeeper.security.shell.effects`, :mod:`~actors.gatekeeper.security.shell.tools`).

The folder is followed soundly: a ``cd`` counts for what follows it with ``&&`` (that runs
only if it succeeded); after ``;``, ``||``, ``&`` or a newline both the old and the new
folder are possible (``cd`` may have failed), and a subshell's ``cd`` ends with it.
Variables are known only from unconditional assignments of literal text without spaces.

What the judge cannot read completely is recorded as a reason on the command
(:attr:`ShellCommand.unreadable`) or the parse: a computed command name or argument, a
program fed on standard input, inline code, ``eval``/``source``, a function definition,
arithmetic on variables, a redirection to a computed path, and everything the command
models report.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from tether.actors.gatekeeper.security.shell import code, effects, git, tools
from tether.actors.gatekeeper.security.shell.lexer import LexError, Word, lex, substitutions
from tether.actors.gatekeeper.security.shell.model import (
    MAX_DEPTH,
    NETWORK,
    SAFE_SINKS,
    Ctx,
    Effects,
    ShellCommand,
    ShellParse,
    Target,
    command_name,
    is_dynamic,
)
from tether.actors.gatekeeper.security.shell.scope import (
    Out,
    State,
    absolute,
    assign,
    bind_loop,
    change_dir,
    dedupe,
    expand,
    known,
    name_literal,
)
from tether.actors.gatekeeper.security.shell.structure import structure
from tether.actors.gatekeeper.security.shell.wrappers import (
    WRAPPERS,
    command_variable,
    strip,
    variable_risk,
)

_LIST_OPS = frozenset({";", "&", "&&", "||", "\n", ";;", ";&", ";;&"})
_WRITE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})
_KEYWORDS = frozenset({"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!",
                       "{", "}", "time", "esac", "coproc"})
_VAR_SETTERS = frozenset({"read", "printf", "mapfile", "readarray", "getopts", "wait", "unset",
                          "declare", "typeset", "local", "export", "readonly"})
_NAME_TAKERS = _VAR_SETTERS - {"wait"}


@dataclass
class _Chain:
    first: bool = True
    has_or: bool = False
    pending: list[str | None] = field(default_factory=list)


def parse_shell(command: str, cwd: str, home: str | None = None) -> ShellParse:
    """Analyse ``command`` as bash would run it from folder ``cwd``.

    ``home`` is the folder ``~`` and ``$HOME`` stand for (default: this process's home).
    Never raises: a command that cannot be lexed comes back with a problem and no
    commands, which callers must treat as "could do anything".
    """
    home_dir = home if home is not None else os.path.expanduser("~")
    state = State([cwd], home_dir, {"HOME": home_dir}, Out())
    _parse_into(command, state, 0)
    out = state.out
    return ShellParse(tuple(out.commands), tuple(out.problems),
                      tuple(dict.fromkeys(out.unreadable)))


def _parse_into(text: str, state: State, depth: int) -> None:
    if depth > MAX_DEPTH:
        state.out.problems.append("the command nests shells too deeply to analyse")
        return
    if "\x00" in text:
        state.out.problems.append("the command holds a NUL character")
        return
    try:
        tokens = lex(text)
    except (LexError, RecursionError) as err:
        state.out.problems.append(f"the command cannot be parsed ({err})")
        return
    _Lists(tokens, state, depth).run()


class _Lists:
    """Walks the tokens of one command line: pipelines, lists, subshells."""

    def __init__(self, tokens: list[Word], state: State, depth: int) -> None:
        self.tokens = tokens
        self.state = state
        self.depth = depth
        self.fed, self.compound, self.paren, self.moving, self.pattern = structure(tokens)
        self.after_group = False
        self.chain = _Chain()
        self.saved: list[tuple[list[str | None], dict[str, str], _Chain]] = []
        self.pipeline: list[tuple[int, list[Word]]] = []
        self.current: list[Word] = []
        self.start = 0

    def run(self) -> None:
        tokens, state = self.tokens, self.state
        skip = -1
        for idx, tok in enumerate(tokens):
            if idx == skip:
                continue
            text = tok.text if tok.op else None
            after_group, self.after_group = self.after_group, False
            if text in ("|", "|&") and self.pattern[idx]:
                pass  # "a|b)" separates case patterns
            elif text in ("|", "|&"):
                if after_group and not self.current:  # "( ... ) | next": one pipeline
                    self.pipeline.append((idx, []))
                self._cut()
            elif text in ("(", ")") and not self.paren[idx]:  # a case pattern
                for word in self.current:
                    state.out.unreadable.extend(_inner(word, state, self.depth))
                self.current = []
            elif text == "(" and self._function(idx):
                skip = idx + 1
            elif text == "(":
                if self.pipeline and not self.current:  # "prev | ( ... )": one pipeline
                    self.pipeline.append((idx, []))
                self._flush("(")
                self.saved.append((list(state.cwds), dict(state.variables), self.chain))
                self.chain = _Chain()
            elif text == ")":
                self._flush(")")
                if self.saved:
                    cwds, variables, self.chain = self.saved.pop()
                    state.cwds, state.variables = cwds, variables
                self.after_group = True
            elif text in _LIST_OPS:
                self._flush(text)
            else:
                if not self.current:
                    self.start = idx
                self.current.append(tok)
        self._flush(";")

    def _function(self, idx: int) -> bool:
        words = [w.text for w in self.current]
        nxt = self.tokens[idx + 1] if idx + 1 < len(self.tokens) else None
        if not (nxt is not None and nxt.op and nxt.text == ")"):
            return False
        if len(words) == 2 and words[0] == "function":
            words = words[1:]
        if len(words) != 1:
            return False
        self.state.out.unreadable.append(f"defines the shell function {words[0]}")
        self.state.functions.add(words[0])
        self.current = []
        return True

    def _cut(self) -> None:
        if self.current:
            self.pipeline.append((self.start, self.current))
        self.current = []

    def _flush(self, term: str) -> None:
        self._cut()
        items, self.pipeline = self.pipeline, []
        state, chain = self.state, self.chain
        if items:
            state.out.pipeline += 1
            pid = state.out.pipeline
            head = items[0][1][0] if items[0][1] else None
            negated = head is not None and not head.quoted and head.text == "!"
            new_cwds: list[str | None] | None = None
            for position, (start, words) in enumerate(items):
                if not words:
                    continue  # a subshell's place in the pipeline
                if self.moving[start] and None not in state.cwds:
                    state.cwds.append(None)  # a loop that changes folder: unknown from here
                conditional = (self.compound[start] or not chain.first or len(items) > 1
                               or term == "&")
                fed = position > 0 or self.fed[start] or state.fed_all
                moved = _simple(words, state, self.depth, (pid, position, len(items)), fed,
                                conditional)
                if len(items) == 1 and term != "&":
                    new_cwds = moved
            if new_cwds is not None:
                if term == "&&" and not chain.has_or and not negated:
                    chain.pending.extend(state.cwds)
                    state.cwds = dedupe(new_cwds)
                else:
                    state.cwds = dedupe(new_cwds + state.cwds)
        if term == "&&":
            chain.first = False
            return
        state.cwds = dedupe(state.cwds + chain.pending)
        chain.pending = []
        chain.first = term != "||"
        chain.has_or = term == "||"


def _inner(word: Word, state: State, depth: int) -> list[str]:
    """Analyse what runs inside ``word`` (substitutions; quoted text that looks like one)
    and return why it cannot be read completely."""
    reasons: list[str] = []
    for j, inner in enumerate(word.subs):
        _parse_into(inner, state.child(fed=j == 0 and word.procsub == ">"), depth + 1)
    for text in word.literal_code:
        for inner in substitutions(text):
            _parse_into(inner, state.child(), depth + 1)
    for arith in word.arith:
        if re.search(r"[A-Za-z_$]", arith):
            reasons.append("arithmetic on variables can run code hidden in their values")
    for param in word.params:
        if "@P" in param:
            reasons.append("a ${...@P} expansion runs what the variable holds")
        subscript = re.search(r"\[([^\]]*)\]", param) if param.startswith("{") else None
        if subscript and not re.fullmatch(r"[0-9@*]*", subscript.group(1)):
            reasons.append("an array subscript is evaluated as arithmetic, which can run code")
        if param.strip("{}") == "CDPATH":
            reasons.append("CDPATH changes where cd goes")
    return reasons


def _simple(raw: list[Word], state: State, depth: int, where: tuple[int, int, int],
            fed: bool, conditional: bool) -> list[str | None] | None:
    """Record one simple command; returns the folders a ``cd`` in it leads to (None when it
    is not a ``cd``)."""
    reasons: list[str] = []
    items, redirects, stdin, stdin_file = _redirections(raw, state, depth, reasons)
    for word in items:
        reasons.extend(_inner(word, state, depth))
    for _, target, _ in redirects:
        reasons.extend(_inner(target, state, depth))
    words, before_loop = _command_words(items, state, depth, conditional, reasons)
    expanded = [(expand(w.text, state), w) for w in words]
    expanded = [(v, w) for v, w in expanded if v or w.quoted or not w.params]
    stripped = strip([v for v, _ in expanded], [w for _, w in expanded])
    argv, argv_words = stripped.argv, stripped.words
    eff = Effects(targets=list(stripped.effects.targets), classes=set(stripped.effects.classes))
    reasons.extend(stripped.effects.unreadable)
    for key, value in stripped.assignments:
        reasons.extend(_variable_reasons(key, value, True, state, depth))
    for text in stripped.texts:
        _parse_into(text, state.child(), depth + 1)
    bases = list(state.cwds)
    if stripped.changes_cwd:  # env -C DIR, sudo -D DIR: the command runs in DIR
        to = stripped.cwd
        bases = [None if b is None or not isinstance(to, str) or is_dynamic(to)
                 else os.path.normpath(os.path.join(b, expand(to, state))) for b in bases]
    cwd = None if None in bases else bases[0]
    name = command_name(argv[0]) if argv else ""
    moved: list[str | None] | None = None
    fed_any = fed or stdin
    if argv:
        def written(path: str, base: str | None = cwd) -> bool:
            return base is not None and absolute(base, expand(path, state)) in state.out.written

        ctx = Ctx(name, argv[1:], argv_words[1:], cwd, depth, stripped.from_stdin, fed_any,
                  child=lambda text: _parse_into(text, state.child(), depth + 1),
                  same=lambda text: _parse_into(text, state, depth + 1),
                  literal=lambda w: known(w, state), written=written,
                  alt_cwds=tuple(b for b in bases[1:] if b is not None))
        model = _model(ctx)
        eff.targets.extend(model.targets)
        eff.hosts.extend(model.hosts)
        eff.classes |= model.classes
        eff.opaque = model.opaque
        reasons.extend(model.unreadable)
        reasons.extend(_command_checks(ctx, argv[0], argv_words, model, state))
        if name in _VAR_SETTERS:
            reasons.extend(_set_by_builtin(name, argv[1:], argv_words[1:], state, conditional,
                                           depth))
        if name in ("cd", "pushd", "popd"):
            moved, why = change_dir(name, argv[1:], argv_words[1:], state)
            reasons.extend(why)
    elif "exec" in stripped.wrappers and redirects:
        reasons.append("exec changes the file descriptors of this shell")
    if stripped.from_stdin:  # xargs: every file it changes comes from its input
        eff.targets = [t if t.access == "read" else Target(t.path, t.access, t.via, t.recursive,
                                                            True) for t in eff.targets]
    # redirections are opened by this shell, in its folders, before a loop binds its variable
    shell = state
    if before_loop is not None:
        shell = state.child()
        if before_loop[1] is None:
            shell.variables.pop(before_loop[0], None)
        else:
            shell.variables[before_loop[0]] = before_loop[1]
    eff.targets[:0] = _redirect_targets(redirects, shell, reasons,
                                        state.cwds if stripped.changes_cwd else None)
    for t in eff.targets:
        if t.access != "read" and not t.dynamic:
            state.out.written.update(absolute(b, t.path) for b in bases if b is not None)
    classes = {"execute"} if argv else set()
    classes |= eff.classes | {t.access for t in eff.targets}
    if name in NETWORK or eff.hosts:
        classes.add("network")
    pid, position, size = where
    others = tuple(b for b in bases[1:] if b is not None) if cwd is not None else ()
    state.out.commands.append(ShellCommand(
        argv=tuple(argv), name=name, words=tuple(w.text for w in raw), cwd=cwd,
        pipeline=pid, position=position, pipeline_size=size, depth=depth,
        classes=tuple(sorted(classes)), targets=tuple(eff.targets),
        hosts=tuple(dict.fromkeys(eff.hosts)),
        redirects=tuple((op, expand(t.text, state)) for op, t, _ in redirects),
        opaque=eff.opaque, wrappers=tuple(stripped.wrappers), stdin_is_file=stdin_file,
        alt_cwds=others, fed=fed_any, unreadable=tuple(dict.fromkeys(reasons)),
    ))
    return moved


def _redirections(raw: list[Word], state: State, depth: int, reasons: list[str]
                  ) -> tuple[list[Word], list[tuple[str, Word, str]], bool, bool]:
    """Split a simple command into its words and its redirections (operator, target, file
    descriptor); says whether its standard input is fed, and whether from a file."""
    items: list[Word] = []
    redirects: list[tuple[str, Word, str]] = []
    stdin = stdin_file = False
    fd = ""
    i = 0
    while i < len(raw):
        tok = raw[i]
        if tok.fd:
            fd = tok.text
            i += 1
            continue
        if not tok.op:
            items.append(tok)
            i += 1
            continue
        target = raw[i + 1] if i + 1 < len(raw) and not raw[i + 1].op else None
        i += 2 if target is not None else 1
        if target is None:
            state.out.problems.append(f"the redirection {tok.text} has no target")
        elif tok.text in ("<<", "<<-", "<<<"):
            stdin = stdin or fd in ("", "0")
            reasons.extend(_inner(target, state, depth))
        elif not (tok.text in (">&", "<&") and re.fullmatch(r"\d*-?", target.text)):
            redirects.append((tok.text, target, fd))
            if tok.text in ("<", "<&", "<>") and fd in ("", "0"):
                stdin = True
                stdin_file = tok.text == "<" and not target.procsub
        fd = ""
    return items, redirects, stdin, stdin_file


def _command_words(items: list[Word], state: State, depth: int, conditional: bool,
                   reasons: list[str]) -> tuple[list[Word], tuple[str, str | None] | None]:
    """The command's words after its keywords and assignments (applied when they stand
    alone); loops, ``case`` and function definitions leave none. Also, at a loop's
    ``done``, the variable the loop bound and its value before the loop."""
    words = list(items)
    closed: tuple[str, str | None] | None = None
    while words and not words[0].quoted and not words[0].assign and (
            words[0].text in _KEYWORDS):
        dropped = words.pop(0).text
        if dropped in ("while", "until"):
            state.loops.append(("", None))
        elif dropped == "done" and state.loops:
            closed = state.loops.pop()
        if dropped == "coproc":
            reasons.append("coproc runs a command in the background, wired to this shell")
        if dropped == "time" and words and words[0].text == "-p":
            words.pop(0)
    k = 0
    while k < len(words) and words[k].assign:
        k += 1
    assigns, words = words[:k], words[k:]
    head = words[0].text if words and not words[0].quoted else ""
    if head in ("for", "select"):
        loop_var = words[1].text if len(words) > 1 else ""
        state.loops.append((loop_var, state.variables.get(loop_var)))
        bind_loop(words[1:], state)
        words = []
    elif head == "case" or (words and words[0].arith and words[0].text.startswith("((")):
        words = []
    elif head == "function":
        name = words[1].text if len(words) > 1 else ""
        reasons.append(f"defines the shell function {name}")
        state.functions.add(name)
        words = []
    for word in assigns:
        reasons.extend(_assignment(word, state, apply=not words, conditional=conditional,
                                   depth=depth))
    return words, closed if closed and closed[0] else None


def _command_checks(ctx: Ctx, word: str, words: list[Word | None], model: Effects,
                    state: State) -> list[str]:
    """Why this command, beyond its own model, cannot be read completely."""
    name = ctx.name
    reasons: list[str] = []
    computed = [w.text for w in words[1:] if w is not None and not known(w, state)]
    if not name_literal(words[0], state, word):
        reasons.append(f"the command name {word!r} is computed at run time")
    if name in state.functions:
        reasons.append(f"runs the shell function {name} defined in this command")
    if "/" in word and ctx.written(word):
        reasons.append(f"runs {word}, which this command writes first")
    if ctx.from_stdin and name not in code.XARGS_SAFE:
        reasons.append(f"xargs runs {name} with arguments read from its input")
    if computed and name not in tools.PURE:
        reasons.append(f"{name} gets an argument computed at run time ({computed[0]})")
    if not model.known and ctx.fed:
        reasons.append(f"{name} is a command Tether does not model, and data is fed to its "
                       "standard input")
    arithmetic = {"-eq", "-ne", "-lt", "-le", "-gt", "-ge"}
    if computed and ((name == "[[" and arithmetic & set(ctx.args))
                     or (name in ("[[", "[", "test") and "-v" in ctx.args)):
        reasons.append(f"{name} evaluates computed values as arithmetic, which can run code")
    if name in _NAME_TAKERS:
        for index, (arg, w) in enumerate(zip(ctx.args, words[1:], strict=False)):
            if w is None or known(w, state) or re.match(r"^[A-Za-z_][A-Za-z0-9_]*\+?=", arg):
                continue
            if name != "printf" or (index > 0 and ctx.args[index - 1] == "-v"):
                reasons.append(f"{name} takes a variable name computed at run time, whose "
                               "array subscript can run code")
                break
    return reasons


def _model(ctx: Ctx) -> Effects:
    if ctx.name == "git":
        return git.git(ctx)
    for table in (code.MODELS, effects.MODELS, tools.MODELS):
        model = table.get(ctx.name)
        if model is not None:
            return model(ctx)
    if ctx.name in tools.PURE or ctx.name in WRAPPERS:
        return Effects()
    if ctx.name in ("pushd", "popd"):
        eff = Effects()
        eff.cannot_read(f"{ctx.name} changes folder by the directory stack")
        return eff
    return Effects(opaque=True, known=False)


def _redirect_targets(redirects: list[tuple[str, Word, str]], state: State,
                      reasons: list[str], anchor: list[str | None] | None = None
                      ) -> list[Target]:
    """The files the redirections open; ``anchor``: the shell's folders, when the command
    itself runs elsewhere (``env -C``), so relative targets are made absolute from them."""
    targets: list[Target] = []
    for op, word, _ in redirects:
        if word.procsub:
            continue  # its command was analysed (fed, for >(...))
        path = expand(word.text, state)
        if not known(word, state) or word.glob or word.brace or word.ansi:
            reasons.append(f"the redirection {op} {word.text} goes to a path computed at run "
                           "time")
        if anchor is not None and not os.path.isabs(path) and not path.startswith("~"):
            if None in anchor or is_dynamic(path):
                targets.append(Target(path, "write" if op in _WRITE_REDIRECTS else "read", op,
                                      dynamic=True))
                continue
            for base in anchor[1:]:
                assert base is not None
                targets.extend(_redirect_targets([(op, Word(os.path.join(base, path)), "")],
                                                 state, []))
            path = os.path.join(str(anchor[0]), path)
        if op in _WRITE_REDIRECTS:
            # bash removes quotes once more from the word after >& (">& 'a\"b'" writes ab)
            variants = [path, path[:-1] if path.endswith("\\") else path]
            if op == ">&":
                variants.append(re.sub(r"[\"'\\\\]", "", path))
            for name in dict.fromkeys(variants):
                if name not in SAFE_SINKS and not name.startswith("/dev/fd/"):
                    targets.append(Target(name, "write", op,
                                          dynamic=not name or is_dynamic(name)))
        elif op == "<" and path:
            targets.append(Target(path, "read", op, dynamic=is_dynamic(path)))
    return targets


def _assignment(word: Word, state: State, *, apply: bool, conditional: bool,
                depth: int) -> list[str]:
    name, _, value = word.text.partition("=")
    append = name.endswith("+")
    name = name.rstrip("+")
    reasons = _variable_reasons(name, value, known(word, state), state, depth)
    if "[" in name and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\[[0-9]*\]", name):
        reasons.append("an array subscript is evaluated as arithmetic, which can run code")
    if apply:
        assign(state, name, value, word, append=append, conditional=conditional)
    return reasons


def _variable_reasons(name: str, value: str, literal: bool, state: State,
                      depth: int) -> list[str]:
    if name == "CDPATH":
        state.cdpath = True
    risk = variable_risk(name)
    if risk:
        return [risk]
    if command_variable(name):
        if not literal:
            return [f"{name} names a command computed at run time"]
        _parse_into(expand(value, state), state.child(fed=True), depth + 1)
    return []


def _set_by_builtin(name: str, args: list[str], words: list[Word | None], state: State,
                    conditional: bool, depth: int) -> list[str]:
    """Variables set by ``read``, ``printf -v``, ``declare X=Y`` ... become unknown (or, for
    literal declarations, known like assignments); returns why a declaration is
    unreadable (``export PATH=...``)."""
    reasons: list[str] = []
    if name in ("declare", "typeset", "local", "export", "readonly"):
        for arg, word in zip(args, words, strict=False):
            if re.match(r"^[A-Za-z_][A-Za-z0-9_]*\+?=", arg):
                key, _, value = arg.partition("=")
                reasons.extend(_variable_reasons(key.rstrip("+"), value, known(word, state),
                                                 state, depth))
                assign(state, key.rstrip("+"), value, word, append=key.endswith("+"),
                        conditional=conditional)
            elif re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", arg) and name != "export":
                state.variables.pop(arg, None)
        return reasons
    for arg in args:
        bare = arg.split("=", 1)[0]
        if re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", bare):
            state.variables.pop(bare, None)
    if name in ("mapfile", "readarray"):
        state.variables.pop("MAPFILE", None)
    if name == "read":
        state.variables.pop("REPLY", None)
    return reasons


