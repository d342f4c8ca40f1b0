"""The redactor: secrets never reach the event log or a channel (DESIGN rule 7).

Pure. It replaces known secret values (the API key, database and NATS passwords handed in
from the settings) and text that looks like a credential (API keys and tokens, private-key
blocks, passwords in URLs, ``password=...`` assignments, bearer tokens) with ``[REDACTED]``.
The session applies it to tool output before storing it and to the model's text before
publishing or storing it.

Two entry points share one scanner, so they agree exactly:

- :meth:`Redactor.text` masks a whole string.
- :meth:`Redactor.stream` returns a :class:`StreamRedactor` for text that arrives in deltas.
  It emits each delta at once except for the shortest tail that could still be the start of a
  secret, so a secret split across deltas is masked before any of it is published. For every
  split of a text into deltas, ``"".join(s.feed(d) for d in deltas) + s.flush()`` equals
  ``Redactor.text(text)``.

The scanner works like ``re.sub`` over one alternation of every rule (leftmost match wins; at
one position the first rule in :data:`RULES` order, known values first). Every rule reads at
most :data:`CAP` characters from where it starts, which bounds the hold-back: a match that
would run longer (a private-key block without its END line, a token of thousands of
characters) is masked in full up to the cap and then the rest of it is swallowed, piece by
piece, until it ends.

Two engines give the same answers. ``re`` runs the scanner as described. ``hyperscan`` (when
the package is importable and every locator compiles; see :mod:`actors.model.redact_scan`) first
scans the text once with one database holding, for every rule, an expression matching the
opening of each of its matches (a superset) and every known secret as a literal; ``re`` then
runs only in short windows before the hits, so clean text is never walked by Python's regex
engine. What could still be forming at a stream's end is found alike: hyperscan marks where a
rule's first three characters occur, ``re`` confirms there and in the last few characters.
Short texts and deltas (under :data:`HS_MIN` characters) skip hyperscan: its fixed cost per
call exceeds ``re``'s work on them. A rule without locators makes the redactor use ``re``.

Streams also remember short steps (see :class:`StreamRedactor`): a model's deltas are tokens
that recur, and a step's result depends on nothing but its few characters.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from actors.model.redact_scan import (
    BEFORE_ALNUM,
    BEFORE_WORD,
    SPACE,
    Locator,
    Scanner,
    build,
    caseless,
    literal,
)

MASK = "[REDACTED]"

MIN_SECRET = 6
"""Known secrets shorter than this are not masked (they would mask ordinary words)."""

CAP = 8192
"""The most characters a stream holds back (unless a configured secret is longer: then that
length). No rule reads further than this from where its match starts; a longer credential is
masked wholesale as soon as the cap is reached and the remainder is masked as it arrives."""

_RUN = CAP - 320
"""The longest run of body characters a rule matches in one piece (the rest of CAP covers the
rule's head and tail, e.g. ``://user:`` or the private key's END line)."""

HS_MIN = 24
"""Below this many characters ``re`` alone scans, even when hyperscan is available: a text, a
stream's delta, or at a flush what the stream held. (A delta onto a long held tail stays on
``re`` too: the tail starts where a match could be starting, so ``re`` settles it there.)"""

_HEAD = 3
"""Characters a rule's head locator covers (see :func:`_shape`)."""

MEMO = 8192
"""Stream steps a redactor remembers by default (see :class:`StreamRedactor`)."""

_MEMO_TEXT = 16
"""Only steps on at most this many characters (held tail plus delta) are remembered."""

_DENSE = 32
"""Where head hits are at least one per this many characters up to the end (a markdown rule
of dashes is one per dash), one ``re`` search over the rest is cheaper than confirming each."""

_VALUE_IN_PATTERN = 64
"""Known values up to this long are found as they start at the end of a buffer by the "could"
pattern itself; longer ones by a loop (a pattern for them would nest too deep)."""


# A tiny pattern vocabulary from which each rule's "could still be forming" pattern is built:
# the set of every prefix of what the rule may match (assertions relaxed, so a superset).
_Piece = tuple[Any, ...]


def _lit(text: str, ci: bool = False) -> _Piece:
    return ("lit", text, ci)


