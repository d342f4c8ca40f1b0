"""Strict JSON encoding and decoding of bus messages.

Decoding never raises anything but :class:`DecodeFailure`, whose ``reason`` is a sentence
fit for a dead letter or an error reply. Before msgspec parses a byte, the payload passes
three checks, each cheap and none recursive:

* size: a payload over ``max_size`` bytes (default :data:`MAX_PAYLOAD`, the NATS
  server's default maximum) is refused unread;
* UTF-8: JSON is UTF-8 (RFC 8259), so bytes that are not are refused wherever they are,
  also in a field msgspec would skip unread;
* depth: arrays and objects nested deeper than ``max_depth`` (default :data:`MAX_DEPTH`)
  are refused (so are brackets that do not balance, once there are more openers than
  that), so no payload makes the parser recurse deeper (see
  :func:`nesting_depth_exceeds`).

Whatever still fails in msgspec (wrong types, unknown tags, malformed JSON) is caught
too, down to any exception at all.
"""

from __future__ import annotations

from array import array
from itertools import accumulate
from typing import Any, Generic, TypeVar

import msgspec

T = TypeVar("T")

MAX_PAYLOAD = 1024 * 1024
"""Largest payload an actor accepts (bytes); larger ones are dead-lettered unread."""

MAX_DEPTH = 64
"""Deepest nesting of arrays and objects a decoder accepts (the top-level object is 1)."""

MAX_REASON = 400
"""Longest ``DecodeFailure.reason`` (characters)."""
_REASON_HEAD, _REASON_TAIL = 280, 80

_encoder = msgspec.json.Encoder()

_NOT_MARKS = bytes(b for b in range(256) if b not in b'"[]{}')
"""Every byte but quotes and brackets (deleted to get a payload's skeleton)."""
_OPENERS_CLOSERS = bytes.maketrans(b"[{]}", b"(())")
_STEPS = bytes.maketrans(b"()", b"\x01\xff")
"""An opener as +1 and a closer as -1 (signed bytes) for running sums."""
_UNBALANCED = "not valid JSON: brackets do not balance"
_COUNT_BELOW = 4096
"""Payloads up to this size have their brackets counted outright (cheaper than searching)."""


class DecodeFailure(Exception):
    """A payload that is not a valid message for the subject; ``reason`` says why, in at
    most :data:`MAX_REASON` characters: msgspec quotes the value it refuses (a tag, an
    enum value), and a reason as long as the payload would make the dead letter and the
    error reply carrying it too big to publish, so neither would ever be sent. A longer
    reason keeps its start and its end (where msgspec names the field)."""

    def __init__(self, reason: str) -> None:
        if len(reason) > MAX_REASON:
            left_out = len(reason) - _REASON_HEAD - _REASON_TAIL
            reason = (f"{reason[:_REASON_HEAD]} ... ({left_out} characters left out) ... "
                      f"{reason[-_REASON_TAIL:]}")
        super().__init__(reason)
        self.reason = reason


def without_lone_surrogates(text: str) -> str:
    """``text`` with every lone surrogate (which JSON's ``\\ud800`` escapes can give, and
    which no encoding to UTF-8 accepts: a message holding one can be neither sent nor
    stored) replaced by U+FFFD; pairs are joined. ``text`` itself when it has none."""
    if text.isascii():  # most text, on the stream's path: no copy made
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def encode(message: Any) -> bytes:
    """Encode a Struct (or any msgspec-encodable value) as compact JSON."""
    return _encoder.encode(message)


def _opens_more_than(data: bytes, limit: int) -> bool:
    """Whether ``data`` holds more than ``limit`` bytes ``[`` and ``{`` (anywhere, strings
    included): the prefilter that lets most messages skip the depth scan. Small payloads
    are counted; large ones searched at memchr speed up to the ``limit + 1``-th."""
    if len(data) <= _COUNT_BELOW:
        return data.count(b"[") + data.count(b"{") > limit
    seen = 0
    for opener in (b"[", b"{"):
        at = data.find(opener)
        while at >= 0:
            seen += 1
            if seen > limit:
                return True
            at = data.find(opener, at + 1)
    return False


def _skeleton(data: bytes) -> bytes:
    """The brackets of ``data`` outside its strings, ``(`` for ``[``/``{`` and ``)`` for
    ``]``/``}``: escapes dropped (a doubled backslash first, then an escaped quote, as a
    JSON lexer pairs them), then every byte but quotes and brackets, then the strings
    (every other quote-delimited run). Each step is one C pass, and the escapes are only
    looked at when some quote follows a backslash."""
    if b"\\" in data and b'\\"' in data:  # else every quote delimits a string
        if b"\\\\" in data:
            data = data.replace(b"\\\\", b"")
        data = data.replace(b'\\"', b"")
    marks = data.translate(None, _NOT_MARKS)
    if b'"' not in marks:
        return marks.translate(_OPENERS_CLOSERS)
    # Most strings hold no bracket and come out as adjacent quotes, as does the gap
    # between two strings: dropping those keeps every other byte in or out of a string as
    # it was, and leaves the split below few pieces.
    marks = marks.replace(b'""', b"")
    return b"".join(marks.split(b'"')[::2]).translate(_OPENERS_CLOSERS)


