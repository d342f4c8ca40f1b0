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

The scanner works like ``re.sub`` over one alternation of every rule (the credential shapes
of :mod:`actors.model.secret_rules`, written in the vocabulary of
:mod:`actors.model.secret_patterns`; leftmost match wins; at one position the first rule in
``RULES`` order, known values first). Every rule reads at most
:data:`~actors.model.secret_rules.CAP` characters from where it starts, which bounds the
hold-back: a match that would run longer (a private-key block without its END line, a token
of thousands of characters) is masked in full up to the cap and then the rest of it is
swallowed, piece by piece, until it ends.

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
from typing import Any, Literal

from tether.actors.model.redact_scan import Locator, Scanner, build, literal
from tether.actors.model.secret_patterns import HEAD, lit, prefix
from tether.actors.model.secret_rules import CAP, RULES, Rule

MASK = "[REDACTED]"

MIN_SECRET = 6
"""Known secrets shorter than this are not masked (they would mask ordinary words)."""

HS_MIN = 24
"""Below this many characters ``re`` alone scans, even when hyperscan is available: a text, a
stream's delta, or at a flush what the stream held. (A delta onto a long held tail stays on
``re`` too: the tail starts where a match could be starting, so ``re`` settles it there.)"""

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
        groups: dict[str, list[Rule]] = {}
        for rule in RULES:
            groups.setdefault(rule.first, []).append(rule)
        branches = [
            f"(?=[{re.escape(first)}])(?=(?:{'|'.join(r.opening for r in rules)}))"
            f"(?:{'|'.join(r.could for r in rules)})"
            for first, rules in groups.items()
        ]
        short = [v for v in values if len(v) <= _VALUE_IN_PATTERN]
        branches += [re.escape(v[0]) + prefix(lit(v[1:-1])) for v in short]
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
        there is either in the last :data:`HEAD` characters or begins with a head hit."""
        r = self._r
        lo = max(start, end - r._read)
        tail = max(lo, end - HEAD)
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