def _cls(cls: str, lo: int, hi: int) -> _Piece:
    return ("cls", cls, lo, hi)


def _alt(*seqs: Sequence[_Piece]) -> _Piece:
    return ("alt", seqs)


def _full(piece: _Piece) -> str:
    kind = piece[0]
    if kind == "lit":
        body = re.escape(piece[1])
        return f"(?i:{body})" if piece[2] else body
    if kind == "cls":
        return f"{piece[1]}{{{piece[2]},{piece[3]}}}"
    return "(?:" + "|".join("".join(_full(p) for p in seq) for seq in piece[1]) + ")"


def _prefix(piece: _Piece) -> str:
    """A pattern for every prefix (empty and whole included) of what ``piece`` matches."""
    kind = piece[0]
    if kind == "lit":
        out = ""
        for ch in reversed(piece[1]):
            out = f"(?:{re.escape(ch)}{out})?"
        return f"(?i:{out})" if piece[2] else out
    if kind == "cls":
        return f"{piece[1]}{{0,{piece[3]}}}"
    return "(?:" + "|".join(_prefix_seq(seq) for seq in piece[1]) + ")"


def _prefix_seq(seq: Sequence[_Piece]) -> str:
    """Every prefix of what ``seq`` matches: the union over ``i`` of ``seq[:i]`` then a prefix
    of ``seq[i]``, factored (``a(?:b…|prefix(b))|prefix(a)``) so that a common head is matched
    once, not once per option (the same set of texts; "could" patterns are only used anchored
    at the end of the buffer, where only that set matters)."""
    out = _prefix(seq[-1])
    for piece in reversed(seq[:-1]):
        out = f"(?:{_full(piece)}{out}|{_prefix(piece)})"
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


def _hs(piece: _Piece) -> str:
    kind = piece[0]
    if kind == "lit":
        return caseless(piece[1]) if piece[2] else literal(piece[1])
    if kind == "cls":
        return f"{_hs_class(piece[1])}{{{piece[2]},{piece[3]}}}"
    return "(?:" + "|".join("".join(_hs(p) for p in seq) for seq in piece[1]) + ")"


def _longest(seq: Sequence[_Piece], shortest: bool = False) -> int:
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


def _chars(seq: Sequence[_Piece], k: int) -> list[list[tuple[str, str]]]:
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


def _shape(
    start: str, could: Sequence[_Piece], locate: Sequence[_Piece]
) -> tuple[str, tuple[Locator, ...]]:
    """A rule's opening and locators.

    ``start`` is the assertion before the rule (``""``, ``\\b`` before a word character, or
    ``(?<![A-Za-z0-9])``); every text the rule's "could" pattern matches is ``start`` then a
    prefix of what ``could`` matches; every match of the rule is ``start`` then a text that
    begins with what ``locate`` matches. The opening (Python) matches the first
    :data:`_HEAD` characters of each such text, or all of one that is shorter and ends at the
    end of the buffer. The locators: ``locate`` (a match locator) and the first :data:`_HEAD`
    characters of ``could`` (a head locator).
    """
    options = _chars(could, _HEAD)
    if start == "\\b" and not all(o and _word_only(o[0][0]) for o in options):
        raise ValueError("a \\b start needs a word character after it")
    if any(len(o) != _HEAD for o in options):
        raise ValueError("every head must be at least _HEAD characters")
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
        Locator(f"{before}(?:{heads})", _HEAD, head=True),
    )


@dataclass(frozen=True)
class _Rule:
    """One credential shape.

    ``pattern`` is the match (it may define ``<name>_pre`` and ``<name>_post`` groups, kept
    around the mask, and ``<name>_cap``, set when the match stopped at the cap). ``could``
    matches every text (from the match start to the end of the buffer) on which matching might
    still read past the buffer's end. ``cont``/``cont_could`` are the same for the remainder of
    a capped match, which is swallowed. ``opening`` and ``locate`` come from :func:`_shape`
    (a rule without locators makes the redactor use ``re`` alone).
    """

    name: str
    first: str  # every character a match can start with
    pattern: str
    could: str
    cont: str | None = None
    cont_could: str | None = None
    lead: str = ""  # what every match starts with, more precisely than ``first`` (a regex)
    opening: str = ""  # a necessary condition where ``could`` matches (a regex)
    locate: tuple[Locator, ...] = ()


