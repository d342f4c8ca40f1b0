"""Strict JSON encoding and decoding of bus messages.

Decoding never raises anything but :class:`DecodeFailure`, whose ``reason`` is a sentence
fit for a dead letter or an error reply: not for a payload over the size limit (refused
unread), invalid UTF-8 inside a string, nor JSON nested deeper than the interpreter's
recursion limit.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import msgspec

T = TypeVar("T")

MAX_PAYLOAD = 1024 * 1024
"""Largest payload an actor accepts (bytes); larger ones are dead-lettered unread."""

_encoder = msgspec.json.Encoder()


class DecodeFailure(Exception):
    """A payload that is not a valid message for the subject; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def encode(message: Any) -> bytes:
    """Encode a Struct (or any msgspec-encodable value) as compact JSON."""
    return _encoder.encode(message)


class Decoder(Generic[T]):
    """A strict decoder for one message type or tagged union."""

    def __init__(self, kind: Any, max_size: int = MAX_PAYLOAD) -> None:
        self._decoder: msgspec.json.Decoder[T] = msgspec.json.Decoder(kind)
        self.max_size = max_size

    def decode(self, data: bytes) -> T:
        """Decode ``data`` or raise DecodeFailure with a readable reason."""
        if len(data) > self.max_size:
            raise DecodeFailure(f"payload of {len(data)} bytes exceeds {self.max_size}")
        try:
            return self._decoder.decode(data)
        except msgspec.ValidationError as exc:
            raise DecodeFailure(f"invalid message: {exc}") from None
        except msgspec.DecodeError as exc:
            raise DecodeFailure(f"not valid JSON: {exc}") from None
        except UnicodeDecodeError as exc:  # a JSON string holding bytes that are not UTF-8
            raise DecodeFailure(f"not valid UTF-8 at byte {exc.start}") from None
        except RecursionError:
            raise DecodeFailure("JSON nested too deeply") from None
        except Exception as exc:  # whatever else a payload can do: never past the decoder
            raise DecodeFailure(f"undecodable payload ({type(exc).__name__})") from None
