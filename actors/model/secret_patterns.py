"""The pattern vocabulary the redactor's rules are written in.

A rule describes what it matches once, as a sequence of pieces (:func:`lit`, :func:`charset`,
:func:`alt`); from it come the Python pattern (:func:`full`), the pattern of every prefix of
what it matches, i.e. what could still be forming at the end of a buffer
(:func:`prefix_seq`), and its opening and hyperscan locators (:func:`shape`, over the image
of the text of :mod:`actors.model.redact_scan`). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tether.actors.model.redact_scan import (
    BEFORE_ALNUM,
    BEFORE_WORD,
    SPACE,
    Locator,
    caseless,
    literal,
)

HEAD = 3
"""Characters a rule's head locator covers (see :func:`shape`)."""

# A tiny pattern vocabulary from which each rule's "could still be forming" pattern is built:
# the set of every prefix of what the rule may match (assertions relaxed, so a superset).
Piece = tuple[Any, ...]


def lit(text: str, ci: bool = False) -> Piece:
    """``text`` as it is (caseless when ``ci``)."""
    return ("lit", text, ci)


def charset(cls: str, lo: int, hi: int) -> Piece:
    """From ``lo`` to ``hi`` characters of the one-character pattern ``cls``."""
    return ("cls", cls, lo, hi)


def alt(*seqs: Sequence[Piece]) -> Piece:
    """One of the sequences ``seqs``."""
    return ("alt", seqs)


def full(piece: Piece) -> str:
    """The Python pattern of ``piece``."""
    kind = piece[0]
    if kind == "lit":
        body = re.escape(piece[1])
        return f"(?i:{body})" if piece[2] else body
    if kind == "cls":
        return f"{piece[1]}{{{piece[2]},{piece[3]}}}"
    return "(?:" + "|".join("".join(full(p) for p in seq) for seq in piece[1]) + ")"


def prefix(piece: Piece) -> str:
    """A pattern for every prefix (empty and whole included) of what ``piece`` matches."""
    kind = piece[0]
    if kind == "lit":
        out = ""
        for ch in reversed(piece[1]):
            out = f"(?:{re.escape(ch)}{out})?"
        return f"(?i:{out})" if piece[2] else out
    if kind == "cls":
        return f"{piece[1]}{{0,{piece[3]}}}"
    return "(?:" + "|".join(prefix_seq(seq) for seq in piece[1]) + ")"


def prefix_seq(seq: Sequence[Piece]) -> str:
    """Every prefix of what ``seq`` matches: the union over ``i`` of ``seq[:i]`` then a prefix
    of ``seq[i]``, factored (``a(?:b…|prefix(b))|prefix(a)``) so that a common head is matched
    once, not once per option (the same set of texts; "could" patterns are only used anchored
    at the end of the buffer, where only that set matters)."""
    out = prefix(seq[-1])
    for piece in reversed(seq[:-1]):
        out = f"(?:{full(piece)}{out}|{prefix(piece)})"
    return out


# The same vocabulary gives each rule's locators (hyperscan expressions over the image of the
# text, see actors.model.redact_scan) and the "opening" that prefilters its "could" pattern.
_HS_BEFORE = {"": "", "\\b": BEFORE_WORD, "(?<![A-Za-z0-9])": BEFORE_ALNUM}


def _hs_class(cls: str) -> str:
    """A one-character pattern of the vocabulary as an image class matching at least the bytes
    of every character it matches (ValueError for a shape not translated here)."""
    if cls == "\\s":
        return SPACE
    if cls.startswith("(?i:[") and cls.endswith("])") and cls[5:-2].isalpha():
        return "(?:" + "|".join(caseless(ch) for ch in cls[5:-2]) + ")"
    if cls.startswith("[^") and cls.isascii() and "?" not in cls:
        # hyperscan's \s is narrower than Python's, so the negation matches more; and "?",
        # the image of characters above U+00FF, stays in it
        return cls
    if len(cls) == 1 and cls.isascii() and not cls.isalnum():
        return re.escape(cls)
    if cls.startswith("[") and cls.isascii() and not any(e in cls for e in ("\\s", "\\w", "\\d")):
        return cls  # ASCII only: Python and the image agree
    raise ValueError(f"no image class for {cls!r}")