def _shaped(
    rule: _Rule, start: str, could: Sequence[_Piece], locate: Sequence[_Piece]
) -> _Rule:
    """``rule`` with the opening and locators :func:`_shape` gives."""
    opening, locators = _shape(start, could, locate)
    return replace(rule, opening=opening, locate=locators)


def _token(
    name: str, start: str, head: Sequence[_Piece], cls: str, lo: int, end: str = ""
) -> _Rule:
    """A literal-ish head then a run of ``cls`` (at least ``lo``), optionally ``end``."""
    head_re = "".join(_full(p) for p in head)
    lead = re.escape(head[0][1]) if head[0][0] == "lit" and not head[0][2] else ""
    return _Rule(
        name,
        head[0][1][0],
        f"{start}{head_re}(?:{cls}{{{_RUN}}}(?P<{name}_cap>)|{cls}{{{lo},{_RUN - 1}}}{end})",
        start + _prefix_seq([*head, _cls(cls, 0, _RUN)]),
        f"(?:{cls}{{{_RUN}}}(?P<{name}_cap>)|{cls}{{0,{_RUN - 1}}})",
        f"{cls}{{0,{_RUN}}}",
        lead,
        *_shape(start, [*head, _cls(cls, 0, _RUN)], [*head, _cls(cls, lo, lo)]),
    )


_KEY = "[A-Za-z0-9_\\-]"
_ALNUM = "[A-Za-z0-9]"
# PEM blocks (RSA, EC, OPENSSH, ENCRYPTED...) and PGP's "PRIVATE KEY BLOCK".
_PK_BEGIN = [_lit("-----BEGIN "), _cls("[A-Z ]", 0, 40), _lit("PRIVATE KEY"),
             _cls("[A-Z ]", 0, 8), _lit("-----")]
_PK_END = "-----END [A-Z ]{0,40}PRIVATE KEY[A-Z ]{0,8}-----"
_PK_BODY = (
    f"(?:(?s:.){{0,{_RUN}}}?{_PK_END}|(?s:.){{0,{_RUN}}}\\Z|(?s:.){{{_RUN}}}(?P<private_key_cap>))"
)
_PK_BODY_COULD = f"(?:(?!{_PK_END})(?s:.)){{0,{_RUN + 80}}}"
_PW_KEYWORDS = [
    [_lit("api", True), _cls("[_\\-]", 0, 1), _lit("key", True)],
    [_lit("secret", True)],
    [_lit("token", True)],
    [_lit("passw", True), _cls("(?i:[or])", 0, 2), _lit("d", True)],
    [_lit("pwd", True)],
    [_lit("auth", True)],
]
_PW_HEAD = [
    _alt(*_PW_KEYWORDS),
    _cls("[A-Za-z_]", 0, 40),
    _cls("['\"]", 0, 1),
    _cls("\\s", 0, 8),
    _cls("[:=]", 1, 1),
    _cls("\\s", 0, 8),
    _cls("['\"]", 0, 1),
]
_PW_VALUE = "[^\\s'\"]"
_B64URL = "[A-Za-z0-9_\\-]"
_JWT = [_lit("eyJ"), _cls(_B64URL, 10, 1000), _lit(".eyJ"), _cls(_B64URL, 10, 1000), _lit("."),
        _cls(_B64URL, 10, 2000)]
"""A JSON web token: header, claims and signature, base64url (both JSON parts open with
``eyJ``, the encoding of ``{"``)."""
_URL_HEAD = [_lit("://"), _cls("[^\\s:/@]", 0, 256), _lit(":")]
_BEARER_CLS = "[A-Za-z0-9._~+/\\-]"
_BEARER = [_lit("bearer", True), _cls("\\s", 1, 8), _cls(_BEARER_CLS, 0, _RUN), _cls("=", 0, 2)]
_AWS = [_alt([_lit("AKIA")], [_lit("ASIA")]), _cls("[0-9A-Z]", 16, 16)]

