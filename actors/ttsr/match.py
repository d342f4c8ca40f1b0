r"""Incremental matching of TTSR rules over a streamed model reply.

One buffer per stream source and content block (the reply's text, its thinking, each
tool call's arguments). Two engines serve the rules:

* **hyperscan** (when the ``hyperscan`` package is installed and can compile the
  trigger): every such rule is compiled into one streaming database; each delta is
  scanned once, in a single linear pass over the delta, whatever the number of rules and
  however long the reply. Matches spanning deltas are found without keeping the text.
  ``$`` means the end of the block: those matches are reported when the block ends.
* **re** (the fallback, for triggers hyperscan cannot compile, such as backreferences
  or lookbehinds): each rule searches the last ``window`` characters before the delta
  plus the delta, so the work per delta is bounded. A match longer than ``window``
  characters is not guaranteed to be found, and ``$`` means the end of what has arrived.

Triggers use Python's syntax. One difference remains between the engines: on hyperscan
``\w``, ``\b``, ``\d`` and ``\s`` are ASCII classes (its streaming mode has no Unicode word
boundary), while the ``re`` engine reads them as Python does, Unicode-aware. Literal
non-ASCII text, caseless or not, matches the same in both.

A match reports its rule, the source, the block and ``offset``: where the match ends, in
characters from the start of that block. Each rule is reported at most once per buffer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from tether.actors.ttsr.rules import Rule, compile_trigger

DEFAULT_WINDOW = 256
"""Characters the ``re`` engine looks back, and so the longest match it is sure to find."""

_LAST_BYTES = 16
"""Bytes kept of each hyperscan buffer's end, to place end-of-block matches exactly."""

_UNLIKE_PYTHON = re.compile(r"\\Z|\{,|\[:")
r"""Syntax hyperscan reads differently from Python (``\Z``, ``x{,n}``, POSIX classes such
as ``[[:alpha:]]``): such triggers go to the ``re`` engine so both engines mean the same
thing."""

_CONTEXT = 32
r"""Characters kept before each ``re`` scan region so ``^``, ``\b`` and short lookbehinds
see the real preceding text instead of a cut-off string start."""


class Match(msgspec.Struct, frozen=True, kw_only=True):
    """A rule that matched in one buffer; ``offset`` is the match's end (characters)."""

    rule: Rule
    source: str
    block: int
    offset: int


def _load_hyperscan() -> Any:
    try:
        import hyperscan
    except ImportError:  # the fallback engine serves every rule
        return None
    return hyperscan


@dataclass
class _Buffer:
    source: str
    block: int
    eligible: frozenset[int]
    chars: int = 0
    raw_bytes: int = 0
    stream: Any = None
    scan: Any = None
    last_bytes: bytes = b""
    on_match: Any = None
    tail: str = ""
    tail_base: int = 0
    reported: set[int] = field(default_factory=set)
    pending: list[tuple[int, int]] = field(default_factory=list)


