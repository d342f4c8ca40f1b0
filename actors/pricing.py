"""Prices a model response from its token usage (US dollars per million tokens)."""

from __future__ import annotations

from events.messages import Usage

PRICES: dict[str, tuple[float, float]] = {
    "claude-opus-4": (15.0, 75.0),
    "claude-sonnet-4": (3.0, 15.0),
    "claude-3-7-sonnet": (3.0, 15.0),
    "claude-3-5-sonnet": (3.0, 15.0),
    "claude-haiku-4": (1.0, 5.0),
    "claude-3-5-haiku": (0.8, 4.0),
}
"""(input, output) price per million tokens, by model-name prefix; longest prefix wins."""

DEFAULT_PRICE = (3.0, 15.0)


def price_of(model: str) -> tuple[float, float]:
    """The (input, output) price per million tokens for ``model``."""
    best = ""
    for prefix in PRICES:
        if model.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    return PRICES[best] if best else DEFAULT_PRICE


def cost_usd(model: str, usage: Usage) -> float:
    """What ``usage`` costs on ``model``."""
    price_in, price_out = price_of(model)
    return (usage.input_tokens * price_in + usage.output_tokens * price_out) / 1_000_000