RULES: tuple[_Rule, ...] = (
    _token("anthropic", "", [_lit("sk-ant-")], _KEY, 10),
    _token(
        "openai_project",
        "\\b",
        [_lit("sk-"), _alt([_lit("proj")], [_lit("svcacct")], [_lit("admin")]), _lit("-")],
        _KEY,
        20,
    ),
    _token("openai", "\\b", [_lit("sk-")], _ALNUM, 20, "\\b"),
    _shaped(
        _Rule("aws", "A", "\\b(?:AKIA|ASIA)[0-9A-Z]{16}\\b", "\\b" + _prefix_seq(_AWS)),
        "\\b", _AWS, _AWS,
    ),
    _token("github", "\\b", [_lit("gh"), _cls("[pousr]", 1, 1), _lit("_")], _ALNUM, 30, "\\b"),
    _token("github_pat", "\\b", [_lit("github_pat_")], "[A-Za-z0-9_]", 20),
    _token(
        "slack",
        "\\b",
        [_lit("xox"), _cls("[abeoprs]", 1, 1), _lit("-")],
        "[A-Za-z0-9\\-]",
        10,
        "\\b",
    ),
    # Shapes from gitleaks' published rules (stripe, gcp-api-key, gitlab-pat, npm-access-
    # token, slack-app-token, jwt).
    _token("stripe", "\\b",
           [_lit("sk_"), _alt([_lit("live")], [_lit("test")]), _lit("_")], _ALNUM, 10, "\\b"),
    _token("stripe_restricted", "\\b",
           [_lit("rk_"), _alt([_lit("live")], [_lit("test")]), _lit("_")], _ALNUM, 10, "\\b"),
    _token("google_api", "\\b", [_lit("AIza")], _KEY, 35),
    _token("gitlab", "\\b", [_lit("gl"), _cls("[a-z]", 2, 4), _lit("-")], _KEY, 20),
    _token("npm", "\\b", [_lit("npm_")], _ALNUM, 36, "\\b"),
    _token("huggingface", "\\b", [_lit("hf_")], "[A-Za-z]", 34, "\\b"),
    _token("sendgrid", "\\b", [_lit("SG.")], "[A-Za-z0-9=_\\-.]", 66),
    _token("slack_app", "\\b", [_lit("xapp-")], "[A-Za-z0-9\\-]", 10, "\\b"),
    _shaped(
        _Rule("jwt", "e", "\\b" + "".join(_full(p) for p in _JWT), "\\b" + _prefix_seq(_JWT),
              lead="eyJ"),
        "\\b", _JWT, [_JWT[0], _cls(_B64URL, 10, 10)],
    ),
    _shaped(
        _Rule(
            "private_key",
            "-",
            "".join(_full(p) for p in _PK_BEGIN) + _PK_BODY,
            f"(?:{_prefix_seq(_PK_BEGIN)}|{''.join(_full(p) for p in _PK_BEGIN)}"
            f"{_PK_BODY_COULD})",
            _PK_BODY,
            _PK_BODY_COULD,
        ),
        "", _PK_BEGIN, _PK_BEGIN,
    ),
    _shaped(
        _Rule(
            "url_password",
            ":",
            f"(?P<url_password_pre>{''.join(_full(p) for p in _URL_HEAD)})"
            f"[^\\s/@]{{1,{_RUN}}}(?P<url_password_post>@)",
            _prefix_seq([*_URL_HEAD, _cls("[^\\s/@]", 0, _RUN), _lit("@")]),
        ),
        # Located by "://" alone: a window spanning the host would make every URL with a
        # port cost a walk over the text before it.
        "", [*_URL_HEAD, _cls("[^\\s/@]", 0, _RUN), _lit("@")], [_lit("://")],
    ),
    _shaped(
        _Rule(
            "assignment",
            "aAsStTpP",
            "(?<![A-Za-z0-9])(?P<assignment_pre>"
            + "".join(_full(p) for p in _PW_HEAD[:-1])
            + "(?P<assignment_q>['\"]?))(?!(?i:bearer|basic)\\b)"
            + f"(?:{_PW_VALUE}{{{_RUN}}}(?P<assignment_cap>)"
            + f"|{_PW_VALUE}{{6,{_RUN - 1}}}(?P<assignment_post>(?P=assignment_q)))",
            "(?<![A-Za-z0-9])"
            + _prefix_seq([*_PW_HEAD, _cls(_PW_VALUE, 0, _RUN), _cls("['\"]", 0, 1)]),
            f"(?:{_PW_VALUE}{{{_RUN}}}(?P<assignment_cap>)|{_PW_VALUE}{{0,{_RUN - 1}}})",
            f"{_PW_VALUE}{{0,{_RUN}}}",
        ),
        "(?<![A-Za-z0-9])",
        [*_PW_HEAD, _cls(_PW_VALUE, 0, _RUN), _cls("['\"]", 0, 1)],
        [*_PW_HEAD, _cls(_PW_VALUE, 6, 6)],
    ),
    _shaped(
        _Rule(
            "bearer",
            "bB",
            f"(?P<bearer_pre>\\b(?i:bearer)\\s{{1,8}})"
            f"(?:{_BEARER_CLS}{{{_RUN}}}(?P<bearer_cap>)|{_BEARER_CLS}{{16,{_RUN - 1}}}={{0,2}})",
            "\\b" + _prefix_seq(_BEARER),
            f"(?:{_BEARER_CLS}{{{_RUN}}}(?P<bearer_cap>)|{_BEARER_CLS}{{0,{_RUN - 1}}})",
            f"{_BEARER_CLS}{{0,{_RUN}}}",
        ),
        "\\b", _BEARER, [*_BEARER[:2], _cls(_BEARER_CLS, 16, 16)],
    ),
)
"""Text that looks like a credential whatever its value, in priority order."""

