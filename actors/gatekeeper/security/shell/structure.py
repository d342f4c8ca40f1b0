"""The compound commands of a command line, found before its simple commands are analysed.

:func:`structure` tells, for every token, what the list walker of
:mod:`~actors.gatekeeper.security.shell.parser` cannot see from the token alone: whether it sits in
a compound command (``if``, loops, ``case``, ``{ }``) whose pipe or redirection feeds it
data, whether a parenthesis opens a subshell or belongs to a ``case`` pattern, whether it
is in a loop whose body changes folder, and whether it is part of a ``case`` pattern.
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.actors.gatekeeper.security.shell.lexer import REDIRECTS, STARTERS, Word

_STDIN_REDIRECTS = frozenset({"<", "<<", "<<-", "<<<", "<&", "<>"})
_OPENERS = {"{": "}", "if": "fi", "while": "done", "until": "done", "for": "done",
            "select": "done", "case": "esac"}


@dataclass
class Frame:
    kind: str
    start: int
    piped: bool
    header: bool = True
    pattern: bool = False


def structure(tokens: list[Word]
               ) -> tuple[list[bool], list[bool], list[bool], list[bool], list[bool]]:
    """Per token: fed by a pipe or redirection into its compound command, inside a
    compound command (``if``, loops, ``case``, ``{ }``), for ``(``/``)`` whether it is a
    subshell parenthesis (not one of a ``case`` pattern), inside a loop whose body
    changes folder (each pass starts where the last one ended), and part of a ``case``
    header or pattern (its ``|`` is not a pipe)."""
    n = len(tokens)
    fed, compound, paren, moving = [False] * n, [False] * n, [False] * n, [False] * n
    pattern = [False] * n
    stack: list[Frame] = []
    start, piped = True, False

    def close(frame: Frame, end: int) -> None:
        j, redirected = end + 1, False
        while j < n and (tokens[j].fd or (tokens[j].op and tokens[j].text in REDIRECTS)):
            if tokens[j].op:
                redirected = redirected or tokens[j].text in _STDIN_REDIRECTS
                j += 1
            j += 1
        loop = frame.kind in ("while", "until", "for", "select")
        moves = loop and any(not t.op and not t.quoted and t.text in ("cd", "pushd", "popd")
                             for t in tokens[frame.start : end + 1])
        for k in range(frame.start, end + 1):
            fed[k] = fed[k] or frame.piped or redirected
            compound[k] = compound[k] or frame.kind != "("
            moving[k] = moving[k] or moves

    for i, tok in enumerate(tokens):
        top = stack[-1] if stack else None
        in_case = top is not None and top.kind == "case"
        pattern[i] = bool(in_case and top and (top.header or top.pattern))
        if tok.op:
            t = tok.text
            if t == "(" and not (in_case and top and top.pattern):
                stack.append(Frame("(", i, piped, False))
                paren[i] = True
            elif t == ")" and in_case and top and top.pattern:
                top.pattern = False
                start, piped = True, False
                continue
            elif t == ")":
                paren[i] = True
                if top and top.kind == "(":
                    close(stack.pop(), i)
            elif t in (";;", ";&", ";;&") and in_case and top:
                top.pattern = True
            if t not in REDIRECTS:
                start = t != ")"
            piped = t in ("|", "|&")
            continue
        if tok.fd:
            continue
        word = None if tok.quoted else tok.text
        if top and in_case and word == "esac" and (top.pattern or start):
            close(stack.pop(), i)
            start = False
        elif top and in_case and top.header:
            if word == "in":
                top.header, top.pattern = False, True
        elif top and in_case and top.pattern:
            pass
        elif start and word in _OPENERS:
            stack.append(Frame(word, i, piped))
            start = word in ("{", "if", "while", "until")
        elif start and top and word == _OPENERS.get(top.kind):
            close(stack.pop(), i)
            start = False
        else:
            start = start and word in STARTERS
        piped = False
    for frame in reversed(stack):
        close(frame, n - 1)
    return fed, compound, paren, moving, pattern