class StreamMatcher:
    """Matches a fixed rule list over streamed deltas; see the module docstring."""

    def __init__(
        self, rules: list[Rule], window: int = DEFAULT_WINDOW, use_hyperscan: bool = True
    ) -> None:
        """Compile every trigger (ValueError for one that does not compile, for a window
        below 1 or for two rules with one name)."""
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window}")
        names = [r.name for r in rules]
        if len(set(names)) != len(names):
            raise ValueError("duplicate rule names")
        self.rules = list(rules)
        self.window = window
        self.scanned_chars = 0
        """Characters searched by the ``re`` engine, summed over rules and deltas."""
        self._patterns = [compile_trigger(r.trigger) for r in self.rules]
        self._active: set[int] = set(range(len(self.rules)))
        self._buffers: dict[tuple[str, int], _Buffer] = {}
        self._hs_db: Any = None
        self._hs: Any = _load_hyperscan() if use_hyperscan else None
        self.engines: dict[str, str] = {r.name: "re" for r in self.rules}
        self._hs_rules: set[int] = set()
        if self._hs is not None:
            self._compile_hyperscan()
        self._re_rules = [i for i in range(len(self.rules)) if i not in self._hs_rules]
        self._found: list[tuple[_Buffer, int, int]] = []

    # --- engines ------------------------------------------------------------------------

    def _compile_hyperscan(self) -> None:
        hs = self._hs
        flags = hs.HS_FLAG_UTF8 | hs.HS_FLAG_SINGLEMATCH
        usable: list[int] = []
        for index, pattern in enumerate(self._patterns):
            if _UNLIKE_PYTHON.search(pattern.pattern):
                continue
            try:  # one by one first, so one unsupported trigger only costs its own rule
                probe = hs.Database(mode=hs.HS_MODE_STREAM)
                probe.compile(
                    expressions=[_hs_expression(pattern)], ids=[index], elements=1,
                    flags=[flags | _hs_flags(hs, pattern)],
                )
            except Exception:
                continue
            usable.append(index)
        if not usable:
            return
        db = hs.Database(mode=hs.HS_MODE_STREAM)
        db.compile(
            expressions=[_hs_expression(self._patterns[i]) for i in usable],
            ids=usable,
            elements=len(usable),
            flags=[flags | _hs_flags(hs, self._patterns[i]) for i in usable],
        )
        self._hs_db = db
        self._hs_rules = set(usable)
        for index in usable:
            self.engines[self.rules[index].name] = "hyperscan"

    # --- state --------------------------------------------------------------------------

    def set_active(self, names: Iterable[str]) -> None:
        """Only these rules are reported from now on (the injection policy decides)."""
        wanted = set(names)
        self._active = {i for i, r in enumerate(self.rules) if r.name in wanted}

    def reset(self) -> None:
        """A new model call: close every buffer (nothing carries over)."""
        for buf in self._buffers.values():
            if buf.stream is not None:
                buf.stream.close()
        self._buffers.clear()
        self._found.clear()  # end-of-block matches reported by closing: not wanted now

    # --- matching -----------------------------------------------------------------------

    def feed(self, source: str, block: int, text: str) -> list[Match]:
        """Append ``text`` to the buffer of ``(source, block)``; return the rules that
        newly match there (active ones whose scope watches the source)."""
        if not text:
            return []
        buf = self._buffers.get((source, block)) or self._open(source, block)
        found: list[Match] = []
        scan = buf.scan
        if scan is not None:  # the hot path: one native call per delta
            data = text.encode()
            scan(data)
            if self._found:
                for _, index, end_byte in self._found:
                    offset = buf.chars + len(
                        data[: end_byte - buf.raw_bytes].decode("utf-8", "ignore")
                    )
                    self._report(buf, index, offset, found)
                self._found.clear()
            buf.raw_bytes += len(data)
            buf.last_bytes = (buf.last_bytes + data)[-_LAST_BYTES:]
        if self._re_rules:
            self._scan_re(buf, text, found)
        buf.chars += len(text)
        return found

    def end(self, source: str, block: int) -> list[Match]:
        """The block is complete: report matches that need its end (``$``)."""
        buf = self._buffers.get((source, block))
        if buf is None or buf.stream is None:
            return []
        self._found.clear()
        buf.stream.close()
        buf.stream = buf.scan = None
        found: list[Match] = []
        for _, index, end_byte in self._found:
            # ``$`` may end a match just before a final newline: count back from the end.
            after = buf.last_bytes[len(buf.last_bytes) - (buf.raw_bytes - end_byte):]
            offset = buf.chars - len(after.decode("utf-8", "ignore"))
            self._report(buf, index, offset, found)
        self._found.clear()
        return found

    def end_all(self) -> list[Match]:
        """Every open block is complete (the model's message ended)."""
        found: list[Match] = []
        for source, block in list(self._buffers):
            found.extend(self.end(source, block))
        return found

    def _open(self, source: str, block: int) -> _Buffer:
        eligible = frozenset(i for i, r in enumerate(self.rules) if r.watches(source))
        buf = _Buffer(source, block, eligible)
        if self._hs_db is not None and eligible & self._hs_rules:
            sink = self._found

            def on_match(index: int, _from: int, to: int, _flags: int, _ctx: Any) -> None:
                sink.append((buf, index, to))

            # The binding does not keep the callback alive: the buffer must (else a crash).
            buf.on_match = on_match
            buf.stream = self._hs_db.stream(match_event_handler=on_match)
            buf.stream.__enter__()
            buf.scan = buf.stream.scan
        self._buffers[(source, block)] = buf
        return buf

    def _report(self, buf: _Buffer, index: int, offset: int, out: list[Match]) -> None:
        if index in buf.reported or index not in buf.eligible or index not in self._active:
            return
        buf.reported.add(index)
        out.append(Match(rule=self.rules[index], source=buf.source, block=buf.block,
                         offset=offset))

    def _scan_re(self, buf: _Buffer, text: str, out: list[Match]) -> None:
        combined = buf.tail + text
        origin = buf.tail_base
        scan_from = max(0, buf.chars - self.window) - origin
        keep = self.window + _CONTEXT
        total = buf.chars + len(text)
        if len(combined) > keep:
            buf.tail = combined[-keep:]
            buf.tail_base = total - keep
        else:
            buf.tail = combined
        for index in self._re_rules:
            if index in buf.reported or index not in buf.eligible or index not in self._active:
                continue
            self.scanned_chars += len(combined) - scan_from
            end = _first_end(self._patterns[index], combined, scan_from)
            if end is not None:
                self._report(buf, index, origin + end, out)


def _first_end(pattern: re.Pattern[str], text: str, pos: int) -> int | None:
    for found in pattern.finditer(text, pos):
        if found.end() > found.start():
            return found.end()
    return None


def _hs_expression(pattern: re.Pattern[str]) -> bytes:
    return pattern.pattern.encode()


def _hs_flags(hs: Any, pattern: re.Pattern[str]) -> int:
    flags = 0
    if pattern.flags & re.IGNORECASE:
        flags |= hs.HS_FLAG_CASELESS
    if pattern.flags & re.DOTALL:
        flags |= hs.HS_FLAG_DOTALL
    if pattern.flags & re.MULTILINE:
        flags |= hs.HS_FLAG_MULTILINE
    return flags