PATTERNS: tuple[re.Pattern[str], ...] = tuple(re.compile(r.pattern) for r in RULES)
"""Each rule's pattern on its own (for inspection; the scanner uses them combined)."""

_RULES = {r.name: r for r in RULES}
_CONT = {r.name: re.compile(r.cont) for r in RULES if r.cont is not None}
_CONT_COULD = {r.name: re.compile(r.cont_could) for r in RULES if r.cont_could is not None}
_READ = CAP
"""No rule reads more than this many characters from the position it is tried at."""

Engine = Literal["auto", "re", "hyperscan"]

_SCANNERS: dict[tuple[str, ...], Scanner | None] = {}
_SCANNERS_LOCK = threading.Lock()
_SCANNERS_KEPT = 32


def _scanner(values: tuple[str, ...]) -> Scanner | None:
    """The compiled locators of every rule and of the known ``values`` (cached per ``values``);
    ``None`` without hyperscan, when a rule has no locators or one does not compile."""
    with _SCANNERS_LOCK:
        if values in _SCANNERS:
            return _SCANNERS[values]
    scanner: Scanner | None = None
    if all(r.locate for r in RULES):
        locators = [loc for r in RULES for loc in r.locate]
        locators += [Locator(literal(v), len(v), fixed=True) for v in values]
        scanner = build(list(dict.fromkeys(locators)))
    with _SCANNERS_LOCK:
        if len(_SCANNERS) >= _SCANNERS_KEPT:
            _SCANNERS.clear()
        _SCANNERS[values] = scanner
    return scanner


