"""A typed msgspec mapper for the eventsourcing library.

The library's default mapper hands the event's ``__dict__`` to a transcoder; a plain
msgspec transcoder is lossy (UUIDs, datetimes and Structs come back as str and dict).
This mapper instead builds, once per event class, a msgspec Struct type from the event's
own type hints and decodes stored JSON straight into typed values. New fields added to an
event class later must have defaults, because typed decoding runs before upcasting.
"""

from __future__ import annotations

import dataclasses
import threading
import typing
import uuid
from typing import Any

import msgspec
from eventsourcing.persistence import (
    Cipher,
    Compressor,
    Mapper,
    MapperDeserialisationError,
    StoredEvent,
    Transcoder,
)
from eventsourcing.utils import get_topic, register_topic, resolve_topic

import tether.events

LEGACY_TOPIC_ROOT = "events"
"""Before Tether installed as the one package ``tether``, its modules were top-level:
events and snapshots stored then carry topics like ``events.session:Session.Created``.
Registered as ``tether.events``, every such topic resolves to the same class."""

register_topic(LEGACY_TOPIC_ROOT, tether.events)

_ENVELOPE_FIELDS = ("originator_id", "originator_version")
_encoder = msgspec.json.Encoder()


class MsgspecMapper(Mapper[uuid.UUID]):
    """Maps domain events to JSON stored events and back, keeping every field's type."""

    def __init__(
        self,
        transcoder: Transcoder | None = None,
        compressor: Compressor | None = None,
        cipher: Cipher | None = None,
    ) -> None:
        super().__init__(transcoder or _UnusedTranscoder(), compressor, cipher)
        self._decoders: dict[type, msgspec.json.Decoder[Any]] = {}
        self._lock = threading.Lock()

    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        cls = type(domain_event)
        state = dict(vars(domain_event))
        originator_id = state.pop("originator_id")
        originator_version = state.pop("originator_version")
        class_version = getattr(cls, "class_version", 1)
        if class_version > 1:
            state["class_version"] = class_version
        data = _encoder.encode(state)
        if self.compressor:
            data = self.compressor.compress(data)
        if self.cipher:
            data = self.cipher.encrypt(data)
        return StoredEvent(
            originator_id=originator_id,
            originator_version=originator_version,
            topic=get_topic(cls),
            state=data,
        )

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        cls = resolve_topic(stored_event.topic)
        data = stored_event.state
        try:
            if self.cipher:
                data = self.cipher.decrypt(data)
            if self.compressor:
                data = self.compressor.decompress(data)
            decoded = self._decoder(cls).decode(data)
        except (msgspec.DecodeError, ValueError) as exc:
            raise MapperDeserialisationError(
                f"cannot decode stored event {stored_event.topic} of "
                f"{stored_event.originator_id} v{stored_event.originator_version}: {exc}"
            ) from exc
        state = {f: getattr(decoded, f) for f in decoded.__struct_fields__}
        originator_id = stored_event.originator_id
        state["originator_id"] = (
            originator_id if isinstance(originator_id, uuid.UUID) else uuid.UUID(originator_id)
        )
        state["originator_version"] = stored_event.originator_version
        class_version = getattr(cls, "class_version", 1)
        from_version = state.pop("class_version", None) or 1
        while from_version < class_version:
            getattr(cls, f"upcast_v{from_version}_v{from_version + 1}")(state)
            from_version += 1
        domain_event = object.__new__(cls)
        object.__setattr__(domain_event, "__dict__", state)
        return domain_event

    def _decoder(self, cls: type) -> msgspec.json.Decoder[Any]:
        decoder = self._decoders.get(cls)
        if decoder is None:
            with self._lock:
                decoder = self._decoders.get(cls) or msgspec.json.Decoder(state_type(cls))
                self._decoders[cls] = decoder
        return decoder


def state_type(cls: type) -> type[msgspec.Struct]:
    """A Struct type with the event class's fields (less the envelope), their types and
    their defaults, so records written before a defaulted field existed still decode."""
    hints = typing.get_type_hints(cls)
    defaults: dict[str, Any] = {}
    if dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                defaults[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                defaults[f.name] = msgspec.field(default_factory=f.default_factory)
    required: list[Any] = []
    optional: list[Any] = []
    for name, hint in hints.items():
        if name in _ENVELOPE_FIELDS or name.startswith("_"):
            continue
        if typing.get_origin(hint) is typing.ClassVar:
            continue
        if name in defaults:
            optional.append((name, hint, defaults[name]))
        else:
            required.append((name, hint))
    optional.append(("class_version", int | None, None))
    return msgspec.defstruct(f"{cls.__qualname__}State", required + optional)


class _UnusedTranscoder(Transcoder):
    """Placeholder: the mapper encodes with msgspec and never calls a transcoder."""

    def encode(self, obj: Any) -> bytes:
        raise NotImplementedError

    def decode(self, data: bytes) -> Any:
        raise NotImplementedError
