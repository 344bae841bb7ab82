"""The price table: lookup of dated model names, policy overrides, the cost formula."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from sdk.call import Usage
from sdk.telemetry.pricing import Price, PriceTable, cost_of


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gpt-4o", "gpt-4o"),
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("claude-haiku-4-5-20251001", "claude-haiku-4-5"),
        ("claude-opus-4-7-20260416", "claude-opus-4-7"),
        ("claude-opus-4-5-20251101", "claude-opus-4-5"),
        ("claude-3-7-sonnet-latest", "claude-3-7-sonnet"),
        ("gpt-5.1-chat-latest", "gpt-5.1"),
        ("gpt-5.4-mini-2026-03-17", "gpt-5.4-mini"),
        ("gpt-5.2-pro-2025-12-11", "gpt-5.2-pro"),
        ("gpt-5.1-codex", None),
        ("gpt-6-sol", None),
        ("gpt-4o.1", None),
        ("my-local-model", None),
        ("", None),
    ],
)
def test_a_model_is_priced_by_its_exact_name_or_the_longest_base_name_it_extends(
    model: str, expected: str | None
) -> None:
    table = PriceTable.load()
    assert table.lookup(model) == (table.prices[expected] if expected else None)


def test_the_builtin_table_states_its_source_date_and_covers_both_providers() -> None:
    raw = json.loads(resources.files("sdk.telemetry").joinpath("prices.json").read_text())
    assert raw["source_date"] and raw["sources"] and raw["unit"] == "USD per million tokens"
    assert PriceTable.load().source_date == raw["source_date"]
    names = set(raw["models"])
    assert any(name.startswith("gpt-") for name in names) and any(name.startswith("claude-") for name in names)


def test_policy_prices_override_and_extend_the_builtin_table() -> None:
    table = PriceTable.load({"gpt-4o": {"input": 1.0, "output": 2.0}, "local": {"input": 0.0, "output": 0.0}})
    assert table.lookup("gpt-4o-2024-08-06") == Price(input=1.0, output=2.0, cached_input=1.0, cache_write=1.0)
    assert table.lookup("local") == Price(0.0, 0.0, 0.0, 0.0)
    assert table.lookup("gpt-4o-mini") == PriceTable.load().lookup("gpt-4o-mini")


@pytest.mark.parametrize(
    ("rates", "message"),
    [
        ({"input": 1.0}, "needs 'input' and 'output'"),
        ({"input": 1.0, "output": 2.0, "batch": 0.5}, "needs 'input' and 'output'"),
        ({"input": -1.0, "output": 2.0}, "Price.input must be a finite number"),
        ({"input": 1.0, "output": float("nan")}, "Price.output must be a finite number"),
        ({"input": "1", "output": 2.0}, "Price.input must be a finite number"),
    ],
)
def test_an_invalid_price_override_is_refused_with_the_field_and_value(rates: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PriceTable.load({"m": rates})


def test_cost_prices_uncached_cached_written_and_output_tokens_at_their_own_rates() -> None:
    price = Price(input=2.0, output=8.0, cached_input=0.5, cache_write=2.5)
    cost = cost_of(
        Usage(input_tokens=10_000, output_tokens=1_000, cache_read_tokens=6_000, cache_write_tokens=3_000), price
    )
    assert cost.input_usd == pytest.approx(1_000 * 2.0 / 1e6)
    assert cost.cached_input_usd == pytest.approx(6_000 * 0.5 / 1e6)
    assert cost.cache_write_usd == pytest.approx(3_000 * 2.5 / 1e6)
    assert cost.output_usd == pytest.approx(1_000 * 8.0 / 1e6)
    assert cost.total_usd == pytest.approx((2_000 + 3_000 + 7_500 + 8_000) / 1e6)
    assert cost.saved_usd == pytest.approx(6_000 * 1.5 / 1e6)


def test_one_hour_cache_writes_are_priced_at_their_own_rate_and_the_rest_at_the_five_minute_rate() -> None:
    price = Price(input=3.0, output=15.0, cached_input=0.3, cache_write=3.75, cache_write_1h=6.0)
    usage = Usage(input_tokens=10_000, output_tokens=100, cache_write_tokens=4_000, cache_write_1h_tokens=3_000)
    assert cost_of(usage, price).cache_write_usd == pytest.approx((1_000 * 3.75 + 3_000 * 6.0) / 1e6)


def test_the_builtin_table_prices_anthropic_one_hour_writes_at_twice_input_and_gpt_5_6_writes_at_1_25x() -> None:
    table = PriceTable.load()
    for name in ("claude-sonnet-4-6", "claude-opus-4-7", "claude-haiku-4-5", "claude-opus-5-5"):
        price = table.prices[name]
        assert price.cache_write == pytest.approx(1.25 * price.input), name
        assert price.cache_write_1h == pytest.approx(2 * price.input), name
    gpt = table.lookup("gpt-5.6-2026-10-01")
    assert gpt is not None and gpt.cache_write == pytest.approx(1.25 * gpt.input) and gpt.cached_input < gpt.input
    assert table.prices["gpt-5.5"].cache_write == table.prices["gpt-5.5"].input  # no write surcharge before 5.6


def test_an_override_without_a_one_hour_rate_prices_one_hour_writes_at_its_cache_write_rate() -> None:
    table = PriceTable.load({"m": {"input": 1.0, "output": 2.0, "cache_write": 1.5}})
    assert table.lookup("m") == Price(input=1.0, output=2.0, cached_input=1.0, cache_write=1.5, cache_write_1h=1.5)
    assert (
        PriceTable.load({"m": {"input": 1.0, "output": 2.0, "cache_write_1h": 2.0}}).prices["m"].cache_write_1h == 2.0
    )