class Redactor:
    """Masks known secrets and credential-looking text.

    ``engine`` chooses how the scanner runs: ``"auto"`` (hyperscan when it is importable and
    compiles, else ``re``), ``"re"``, or ``"hyperscan"`` (RuntimeError when unavailable). The
    engines give identical results; :attr:`engine` says which one is in use. ``hs_min``: texts
    and stream buffers shorter than this stay on ``re`` (see :data:`HS_MIN`). ``memo``: how
    many short stream steps its streams share (0: none; see :class:`StreamRedactor`).
    """

    def __init__(
        self,
        secrets: Iterable[str] = (),
        *,
        engine: Engine = "auto",
        hs_min: int = HS_MIN,
        memo: int = MEMO,
    ) -> None:
        values = sorted({s for s in secrets if len(s) >= MIN_SECRET}, key=len, reverse=True)
        self._values: tuple[str, ...] = tuple(values)
        known = [f"(?P<known>{'|'.join(re.escape(v) for v in values)})"] if values else []
        # Every match starts with one of these characters: checking them first skips most
        # positions fast; then a rule's literal lead, where it has one, so a common letter
        # (the e of a JSON web token's eyJ) does not send every position to every rule.
        every = {*"".join(r.first for r in RULES), *(v[0] for v in values)}
        could_first = "[" + re.escape("".join(sorted(every))) + "]"
        starts = {*"".join(r.first for r in RULES if not r.lead), *(v[0] for v in values)}
        precise = "[" + re.escape("".join(sorted(starts))) + "]" + "".join(
            f"|{r.lead}" for r in RULES if r.lead)
        alternatives = known + [f"(?P<{r.name}>{r.pattern})" for r in RULES]
        self._body = f"(?={could_first})(?=(?:{precise}))(?:{'|'.join(alternatives)})"
        self._full = re.compile(self._body)
        # What could still become a match needs every first character (a lead is not
        # whole at the buffer's end), then some rule's opening (its first characters); the
        # rules are grouped by first character so one test skips a group. Only where a match
        # of it starts matters, so the order of the alternatives does not. A known value could
        # be starting where the rest of the buffer is a proper prefix of it.
        groups: dict[str, list[_Rule]] = {}
        for rule in RULES:
            groups.setdefault(rule.first, []).append(rule)
        branches = [
            f"(?=[{re.escape(first)}])(?=(?:{'|'.join(r.opening for r in rules)}))"
            f"(?:{'|'.join(r.could for r in rules)})"
            for first, rules in groups.items()
        ]
        short = [v for v in values if len(v) <= _VALUE_IN_PATTERN]
        branches += [re.escape(v[0]) + _prefix(_lit(v[1:-1])) for v in short]
        self._could = re.compile(f"(?={could_first})(?:{'|'.join(branches)})\\Z")
        self._long_values = tuple(v for v in values if len(v) > _VALUE_IN_PATTERN)
        self._read = max([_READ, *map(len, values)]) + 2
        self._windows: dict[int, re.Pattern[str]] = {}
        if engine not in ("auto", "re", "hyperscan"):
            raise ValueError(f"unknown engine {engine!r}")
        self._scanner = None if engine == "re" else _scanner(self._values)
        if engine == "hyperscan" and self._scanner is None:
            raise RuntimeError("the hyperscan engine is not available")
        self.engine: str = "re" if self._scanner is None else "hyperscan"
        """The engine in use: ``"hyperscan"`` or ``"re"``."""
        self._hs_min = hs_min
        self._memo_size = memo
        self._memo: dict[tuple[str, str, str], tuple[str, str, str]] = {}

    def stream(self) -> StreamRedactor:
        """A fresh streaming redactor with this redactor's secrets."""
        return StreamRedactor(self)

    def text(self, value: str) -> str:
        """``value`` with every secret masked: the same as feeding it whole to a fresh stream and
        flushing (nothing needs holding back, so it is scanned in one pass)."""
        return StreamRedactor(self)._drain(value, final=True)

    def value(self, data: Any) -> Any:
        """A JSON-like value (dicts, lists, strings) with every string masked."""
        if isinstance(data, str):
            return self.text(data)
        if isinstance(data, dict):
            return {k: self.value(v) for k, v in data.items()}
        if isinstance(data, list):
            return [self.value(v) for v in data]
        return data

    def _window(self, width: int) -> tuple[re.Pattern[str], int]:
        """A pattern and its ``size`` (at least ``width``): matched at ``pos``, it finds the
        scanner's leftmost match starting in ``pos .. pos + size``, the very match a search
        from ``pos`` would find (its rule group starts where that match starts)."""
        size = 0
        while size < width:
            size = size * 2 or 1
        pattern = self._windows.get(size)
        if pattern is None:
            pattern = self._windows[size] = re.compile(f"(?s:.){{0,{size}}}?(?:{self._body})")
        return pattern, size

    def _value_hold(
        self, values: Sequence[str], work: str, lo: int, end: int, found: int | None
    ) -> int | None:
        """``found`` or an earlier position >= ``lo`` where one of the known ``values`` could
        be starting (``work[p:end]`` is a proper prefix of it)."""
        for value in values:
            first = value[0]
            p = work.find(first, max(lo, end - len(value) + 1), end)
            while p != -1 and (found is None or p < found):
                if value.startswith(work[p:end]):
                    found = p
                    break
                p = work.find(first, p + 1, end)
        return found


