"""Per-model figures (context window, output limit, prices), from ``actors/data/models.toml``.

The table is read once, at import, and decoded strictly (msgspec's TOML decoding into the
Structs below: an unknown key or a wrong type is an error, not a silent default). A model
is looked up by the longest prefix of its name in the table; a name no prefix matches gets
the ``[default]`` entry, whose values are conservative (see the data file).
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources
from typing import Annotated

import msgspec

Positive = Annotated[int, msgspec.Meta(gt=0)]
Price = Annotated[float, msgspec.Meta(ge=0)]


class ModelInfo(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What Tether needs to know about one model."""

    context_window: Positive
    """Tokens one call may hold, input and output together."""
    max_output: Positive
    """The most tokens one response may have."""
    price_in: Price
    """US dollars per million input tokens."""
    price_out: Price
    """US dollars per million output tokens."""


class ModelTable(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The whole data file: the default entry and the entries by name prefix."""

    default: ModelInfo
    models: dict[str, ModelInfo] = {}


def load_table(data: bytes | str) -> ModelTable:
    """Decode a models table (TOML); raises ``ValueError`` for an inconsistent one."""
    table = msgspec.toml.decode(data, type=ModelTable)
    for name, info in [("default", table.default), *table.models.items()]:
        if info.max_output > info.context_window:
            raise ValueError(f"model {name!r}: max_output exceeds context_window")
    if "" in table.models:
        raise ValueError("an empty model prefix would shadow [default]; set [default]")
    return table


def _read_table() -> ModelTable:
    data = resources.files("tether.actors").joinpath("data", "models.toml").read_bytes()
    return load_table(data)


TABLE = _read_table()
MODELS: dict[str, ModelInfo] = dict(TABLE.models)
"""Figures by model-name prefix; the longest prefix of a name wins."""
DEFAULT_MODEL: ModelInfo = TABLE.default
"""Figures for a model no prefix matches."""


def model_info(name: str) -> ModelInfo:
    """The figures for model ``name``: its longest matching prefix, else the default."""
    best = longest_prefix(name, MODELS)
    return MODELS[best] if best else DEFAULT_MODEL


def longest_prefix(name: str, prefixes: Iterable[str]) -> str:
    """The longest of ``prefixes`` that ``name`` starts with ("" when none does)."""
    best = ""
    for prefix in prefixes:
        if prefix and name.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    return best