def nesting_depth_exceeds(data: bytes, limit: int) -> str:
    """Why the JSON in ``data`` nests arrays and objects deeper than ``limit``, or "".

    Only brackets outside strings count (a quote escaped in a string does not end it).
    "" means that no prefix of ``data`` has more than ``limit`` of them open, so a parser
    reading ``data`` never nests deeper, wherever the JSON turns out to be invalid.
    Brackets that balance and nest deeper always get ``nested deeper than <limit>``.
    Brackets that do not balance (never valid JSON) get that reason, ``not valid JSON:
    brackets do not balance``, or "" when there are too few to go deep (msgspec then
    refuses the payload). Never recurses; every pass over the bytes runs in C:

    1. at most ``limit`` opening brackets in all: "" at once (most messages stop here);
    2. the bracket skeleton (see :func:`_skeleton`), e.g. ``(()(()))`` for
       ``{"a": {}, "b": [[1], "]"]}``;
    3. ``limit + 1`` openers in a row are too deep at once (``[[[[...`` of any length);
    4. rounds remove every innermost ``()``: a pair of nesting height h is gone after
       h rounds, so a skeleton emptied within ``limit`` rounds was at most that deep,
       and a ``()`` still there after ``limit`` rounds is a pair nested deeper; nothing
       but unmatched brackets left means they do not balance. When a round no
       longer shrinks the skeleton by a quarter (many deep pairs side by side), the depth
       left is measured exactly in one pass of running sums instead, so the rounds
       never cost more than five passes over the skeleton, whatever the input.
    """
    if not _opens_more_than(data, limit):
        return ""
    return _depth_reason(data, limit)


def _depth_reason(data: bytes, limit: int) -> str:
    """Steps 2 to 4 of :func:`nesting_depth_exceeds` (for a payload past the prefilter)."""
    skeleton = _skeleton(data)
    too_deep = f"nested deeper than {limit}"
    if b"(" * (limit + 1) in skeleton:
        return too_deep
    rounds = 0
    while skeleton:
        reduced = skeleton.replace(b"()", b"")
        if len(reduced) == len(skeleton):  # nothing left but unmatched brackets
            return too_deep if reduced.count(b"(") > limit else _UNBALANCED
        if rounds == limit:  # a pair of height limit + 1
            return too_deep
        rounds += 1
        slow = len(reduced) * 4 > len(skeleton) * 3
        skeleton = reduced
        if slow:
            break
    if not skeleton:
        return ""
    depths = list(accumulate(array("b", skeleton.translate(_STEPS))))
    if max(depths) + rounds > limit:
        return too_deep
    return _UNBALANCED if depths[-1] != 0 or min(depths) < 0 else ""


class Decoder(Generic[T]):
    """A strict decoder for one message type or tagged union.

    ``max_size`` (bytes) and ``max_depth`` (levels of arrays and objects) bound what it
    parses at all; both are checked before msgspec sees the payload.
    """

    def __init__(
        self, kind: Any, max_size: int = MAX_PAYLOAD, max_depth: int = MAX_DEPTH
    ) -> None:
        if max_depth < 1:
            raise ValueError(f"max_depth must be at least 1, got {max_depth}")
        self._decoder: msgspec.json.Decoder[T] = msgspec.json.Decoder(kind)
        self.max_size = max_size
        self.max_depth = max_depth

    def decode(self, data: bytes) -> T:
        """Decode ``data`` or raise DecodeFailure with a readable reason (and nothing else)."""
        if len(data) > self.max_size:
            raise DecodeFailure(f"payload of {len(data)} bytes exceeds {self.max_size}")
        try:
            if not data.isascii():
                data.decode("utf-8")  # anywhere, also in fields msgspec would skip
            if _opens_more_than(data, self.max_depth):
                too_deep = _depth_reason(data, self.max_depth)
                if too_deep:
                    raise DecodeFailure(too_deep)
            return self._decoder.decode(data)
        except DecodeFailure:
            raise
        except msgspec.ValidationError as exc:
            raise DecodeFailure(f"invalid message: {exc}") from None
        except msgspec.DecodeError as exc:
            raise DecodeFailure(f"not valid JSON: {exc}") from None
        except UnicodeDecodeError as exc:  # JSON text is UTF-8 (RFC 8259), all of it
            raise DecodeFailure(f"not valid JSON: invalid UTF-8 at byte {exc.start}") from None
        except RecursionError:  # cannot happen below max_depth; kept as a last guard
            raise DecodeFailure("JSON nested too deeply") from None
        except Exception as exc:  # whatever else a payload can do: never past the decoder
            raise DecodeFailure(f"undecodable payload ({type(exc).__name__})") from None