class _Located:
    """The scanner's two questions about one text, answered from one hyperscan scan of it.

    :meth:`search` and :meth:`could_start` give exactly what ``Redactor._full.search`` and
    ``StreamRedactor._could_start`` give (the ``re`` engine), running ``re`` only where
    hyperscan hit. Each must be called with non-decreasing positions (the drain does).
    """

    def __init__(self, redactor: Redactor, work: str, heads: bool) -> None:
        assert redactor._scanner is not None
        self._windows, self._heads = redactor._scanner.scan(work, heads)
        self._r = redactor
        self._next = 0  # windows before this one are done with
        self._clear = 0  # no match starts before this position (from the windows done)

    def search(self, work: str, q: int, end: int) -> re.Match[str] | None:
        """The leftmost match starting at ``q`` or later, as ``_full.search(work, q, end)``."""
        clear = max(self._clear, q)
        windows = self._windows
        i = self._next
        while i < len(windows):
            start, stop = windows[i]
            if stop <= clear:  # every match start a window covers is before its stop
                i += 1
                continue
            start = max(start, clear)
            pattern, size = self._r._window(stop - 1 - start)
            m = pattern.match(work, start, end)
            if m is not None:
                self._next, self._clear = i, m.start(m.lastgroup or 0)
                return m
            clear = start + size + 1
            i += 1
        self._next, self._clear = i, clear
        return None

    def could_start(self, work: str, start: int, end: int) -> int | None:
        """The leftmost position >= ``start`` from which a match could still read past
        ``end``, as ``StreamRedactor._could_start``: a text a rule could still match from
        there is either in the last :data:`_HEAD` characters or begins with a head hit."""
        r = self._r
        lo = max(start, end - r._read)
        tail = max(lo, end - _HEAD)
        found: int | None = None
        heads = self._heads
        for i, p in enumerate(heads):
            if p >= tail:
                break
            if p < lo:
                continue
            if (len(heads) - i) * _DENSE >= end - p:  # one search settles the rest, tail too
                tail = p
                break
            if r._could.match(work, p, end):
                found = p
                break
        if found is None:
            m = r._could.search(work, tail, end)
            if m is not None:
                found = m.start()
        return r._value_hold(r._values, work, lo, end, found)


