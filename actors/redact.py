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
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

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
    options = ["".join(_full(p) for p in seq[:i]) + _prefix(seq[i]) for i in range(len(seq))]
    return "(?:" + "|".join(options) + ")"


@dataclass(frozen=True)
class _Rule:
    """One credential shape.

    ``pattern`` is the match (it may define ``<name>_pre`` and ``<name>_post`` groups, kept
    around the mask, and ``<name>_cap``, set when the match stopped at the cap). ``could``
    matches every text (from the match start to the end of the buffer) on which matching might
    still read past the buffer's end. ``cont``/``cont_could`` are the same for the remainder of
    a capped match, which is swallowed.
    """

    name: str
    first: str  # every character a match can start with
    pattern: str
    could: str
    cont: str | None = None
    cont_could: str | None = None
    lead: str = ""  # what every match starts with, more precisely than ``first`` (a regex)


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
    _Rule(
        "aws",
        "A",
        "\\b(?:AKIA|ASIA)[0-9A-Z]{16}\\b",
        "\\b" + _prefix_seq([_alt([_lit("AKIA")], [_lit("ASIA")]), _cls("[0-9A-Z]", 16, 16)]),
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
    _token("slack_app", "\\b", [_lit("xapp-")], "[A-Za-z0-9\\-]", 10, "\\b"),
    _Rule("jwt", "e", "\\b" + "".join(_full(p) for p in _JWT), "\\b" + _prefix_seq(_JWT),
          lead="eyJ"),
    _Rule(
        "private_key",
        "-",
        "".join(_full(p) for p in _PK_BEGIN) + _PK_BODY,
        f"(?:{_prefix_seq(_PK_BEGIN)}|{''.join(_full(p) for p in _PK_BEGIN)}{_PK_BODY_COULD})",
        _PK_BODY,
        _PK_BODY_COULD,
    ),
    _Rule(
        "url_password",
        ":",
        f"(?P<url_password_pre>{''.join(_full(p) for p in _URL_HEAD)})"
        f"[^\\s/@]{{1,{_RUN}}}(?P<url_password_post>@)",
        _prefix_seq([*_URL_HEAD, _cls("[^\\s/@]", 0, _RUN), _lit("@")]),
    ),
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
    _Rule(
        "bearer",
        "bB",
        f"(?P<bearer_pre>\\b(?i:bearer)\\s{{1,8}})"
        f"(?:{_BEARER_CLS}{{{_RUN}}}(?P<bearer_cap>)|{_BEARER_CLS}{{16,{_RUN - 1}}}={{0,2}})",
        "\\b"
        + _prefix_seq(
            [_lit("bearer", True), _cls("\\s", 1, 8), _cls(_BEARER_CLS, 0, _RUN), _cls("=", 0, 2)]
        ),
        f"(?:{_BEARER_CLS}{{{_RUN}}}(?P<bearer_cap>)|{_BEARER_CLS}{{0,{_RUN - 1}}})",
        f"{_BEARER_CLS}{{0,{_RUN}}}",
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


class Redactor:
    """Masks known secrets and credential-looking text."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
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
        self._full = re.compile(
            f"(?={could_first})(?=(?:{precise}))(?:{'|'.join(alternatives)})")
        # What could still become a match needs every first character (a lead is not
        # whole at the buffer's end).
        self._could = re.compile(
            f"(?={could_first})(?:{'|'.join(r.could for r in RULES)})\\Z")
        self._read = max([_READ, *map(len, values)]) + 2

    def stream(self) -> StreamRedactor:
        """A fresh streaming redactor with this redactor's secrets."""
        return StreamRedactor(self)

    def text(self, value: str) -> str:
        """``value`` with every secret masked."""
        stream = StreamRedactor(self)
        return stream.feed(value) + stream.flush()

    def value(self, data: Any) -> Any:
        """A JSON-like value (dicts, lists, strings) with every string masked."""
        if isinstance(data, str):
            return self.text(data)
        if isinstance(data, dict):
            return {k: self.value(v) for k, v in data.items()}
        if isinstance(data, list):
            return [self.value(v) for v in data]
        return data


class StreamRedactor:
    """Masks secrets in text that arrives in pieces, holding back as little as possible.

    Contract: ``feed(delta)`` returns the masked text that is now safe to emit; ``flush()``
    returns the masked remainder at the end of the stream (the stream is then reset). For any
    split of a text into deltas the concatenated outputs equal ``Redactor.text(text)``. Only a
    tail that could still be (part of) a secret is held: a prefix of a known secret value, or
    text on which a credential pattern's match could still change with more input. The
    hold-back never exceeds :data:`CAP` characters (or the longest configured secret), and
    each delta costs work proportional to the delta plus the held tail, never the emitted text.
    """

    def __init__(self, redactor: Redactor) -> None:
        self._r = redactor
        self._buf = ""  # text received and not yet emitted; the scan resumes at its start
        self._ctx = ""  # the character before the buffer (for \b and lookbehinds)
        self._cont: str | None = None  # rule whose capped match is still being swallowed

    @property
    def held(self) -> int:
        """How many received characters are held back (not yet emitted)."""
        return len(self._buf)

    def feed(self, text: str) -> str:
        """Take the next delta; return the masked text that is now safe to emit."""
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
        lo = max(start, end - self._r._read)
        found: int | None = None
        m = self._r._could.search(work, lo, end)
        if m is not None and m.start() < end:
            found = m.start()
        for value in self._r._values:
            first = value[0]
            p = work.find(first, max(lo, end - len(value) + 1), end)
            while p != -1 and (found is None or p < found):
                if value.startswith(work[p:end]):
                    found = p
                    break
                p = work.find(first, p + 1, end)
        return found

    def _drain(self, text: str, final: bool) -> str:
        work = self._ctx + self._buf + text
        end = len(work)
        q = len(self._ctx)
        out: list[str] = []
        hold: int | None = None
        hold_from = -1  # the position `hold` was computed from
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
                hold, hold_from = self._could_start(work, q, end), q
            m = self._r._full.search(work, q, end)
            if m is not None and (hold is None or m.start() < hold):
                name = m.lastgroup or ""
                groups = m.groupdict()
                out.append(work[q : m.start()])
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
        self._ctx = work[q - 1] if q > 0 else ""
        self._buf = work[q:]
        return "".join(out)