def _hs(piece: Piece) -> str:
    kind = piece[0]
    if kind == "lit":
        return caseless(piece[1]) if piece[2] else literal(piece[1])
    if kind == "cls":
        return f"{_hs_class(piece[1])}{{{piece[2]},{piece[3]}}}"
    return "(?:" + "|".join("".join(_hs(p) for p in seq) for seq in piece[1]) + ")"


def _longest(seq: Sequence[Piece], shortest: bool = False) -> int:
    """How many characters ``seq`` matches at most (at least, when ``shortest``)."""
    total = 0
    for piece in seq:
        if piece[0] == "lit":
            total += len(piece[1])
        elif piece[0] == "cls":
            total += piece[2] if shortest else piece[3]
        else:
            total += (min if shortest else max)(_longest(s, shortest) for s in piece[1])
    return total


def _chars(seq: Sequence[Piece], k: int) -> list[list[tuple[str, str]]]:
    """Every way the first ``k`` characters of what ``seq`` matches can look, as lists of
    one-character patterns (Python, image); shorter where ``seq`` itself ends sooner."""
    if k == 0 or not seq:
        return [[]]
    piece, rest = seq[0], seq[1:]
    if piece[0] == "lit":
        chars = [
            (f"(?i:{re.escape(ch)})", caseless(ch)) if piece[2] else (re.escape(ch), literal(ch))
            for ch in piece[1]
        ]
        if len(chars) >= k:
            return [chars[:k]]
        return [chars + tail for tail in _chars(rest, k - len(chars))]
    if piece[0] == "cls":
        one = (piece[1], _hs_class(piece[1]))
        out: list[list[tuple[str, str]]] = []
        for n in range(min(piece[2], k), min(piece[3], k) + 1):
            out += [[one] * n] if n == k else [[one] * n + t for t in _chars(rest, k - n)]
        return out
    return [c for seq2 in piece[1] for c in _chars([*seq2, *rest], k)]


def _word_only(pattern: str) -> bool:
    """Whether the one-character ``pattern`` (ASCII-based) matches word characters only."""
    return not any(
        re.fullmatch(pattern, ch) and not (ch.isalnum() or ch == "_") for ch in map(chr, range(256))
    )


def shape(
    start: str, could: Sequence[Piece], locate: Sequence[Piece]
) -> tuple[str, tuple[Locator, ...]]:
    """A rule's opening and locators.

    ``start`` is the assertion before the rule (``""``, ``\\b`` before a word character, or
    ``(?<![A-Za-z0-9])``); every text the rule's "could" pattern matches is ``start`` then a
    prefix of what ``could`` matches; every match of the rule is ``start`` then a text that
    begins with what ``locate`` matches. The opening (Python) matches the first
    :data:`HEAD` characters of each such text, or all of one that is shorter and ends at the
    end of the buffer. The locators: ``locate`` (a match locator) and the first :data:`HEAD`
    characters of ``could`` (a head locator).
    """
    options = _chars(could, HEAD)
    if start == "\\b" and not all(o and _word_only(o[0][0]) for o in options):
        raise ValueError("a \\b start needs a word character after it")
    if any(len(o) != HEAD for o in options):
        raise ValueError("every head must be at least HEAD characters")
    nested = []
    for o in options:
        out = ""
        for py, _ in reversed(o):
            out = f"{py}(?:\\Z|{out})" if out else py
        nested.append(out)
    opening = start + "(?:" + "|".join(dict.fromkeys(nested)) + ")"
    before = _HS_BEFORE[start]
    heads = "|".join(dict.fromkeys("".join(hs for _, hs in o) for o in options))
    return opening, (
        Locator(before + "".join(_hs(p) for p in locate), _longest(locate),
                fixed=_longest(locate) == _longest(locate, shortest=True)),
        Locator(f"{before}(?:{heads})", HEAD, head=True),
    )