class StreamRedactor:
    """Masks secrets in text that arrives in pieces, holding back as little as possible.

    Contract: ``feed(delta)`` returns the masked text that is now safe to emit; ``flush()``
    returns the masked remainder at the end of the stream (the stream is then reset). For any
    split of a text into deltas the concatenated outputs equal ``Redactor.text(text)``. Only a
    tail that could still be (part of) a secret is held: a prefix of a known secret value, or
    text on which a credential pattern's match could still change with more input. The
    hold-back never exceeds :data:`CAP` characters (or the longest configured secret), and
    each delta costs work proportional to the delta plus the held tail, never the emitted text.
    Both engines give the same outputs, delta by delta.

    A step (one delta, when no capped match is being swallowed) depends only on the held tail,
    the delta and the class of the character before them (an ASCII letter or digit, another
    word character, or neither: all the patterns ask of it), so the redactor remembers the
    results of short steps (at most ``_MEMO_TEXT`` characters) for all its streams: a model's
    deltas are tokens of a fixed vocabulary and recur. The memory holds those short texts (held
    tails included) until it fills and is cleared.
    """

    def __init__(self, redactor: Redactor) -> None:
        self._r = redactor
        self._buf = ""  # text received and not yet emitted; the scan resumes at its start
        self._ctx = ""  # the character before the buffer (for \b and lookbehinds)
        self._cont: str | None = None  # rule whose capped match is still being swallowed
        self._memo = redactor._memo  # short steps' results, shared by the redactor's streams

    @property
    def held(self) -> int:
        """How many received characters are held back (not yet emitted)."""
        return len(self._buf)

    def feed(self, text: str) -> str:
        """Take the next delta; return the masked text that is now safe to emit."""
        if self._cont is None:
            key = (self._ctx, self._buf, text)
            step = self._memo.get(key)  # only short steps are there
            if step is not None:
                out, self._ctx, self._buf = step
                return out
            if text and len(text) + len(self._buf) <= _MEMO_TEXT:
                out = self._drain(text, final=False)
                # No capped match fits in a short step: ``_cont`` is still None.
                memo, size = self._memo, self._r._memo_size
                if size:
                    if len(memo) >= size:
                        memo.clear()
                    memo[key] = (out, self._ctx, self._buf)
                return out
        if not text:
            return ""
        return self._drain(text, final=False)

    def flush(self) -> str:
        """End of stream: return the masked remainder and reset for a new stream."""
        out = self._drain("", final=True)
        self._buf, self._ctx, self._cont = "", "", None
        return out

    def _could_start(self, work: str, start: int, end: int) -> int | None:
        """Leftmost position >= ``start`` from which a match could still read past ``end``."""
        r = self._r
        lo = start if end - r._read <= start else end - r._read
        m = r._could.search(work, lo, end)
        found = None if m is None else m.start()
        return r._value_hold(r._long_values, work, lo, end, found) if r._long_values else found

    def _drain(self, text: str, final: bool) -> str:
        work = self._ctx + self._buf + text
        end = len(work)
        q = len(self._ctx)
        r = self._r
        search: Callable[[str, int, int], re.Match[str] | None] = r._full.search
        could_start = self._could_start
        hold: int | None = None
        hold_from = -1  # the position `hold` was computed from
        # Hyperscan for long new text. A held buffer starts where a match could be starting,
        # so re usually settles it at its first position: no need to rescan it per delta.
        if r._scanner is not None and (end - q if final else len(text)) >= r._hs_min:
            located = _Located(r, work, heads=not final)
            search, could_start = located.search, located.could_start
        elif self._cont is None and not final:
            # The loop's first step, straight: most deltas have no match before the hold.
            hold, hold_from = could_start(work, q, end), q
            m = search(work, q, end) if hold is None or hold > q else None
            if m is None or (hold is not None and m.start() >= hold):
                stop = end if hold is None else hold
                self._ctx = _context(work[stop - 1]) if stop > 0 else ""
                self._buf = work[stop:]
                return work[q:stop]
        out: list[str] = []
        while q < end:
            if self._cont is not None:
                if not final and _CONT_COULD[self._cont].fullmatch(work, q, end):
                    break
                c = _CONT[self._cont].match(work, q, end)
                assert c is not None  # continuation patterns match the empty string
                if c.group(f"{self._cont}_cap") is None:
                    self._cont = None
                q = c.end()
                continue
            if not final and (hold_from < 0 or (hold is not None and hold < q)):
                hold, hold_from = could_start(work, q, end), q
            # A match is only taken if it starts before the hold: none can when it is here.
            m = search(work, q, end) if hold is None or hold > q else None
            if m is not None:
                name = m.lastgroup or ""
                start = m.start(name)
                if hold is None or start < hold:
                    groups = m.groupdict()
                    out.append(work[q:start])
                    out.append((groups.get(f"{name}_pre") or "") + MASK)
                    out.append(groups.get(f"{name}_post") or "")
                    if groups.get(f"{name}_cap") is not None:
                        self._cont = name
                    q = m.end()
                    continue
            stop = end if hold is None else hold
            out.append(work[q:stop])
            q = stop
            break
        self._ctx = _context(work[q - 1]) if q > 0 else ""
        self._buf = work[q:]
        return "".join(out)


def _context_of(ch: str) -> str:
    if ch.isascii():
        return "a" if ch.isalnum() else "_" if ch == "_" else " "
    return "_" if ch.isalnum() else " "


_CONTEXTS = {chr(i): _context_of(chr(i)) for i in range(128)}


def _context(ch: str) -> str:
    """A stand-in for ``ch`` as the character before a buffer. The patterns only ask of it
    whether it is an ASCII letter or digit (``(?<![A-Za-z0-9])``) and whether it is a word
    character (``\\b``), so one representative per answer keeps every result."""
    return _CONTEXTS.get(ch) or _context_of(ch)
