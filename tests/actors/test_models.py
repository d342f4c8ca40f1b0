"""The per-model table: loading, longest-prefix lookup, defaults, and prices drawn from it."""

from __future__ import annotations

from importlib import resources

import msgspec
import pytest

from tether.actors.model import models
from tether.actors.model.models import DEFAULT_MODEL, MODELS, ModelInfo, load_table, model_info
from tether.actors.model.pricing import DEFAULT_PRICE, PRICES, price_of


def test_data_file_is_in_the_package() -> None:
    data = resources.files("tether.actors").joinpath("data", "models.toml")
    assert data.is_file()
    assert load_table(data.read_bytes()) == models.TABLE


def test_known_models() -> None:
    sonnet = model_info("claude-sonnet-4-6")
    assert sonnet == ModelInfo(context_window=200_000, max_output=64_000, price_in=3.0,
                               price_out=15.0)
    assert model_info("claude-opus-4-20250514").price_in == 15.0
    assert model_info("claude-opus-4-5-20251101").price_in == 5.0  # longer prefix wins
    assert model_info("claude-3-5-haiku-20241022").max_output == 8192


def test_unknown_models_get_the_conservative_default() -> None:
    for name in ("some-local-model", "", "m", "xclaude-opus-4", "gpt-4o"):
        assert model_info(name) is DEFAULT_MODEL
    assert DEFAULT_MODEL.context_window <= 32_000
    assert DEFAULT_MODEL.max_output <= 4096
    # smaller than every listed model: an unknown model compacts early rather than overflow
    assert all(DEFAULT_MODEL.context_window < info.context_window for info in MODELS.values())


def test_an_unlisted_claude_model_gets_the_family_entry() -> None:
    info = model_info("claude-sonnet-9")
    assert info is MODELS["claude-"]
    assert info.context_window == 200_000
    assert price_of("claude-sonnet-9") == DEFAULT_PRICE  # same price as before the table


def test_every_entry_is_consistent() -> None:
    for info in [DEFAULT_MODEL, *MODELS.values()]:
        assert 0 < info.max_output <= info.context_window
        assert info.price_in >= 0 and info.price_out >= info.price_in


def test_prices_come_from_the_table() -> None:
    assert set(PRICES) == set(MODELS)
    for prefix, info in MODELS.items():
        assert price_of(prefix + "-x") == (info.price_in, info.price_out)
    assert (DEFAULT_MODEL.price_in, DEFAULT_MODEL.price_out) == DEFAULT_PRICE


TABLE = """
[default]
context_window = 1000
max_output = 100
price_in = 1.0
price_out = 2.0

[models."a"]
context_window = 5000
max_output = 500
price_in = 0.5
price_out = 1.5
"""


def test_load_table() -> None:
    table = load_table(TABLE)
    assert table.default.context_window == 1000
    assert table.models["a"].max_output == 500
    assert load_table("[default]\ncontext_window = 10\nmax_output = 1\nprice_in = 0\n"
                      "price_out = 0\n").models == {}


@pytest.mark.parametrize(
    "bad",
    [
        TABLE.replace("[default]", "[fallback]"),  # no default
        TABLE.replace("price_out = 2.0", "price_out = 2.0\nextra = 1"),  # unknown key
        TABLE.replace("max_output = 100", 'max_output = "100"'),  # wrong type
        TABLE.replace("context_window = 5000", "context_window = 0"),  # not positive
        TABLE.replace("price_in = 0.5", "price_in = -0.5"),  # negative price
    ],
)
def test_load_table_is_strict(bad: str) -> None:
    with pytest.raises(msgspec.ValidationError):
        load_table(bad)


def test_load_table_refuses_inconsistent_entries() -> None:
    with pytest.raises(ValueError, match="max_output"):
        load_table(TABLE.replace("max_output = 500", "max_output = 6000"))
    with pytest.raises(ValueError, match="empty model prefix"):
        load_table(TABLE.replace('[models."a"]', '[models.""]'))


def test_longest_prefix() -> None:
    assert models.longest_prefix("abcd", ["a", "abc", "ab", "x"]) == "abc"
    assert models.longest_prefix("abcd", ["x", ""]) == ""
    assert models.longest_prefix("", ["a"]) == ""
