"""Prices by model-name prefix."""

from __future__ import annotations

import pytest

from tether.actors.model.pricing import DEFAULT_PRICE, PRICES, cost_usd, price_of
from tether.events.messages import Usage


@pytest.mark.parametrize(
    ("model", "price"),
    [
        ("claude-opus-4-20250514", (15.0, 75.0)),
        ("claude-opus-4-1", (15.0, 75.0)),
        ("claude-sonnet-4-5", (3.0, 15.0)),
        ("claude-3-7-sonnet-latest", (3.0, 15.0)),
        ("claude-haiku-4-5", (1.0, 5.0)),
        ("claude-3-5-haiku-20241022", (0.8, 4.0)),
        ("some-local-model", DEFAULT_PRICE),
        ("", DEFAULT_PRICE),
        ("xclaude-opus-4", DEFAULT_PRICE),  # a prefix, not a substring
    ],
)
def test_price_by_prefix(model: str, price: tuple[float, float]) -> None:
    assert price_of(model) == price


def test_longest_prefix_wins() -> None:
    saved = dict(PRICES)
    try:
        PRICES["claude-opus-4-1"] = (20.0, 100.0)
        assert price_of("claude-opus-4-1-2025") == (20.0, 100.0)
        assert price_of("claude-opus-4-0") == (15.0, 75.0)
    finally:
        PRICES.clear()
        PRICES.update(saved)


def test_cost_of_usage() -> None:
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
    assert cost_usd("claude-opus-4", usage) == pytest.approx(90.0)
    assert cost_usd("claude-3-5-haiku", Usage(input_tokens=2000, output_tokens=500)) == (
        pytest.approx(0.0036)
    )
    assert cost_usd("unknown", Usage(input_tokens=100, output_tokens=10)) == pytest.approx(
        (100 * 3 + 10 * 15) / 1e6
    )
    assert cost_usd("claude-sonnet-4", Usage()) == 0.0
