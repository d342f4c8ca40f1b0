"""The hyperscan locator behind the redactor (:mod:`actors.model.redact`).

The redactor's answers are defined by its Python ``re`` patterns. This module only tells it
*where* to run them: one hyperscan database holds, for every rule, a pattern that matches the
opening of each of the rule's matches (a superset: it may also match where the rule does not),
plus each configured secret as a literal. A text is scanned once at hyperscan speed; the
redactor then runs ``re`` only in the short windows before the hits, so clean text never goes
through Python's regex engine. Because every real match lies in some window, the result is the
one ``re`` alone gives.

The hyperscan side sees an *image* of the text with exactly one byte per character, so offsets
need no translation:

* a sentinel newline first (offset 0), so "the character before" always exists;
* characters up to U+00FF as their Latin-1 byte;
* the four characters Python's caseless matching equates with an ASCII letter (long s U+017F
  with s, the Kelvin sign with k, dotted and dotless I with i) as :data:`FOLD_S`, :data:`FOLD_K`,
  :data:`FOLD_I`;
* every other character as :data:`OTHER`, the question mark (so the image stands for more
  than one text, and expressions must allow for each: :data:`SPACE` includes it).

Expressions are written for that image with the helpers here (:data:`BEFORE_WORD`,
:data:`BEFORE_ALNUM`, :data:`SPACE`, :func:`caseless`, :func:`literal`): each must match
wherever the Python pattern it stands for could, whatever the characters behind the bytes.

Hyperscan is optional: :func:`build` returns ``None`` when the package is not importable or an
expression does not compile, and the redactor then uses ``re`` everywhere.
"""

from __future__ import annotations

import codecs
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

FOLD_S = 0x80
"""Image byte of the long s (U+017F), which Python's caseless ``s`` matches."""
FOLD_K = 0x81
"""Image byte of the Kelvin sign (U+212A), which Python's caseless ``k`` matches."""
OTHER = 0x3F
"""Image byte of every character above U+00FF without a fold of its own (``?``, as Latin-1's
``replace`` error handler writes it, at C speed)."""
FOLD_I = 0x83
"""Image byte of the dotted capital I (U+0130) and the dotless i (U+0131), which Python's
caseless ``i`` matches."""

FOLDS: dict[str, int] = {"\u017f": FOLD_S, "\u212a": FOLD_K, "\u0130": FOLD_I, "\u0131": FOLD_I}
"""Every non-ASCII character that Python's ``re`` (caseless, Unicode) matches with an ASCII
letter, and its image byte (the tests check this list against ``re`` itself)."""

_FOLD_OF = {"s": FOLD_S, "k": FOLD_K, "i": FOLD_I}

BEFORE_WORD = "[^A-Za-z0-9_]"
r"""The character before a ``\b`` that opens a word (the sentinel at the start of the text)."""
BEFORE_ALNUM = "[^A-Za-z0-9]"
"""The character before ``(?<![A-Za-z0-9])`` (the sentinel at the start of the text)."""
SPACE = "[\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\x85\\xa0\\x3f]"
r"""Every image byte of a character Python's ``\s`` matches (Unicode spaces above U+00FF are
:data:`OTHER`)."""

_ERRORS = "tether-redact-image"
_FOLDED = re.compile("[" + "".join(FOLDS) + "]")


def _image_errors(err: UnicodeError) -> tuple[bytes, int]:
    if not isinstance(err, UnicodeEncodeError):
        raise err
    chunk = err.object[err.start : err.end]
    if any(ch in FOLDS for ch in chunk):
        return bytes(FOLDS.get(ch, OTHER) for ch in chunk), err.end
    return bytes((OTHER,)) * len(chunk), err.end


codecs.register_error(_ERRORS, _image_errors)


def image(text: str) -> bytes:
    """The bytes hyperscan scans for ``text``: the sentinel, then one byte per character."""
    if text.isascii() or _FOLDED.search(text) is None:
        return ("\n" + text).encode("latin-1", "replace")
    return ("\n" + text).encode("latin-1", _ERRORS)


def image_char(ch: str) -> bytes:
    """The image byte of one character."""
    return ch.encode("latin-1", _ERRORS)


def literal(text: str) -> str:
    """An expression matching the image of ``text`` exactly (case-sensitive)."""
    return "".join(f"\\x{b:02x}" for b in image(text)[1:])


