"""Bash's reading of a command line, before anything is expanded: words and operators.

:func:`lex` follows bash's quoting rules (backslash, single and double quotes, ``$'...'``
with its escapes decoded, ``$"..."``), line continuations, comments, here-documents
(their bodies are attached to the delimiter word, not read as commands), ``$(...)``,
backticks, ``${...}``, ``$((...))``, process substitution ``<(...)``/``>(...)``, the
arithmetic command ``((...))`` and the ``[[ ... ]]`` test, whose ``<``, ``>``, ``&&``,
``(`` are words. Each :class:`Word` keeps its text with quotes removed and expansions left
as written (``$X``, ``$(cmd)``), and says what bash will still do to it: which parameters
it expands, which commands it substitutes, whether it has unquoted glob or brace patterns.

Text inside single quotes, ``$'...'`` and escapes that looks like ``$(...)`` or a backtick
is listed in :attr:`Word.literal_code`: it does not run here, but callers check it as if
it did, because such text is what ``eval``, arithmetic and prompt expansion run later.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: Operators, longest first.
OPERATORS: tuple[str, ...] = (
    "&>>", ";;&", "<<<", "<<-", "&>", ">>", ">|", ">&", "<<", "<>", "<&", "&&", "||", "|&",
    ";;", ";&", ";", "&", "|", ">", "<", "(", ")", "\n",
)
#: Redirection operators (the word after one is its target).
REDIRECTS: frozenset[str] = frozenset(
    {">", ">>", ">|", "&>", "&>>", "<>", ">&", "<", "<<", "<<-", "<<<", "<&"}
)
_META = frozenset(" \t\r\n|&;()<>")
#: Reserved words after which a new command starts.
STARTERS: frozenset[str] = frozenset(
    {"if", "then", "else", "elif", "do", "while", "until", "!", "{", "time"}
)
_COND_OPS = ("&&", "||", "<", ">", "(", ")")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
_BRACE = re.compile(r"(?<!\$)\{[^{}\x00\s]*(,|\.\.)[^{}\x00\s]*\}")
_ESCAPES = {
    "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r",
    "t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?",
}


class LexError(ValueError):
    """The command line is not complete bash (an unterminated quote or expansion)."""


@dataclass
class Word:
    """One token. ``op`` tokens are operators (``text`` is the operator).

    For words: ``text`` has quotes removed and expansions as written; ``params`` the
    parameters expanded (a name such as ``HOME`` or ``1``, or ``{...}`` for a ``${...}``
    that does more than name one); ``subs`` the commands bash substitutes (``$(...)``,
    backticks, ``<(...)``, ``>(...)``); ``arith`` arithmetic expansions; ``glob`` and
    ``brace`` unquoted patterns; ``ansi`` a ``$'...'`` part; ``assign`` an assignment
    (``NAME=`` unquoted at the start); ``fd`` an IO number (``2`` in ``2>``) or ``{name}``
    before a redirection. A here-document delimiter carries the body in ``heredoc``;
    ``heredoc_expands`` is True when the delimiter was not quoted (bash expands the body).
    """

    text: str
    op: bool = False
    quoted: bool = False
    glob: bool = False
    brace: bool = False
    ansi: bool = False
    assign: bool = False
    fd: bool = False
    procsub: str = ""
    params: list[str] = field(default_factory=list)
    subs: list[str] = field(default_factory=list)
    arith: list[str] = field(default_factory=list)
    literal_code: list[str] = field(default_factory=list)
    heredoc: str | None = None
    heredoc_expands: bool = False

    @property
    def expands(self) -> bool:
        """True when bash expands something in this word (parameters, commands, arithmetic)."""
        return bool(self.params or self.subs or self.arith)


def lex(source: str) -> list[Word]:
    """Split ``source`` into words and operators; raises :class:`LexError` when a quote,
    expansion or substitution is not closed."""
    lexer = _Lexer(source)
    lexer.run()
    return lexer.tokens


def decode_ansi(text: str, start: int) -> tuple[str, int]:
    """Decode the body of ``$'...'`` starting at ``start`` (just after the quote); returns
    the decoded text and the index after the closing quote."""
    out: list[str] = []
    i, n = start, len(text)
    while i < n:
        c = text[i]
        if c == "'":
            return "".join(out), i + 1
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        d = text[i + 1]
        if d in _ESCAPES:
            out.append(_ESCAPES[d])
            i += 2
        elif d in "01234567":
            digits = re.match(r"[0-7]{1,3}", text[i + 1 :])
            assert digits is not None
            out.append(chr(int(digits.group(), 8) & 0xFF))
            i += 1 + len(digits.group())
        elif d in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[d]
            digits = re.match(rf"[0-9a-fA-F]{{1,{width}}}", text[i + 2 :])
            if digits:
                out.append(chr(min(int(digits.group(), 16), 0x10FFFF)))
                i += 2 + len(digits.group())
            else:
                out.append("\\" + d)
                i += 2
        elif d == "c" and i + 2 < n:
            out.append(chr(ord(text[i + 2]) & 0x1F))
            i += 3
        else:
            out.append("\\" + d)
            i += 2
    raise LexError("a $'...' quote is not closed")


def substitutions(word: str) -> list[str]:
    """The texts of ``$(...)``, ``<(...)``, ``>(...)`` and backtick substitutions found in
    ``word`` by plain bracket matching (for text that is not lexed: quoted text checked as
    if it ran)."""
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


def _has_code(text: str) -> bool:
    return "$(" in text or "`" in text or "<(" in text or ">(" in text


class _Lexer:
    """One pass over ``s`` from ``i``. ``nested`` lexers read the inside of ``$(...)`` and
    stop at the ``)`` that closes it (:attr:`i` is then its index)."""

    def __init__(self, s: str, start: int = 0, nested: bool = False) -> None:
        self.s = s
        self.i = start
        self.nested = nested
        self.tokens: list[Word] = []
        self.pending: list[tuple[Word, bool]] = []
        self.cmd_start = True
        self.keyword_ok = True
        self.after_for = False
        self.case: list[str] = []  # per open case: "header", "pattern" or "body"
        self.redirect: str | None = None
        self.cond = False
        self.parens = 0

    def run(self) -> None:
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c in " \t\r":
                self.i += 1
            elif s.startswith("\\\n", self.i):
                self.i += 2
            elif c == "#":
                end = s.find("\n", self.i)
                self.i = len(s) if end < 0 else end
            elif c == "\n":
                self._op("\n")
                self.i += 1
                self._bodies()
            elif self.cond and (op := next((o for o in _COND_OPS if s.startswith(o, self.i)),
                                           None)):
                self.tokens.append(Word(op))
                self.i += len(op)
            elif (self.keyword_ok or self.after_for) and s.startswith("((", self.i) and (
                closing := _arith_end(s, self.i + 2)
            ) is not None:
                inner = s[self.i + 2 : closing - 2]
                self.tokens.append(Word(s[self.i : closing], arith=[inner],
                                        subs=substitutions(inner)))
                self.i = closing
                self.cmd_start = self.keyword_ok = self.after_for = False
            elif c in "<>" and s.startswith("(", self.i + 1):
                self._word()
            elif c in "|&;()<>":
                op = next(o for o in OPERATORS if s.startswith(o, self.i))
                if self.nested and op == ")" and self.parens == 0:
                    return
                self.parens += {"(": 1, ")": -1}.get(op, 0)
                self.i += len(op)
                self._op(op)
            else:
                self._word()
        if self.nested:
            raise LexError("a command substitution is not closed")
        self._bodies()

    def _op(self, op: str) -> None:
        self.tokens.append(Word(op, op=True))
        if op in REDIRECTS:
            # after a redirection, assignments may still follow, reserved words may not
            self.redirect = op
            self.keyword_ok = False
        else:
            self.cmd_start = self.keyword_ok = True
            self.redirect = None
        self.after_for = False
        state = self.case[-1] if self.case else ""
        if state == "pattern" and op == ")":
            self.case[-1] = "body"
        elif state == "body" and op in (";;", ";&", ";;&"):
            self.case[-1] = "pattern"
        if self.case and self.case[-1] in ("header", "pattern"):
            # case patterns are words: no reserved word, test or arithmetic there
            self.cmd_start = self.keyword_ok = False

    def _bodies(self) -> None:
        """Read the here-document bodies that the line just ended owes."""
        s = self.s
        for word, strip in self.pending:
            lines: list[str] = []
            while self.i < len(s):
                end = s.find("\n", self.i)
                line = s[self.i : end if end >= 0 else len(s)]
                self.i = end + 1 if end >= 0 else len(s)
                checked = line.lstrip("\t") if strip else line
                if checked == word.text:
                    break
                lines.append(checked)
            body = "\n".join(lines) + ("\n" if lines else "")
            word.heredoc = body
            word.heredoc_expands = not word.quoted
            if word.heredoc_expands:
                scan = Word("")
                _Lexer(body)._double(scan, [], [], terminator=None, start=0)
                word.subs.extend(scan.subs)
                word.params.extend(scan.params)
                word.arith.extend(scan.arith)
        self.pending = []

    def _word(self) -> None:
        s = self.s
        w = Word("")
        text: list[str] = []
        mask: list[str] = []
        if s[self.i] in "<>":  # process substitution at the start of a word
            inner, end = self._paren(self.i + 2)
            w.subs.append(inner)
            w.procsub = s[self.i]
            text.append(s[self.i : end])
            mask.append("\0" * (end - self.i))
            self.i = end
        while self.i < len(s):
            c = s[self.i]
            if c in _META:
                if c == "(" and _ASSIGN.match("".join(text)) and "".join(text).endswith("="):
                    inner, end = self._paren(self.i + 1)
                    w.subs.extend(_array_subs(inner))
                    text.append(s[self.i : end])
                    mask.append("\0" * (end - self.i))
                    self.i = end
                    continue
                break
            if c == "\\":
                if s.startswith("\\\n", self.i):
                    self.i += 2
                    continue
                nxt = s[self.i + 1 : self.i + 2]
                text.append(nxt or "\\")
                mask.append("\0")
                if nxt:
                    w.quoted = True
                    if s.startswith(("$(", "`"), self.i + 1) and (
                        escaped := substitutions(s[self.i + 1 :])[:1]
                    ):
                        w.literal_code.append(f"$({escaped[0]})")
                self.i += 2 if nxt else 1
            elif c == "'":
                end = s.find("'", self.i + 1)
                if end < 0:
                    raise LexError("a single quote is not closed")
                seg = s[self.i + 1 : end]
                text.append(seg)
                mask.append("\0" * len(seg))
                w.quoted = True
                if _has_code(seg):
                    w.literal_code.append(seg)
                self.i = end + 1
            elif c == '"':
                w.quoted = True
                self._double(w, text, mask, terminator='"', start=self.i + 1)
            elif c == "$":
                self._dollar(w, text, mask, in_double=False)
            elif c == "`":
                self._backtick(w, text, mask)
            else:
                text.append(c)
                mask.append(c)
                self.i += 1
        w.text = "".join(text)
        flat = "".join(mask)
        w.glob = any(ch in "*?[" for ch in flat)
        w.brace = bool(_BRACE.search(flat))
        nxt = s[self.i : self.i + 1]
        if nxt in ("<", ">") and not w.quoted and (
            w.text.isdigit() or re.fullmatch(r"\{[A-Za-z_][A-Za-z0-9_]*\}", w.text)
        ):
            w.fd = True
            self.keyword_ok = False
            self.tokens.append(w)
            return
        self._finish(w, flat)

    def _finish(self, w: Word, flat: str) -> None:
        self.tokens.append(w)
        if self.redirect is not None:
            if self.redirect in ("<<", "<<-"):
                self.pending.append((w, self.redirect == "<<-"))
            self.redirect = None
            return
        if w.text == "]]" and not w.quoted:
            self.cond = False
        state = self.case[-1] if self.case else ""
        if state in ("header", "pattern") and not w.quoted:
            if w.text == "in" and state == "header":
                self.case[-1] = "pattern"
            elif w.text == "esac" and state == "pattern":
                self.case.pop()
            return
        if self.keyword_ok and not w.quoted and w.text in ("case", "esac"):
            if w.text == "case":
                self.case.append("header")
            elif self.case:
                self.case.pop()
            self.cmd_start = self.keyword_ok = False
            return
        if self.cmd_start:
            # reserved words count only as the first word: not after an assignment or a
            # redirection (``X=1 [[ a > f ]]`` runs a command ``[[`` writing f)
            w.assign = _ASSIGN.match(flat) is not None
            reserved = self.keyword_ok and not w.quoted
            if reserved and w.text == "[[":
                self.cond = True
            keyword = reserved and w.text in STARTERS
            self.after_for = reserved and w.text == "for"
            self.cmd_start = keyword or w.assign
            self.keyword_ok = keyword
        else:
            self.after_for = False

    def _paren(self, start: int) -> tuple[str, int]:
        """Lex ``$(``'s inside from ``start``; returns its text and the index after ``)``."""
        inner = _Lexer(self.s, start, nested=True)
        inner.run()
        return self.s[start : inner.i], inner.i + 1

    def _dollar(self, w: Word, text: list[str], mask: list[str], *, in_double: bool) -> None:
        s, i = self.s, self.i
        nxt = s[i + 1 : i + 2]
        if nxt == "'" and not in_double:
            decoded, end = decode_ansi(s, i + 2)
            text.append(decoded)
            mask.append("\0" * len(decoded))
            w.ansi = w.quoted = True
            if _has_code(decoded):
                w.literal_code.append(decoded)
            self.i = end
        elif nxt == '"' and not in_double:
            w.quoted = True
            self._double(w, text, mask, terminator='"', start=i + 2)
        elif s.startswith("$((", i) and (closing := _arith_end(s, i + 3)) is not None:
            inner = s[i + 3 : closing - 2]
            w.arith.append(inner)
            w.subs.extend(substitutions(inner))
            self._raw(text, mask, i, closing)
        elif nxt == "(":
            inner, end = self._paren(i + 2)
            w.subs.append(inner)
            self._raw(text, mask, i, end)
        elif nxt == "[":
            end = s.find("]", i + 2)
            if end < 0:
                raise LexError("an arithmetic expansion is not closed")
            w.arith.append(s[i + 2 : end])
            self._raw(text, mask, i, end + 1)
        elif nxt == "{":
            end, subs = _brace_end(s, i + 2)
            inner = s[i + 2 : end - 1]
            w.subs.extend(subs)
            name = _NAME.fullmatch(inner) or re.fullmatch(r"[0-9]+|[@*#?$!-]", inner)
            w.params.append(inner if name else "{" + inner + "}")
            self._raw(text, mask, i, end)
        elif nxt and (match := _NAME.match(s, i + 1)):
            w.params.append(match.group())
            self._raw(text, mask, i, match.end())
        elif nxt and nxt in "0123456789@*#?$!-":
            w.params.append(nxt)
            self._raw(text, mask, i, i + 2)
        else:
            text.append("$")
            mask.append("$")
            self.i = i + 1

    def _raw(self, text: list[str], mask: list[str], start: int, end: int) -> None:
        text.append(self.s[start:end])
        mask.append("\0" * (end - start))
        self.i = end

    def _backtick(self, w: Word, text: list[str], mask: list[str]) -> None:
        s = self.s
        j = self.i + 1
        while j < len(s) and s[j] != "`":
            j += 2 if s[j] == "\\" else 1
        if j >= len(s):
            raise LexError("a backtick substitution is not closed")
        inner = re.sub(r"\\([\\`$])", r"\1", s[self.i + 1 : j])
        w.subs.append(inner)
        self._raw(text, mask, self.i, j + 1)

    def _double(self, w: Word, text: list[str], mask: list[str], *, terminator: str | None,
                start: int) -> None:
        """Double-quoted text from ``start`` up to ``terminator`` (None: the end, for a
        here-document body)."""
        s = self.s
        self.i = start
        literal: list[str] = []
        escapable = '$`"\\' if terminator else "$`\\"
        while self.i < len(s):
            c = s[self.i]
            if terminator is not None and c == terminator:
                self.i += 1
                if _has_code("".join(literal)):
                    w.literal_code.append("".join(literal))
                return
            if c == "\\" and s[self.i + 1 : self.i + 2] == "\n":
                self.i += 2
            elif c == "\\" and s[self.i + 1 : self.i + 2] and s[self.i + 1] in escapable:
                text.append(s[self.i + 1])
                mask.append("\0")
                literal.append(s[self.i + 1])
                self.i += 2
            elif c == "$":
                self._dollar(w, text, mask, in_double=True)
            elif c == "`":
                self._backtick(w, text, mask)
            else:
                text.append(c)
                mask.append("\0")
                literal.append(c)
                self.i += 1
        if terminator is not None:
            raise LexError("a double quote is not closed")


def _arith_end(s: str, start: int) -> int | None:
    """The index after the ``))`` closing an arithmetic text that starts at ``start``, or
    None when the parentheses do not close as ``))`` (then it is a subshell)."""
    depth = 0
    i = start
    while i < len(s):
        c = s[i]
        if c == "(":
            depth += 1
        elif c == ")":
            if depth == 0:
                return i + 2 if s.startswith("))", i) else None
            depth -= 1
        elif c in "'\"":
            end = s.find(c, i + 1)
            if end < 0:
                return None
            i = end
        i += 1
    return None


def _brace_end(s: str, start: int) -> tuple[int, list[str]]:
    """The index after the ``}`` closing a ``${`` whose inside starts at ``start``, and the
    commands substituted inside it."""
    depth = 1
    subs: list[str] = []
    i = start
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c == "'":
            end = s.find("'", i + 1)
            if end < 0:
                raise LexError("a single quote is not closed")
            i = end + 1
            continue
        if c in '"`' or s.startswith("$(", i):
            probe = _Lexer(s, i)
            scan = Word("")
            if c == '"':
                probe._double(scan, [], [], terminator='"', start=i + 1)
            elif c == "`":
                probe._backtick(scan, [], [])
            else:
                probe._dollar(scan, [], [], in_double=True)
            subs.extend(scan.subs)
            i = probe.i
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1, subs
        i += 1
    raise LexError("a ${...} expansion is not closed")


def _array_subs(inner: str) -> list[str]:
    """Commands substituted in the elements of an array assignment ``a=(...)``."""
    subs: list[str] = []
    for token in lex(inner):
        subs.extend(token.subs)
    return subs
