"""Prices a model response from its token usage (US dollars per million tokens).

The prices come from the per-model table (``actors/data/models.toml``, read by
:mod:`actors.model.models`); ``PRICES`` is a view of it by model-name prefix.
"""

from __future__ import annotations

from tether.actors.model.models import DEFAULT_MODEL, MODELS, longest_prefix
from tether.events.messages import Usage

PRICES: dict[str, tuple[float, float]] = {
    prefix: (info.price_in, info.price_out) for prefix, info in MODELS.items()
}
"""(input, output) price per million tokens, by model-name prefix; longest prefix wins."""

DEFAULT_PRICE = (DEFAULT_MODEL.price_in, DEFAULT_MODEL.price_out)
"""The price of a model no prefix matches (the table's ``[default]``)."""


def price_of(model: str) -> tuple[float, float]:
    """The (input, output) price per million tokens for ``model``."""
    best = longest_prefix(model, PRICES)
    return PRICES[best] if best else DEFAULT_PRICE


def cost_usd(model: str, usage: Usage) -> float:
    """What ``usage`` costs on ``model``."""
    price_in, price_out = price_of(model)
    return (usage.input_tokens * price_in + usage.output_tokens * price_out) / 1_000_000