def caseless(text: str) -> str:
    """An expression matching the image of whatever Python's ``(?i:text)`` matches (``text``
    is ASCII)."""
    out = []
    for ch in text:
        low, up = ch.lower(), ch.upper()
        if low == up:
            out.append(f"\\x{ord(ch):02x}")
            continue
        fold = _FOLD_OF.get(low)
        out.append(f"[{low}{up}" + (f"\\x{fold:02x}" if fold is not None else "") + "]")
    return "".join(out)


@dataclass(frozen=True)
class Locator:
    """One hyperscan expression over the image (see the module docstring).

    A *match* locator (``head=False``) matches, from the start of every match of the rule it
    serves (or from the character just before it, for a boundary), at most ``span`` characters
    of that match: so each match starts within ``span`` characters before some hit's end. When
    ``fixed``, it always matches exactly ``span`` (after the boundary): the match starts there.

    A *head* locator (``head=True``) matches exactly ``span`` characters (after an optional
    boundary character) at the start of every text from which the rule could still match
    (see ``Redactor`` "could"), once that text is at least ``span`` long.
    """

    expression: str
    span: int
    head: bool = False
    fixed: bool = False


Hits = tuple[list[tuple[int, int]], list[int]]
"""What one scan found, in character offsets of the scanned text: ``(windows, heads)``.
``windows`` are ``(start, end)`` pairs sorted by ``start``: every match of the redactor's
patterns starts inside one of them. ``heads`` are the sorted positions where a head locator
hit."""


class _Scratches(threading.local):
    """Hyperscan scratch space per thread (it cannot be shared, and the binding releases the
    GIL while it scans)."""

    def __init__(self, hs: Any, matches_db: Any, all_db: Any) -> None:
        self.matches = hs.Scratch(database=matches_db)
        self.all = hs.Scratch(database=all_db)


def _collect(index: int, _start: int, end: int, _flags: int, hits: list[tuple[int, int]]) -> None:
    hits.append((index, end))


def load_hyperscan() -> Any:
    """The ``hyperscan`` module, or ``None`` when it is not installed."""
    try:
        import hyperscan
    except ImportError:
        return None
    return hyperscan


class Scanner:
    """Compiled locators: one database of the match locators, one with the heads as well."""

    def __init__(self, hs: Any, locators: Sequence[Locator]) -> None:
        """Compile ``locators`` (raises what hyperscan raises for one that does not compile)."""
        self._spans = [loc.span for loc in locators]
        self._head = [loc.head for loc in locators]
        self._fixed = [loc.fixed for loc in locators]
        matches = [i for i, loc in enumerate(locators) if not loc.head]
        self._matches_db = self._compile(hs, locators, matches)
        self._all_db = self._compile(hs, locators, list(range(len(locators))))
        self._scratches = _Scratches(hs, self._matches_db, self._all_db)

    @staticmethod
    def _compile(hs: Any, locators: Sequence[Locator], ids: list[int]) -> Any:
        db = hs.Database(mode=hs.HS_MODE_BLOCK)
        db.compile(
            expressions=[locators[i].expression.encode("latin-1") for i in ids],
            ids=ids,
            elements=len(ids),
            flags=0,
        )
        return db

    def scan(self, text: str, heads: bool) -> Hits:
        """Locate in ``text``: match windows always, head positions when ``heads``."""
        found: list[tuple[int, int]] = []
        if heads:
            self._all_db.scan(image(text), match_event_handler=_collect, context=found,
                              scratch=self._scratches.all)
        else:
            self._matches_db.scan(image(text), match_event_handler=_collect, context=found,
                                  scratch=self._scratches.matches)
        if not found:
            return [], []
        windows: list[tuple[int, int]] = []
        starts: set[int] = set()
        spans, is_head, fixed = self._spans, self._head, self._fixed
        for index, end in found:
            stop = end - 1  # the image has the sentinel first
            start = stop - spans[index]
            if is_head[index]:
                starts.add(start)
            elif fixed[index]:
                windows.append((start, start + 1))
            else:
                windows.append((max(0, start), stop))
        windows.sort()
        return windows, sorted(starts)


def build(locators: Sequence[Locator]) -> Scanner | None:
    """A :class:`Scanner` of ``locators``, or ``None`` without hyperscan or when one of them
    does not compile."""
    hs = load_hyperscan()
    if hs is None:
        return None
    try:
        return Scanner(hs, locators)
    except Exception:  # any compile error: the caller falls back to re
        return None
