"""What a call cost, from its usage and a price table (USD per million tokens by model).

    cost = (input - cache_read - cache_write) x input + cache_read x cached_input
           + (cache_write - cache_write_1h) x cache_write + cache_write_1h x cache_write_1h_rate
           + output x output                                           (all / 1e6)
    saved = cache_read x (input - cached_input) / 1e6

Cache writes are priced by the TTL they were written with, as the provider reported it (Anthropic's
`cache_creation` split: 5-minute writes cost 1.25x input, 1-hour writes 2x input).

The built-in table is data (`prices.json`, with its source date); `Policy.prices` overrides it
entry by entry. Its figures were refreshed from `genai-prices` (the pydantic team's maintained
table), which is not a dependency: it works offline (a bundled snapshot; updates are an opt-in
background fetch), but one `calc_price` costs more than all of kvwise's per-call work and its import
is slow (docs/benchmarks.md, `by_hand`), it pulls in pydantic's models and Decimal arithmetic, and it
matches names loosely (`gpt-5.6` is priced as `gpt-5.6-sol`). A lookup here is a dict hit. A model is
found by its exact name, else by the longest table name it extends with a dated-snapshot or `-latest`
suffix: `claude-haiku-4-5-20251001` and `gpt-4o-2024-08-06` are priced
as their base model, while an unknown variant (`gpt-5.1-codex`, `gpt-6-sol`) gets no price rather
than a wrong one.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from types import MappingProxyType

from sdk.call import Usage

TOKENS_PER_PRICE_UNIT = 1_000_000
"""Prices are quoted per million tokens."""

_PRICE_FILE = "prices.json"
_RATES = ("input", "output", "cached_input", "cache_write", "cache_write_1h")
_SNAPSHOT_SUFFIX = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8}|(chat-)?latest)")
"""What may follow a table name in a model name priced as that entry: a date or a `latest` alias."""


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens of each kind for one model.

    >>> Price(input=3.0, output=15.0, cached_input=0.3, cache_write=3.75, cache_write_1h=6.0)

    `cache_write` is the rate of writes with the default (5-minute) TTL, `cache_write_1h` that of
    one-hour writes (None: the same as `cache_write`).
    """

    input: float
    output: float
    cached_input: float
    cache_write: float
    cache_write_1h: float | None = None

    def __post_init__(self) -> None:
        if self.cache_write_1h is None:
            object.__setattr__(self, "cache_write_1h", self.cache_write)
        for name in _RATES:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"Price.{name} must be a finite number >= 0 (USD per million tokens), got {value!r}")
            object.__setattr__(self, name, float(value))

    @classmethod
    def from_mapping(cls, model: str, rates: Mapping[str, float]) -> Price:
        """A price from a `{"input", "output", "cached_input", "cache_write", "cache_write_1h"}` mapping.

        `cached_input` and `cache_write` default to the input rate (no cache discount or surcharge),
        `cache_write_1h` to `cache_write`.
        """
        unknown = set(rates) - set(_RATES)
        if unknown or "input" not in rates or "output" not in rates:
            raise ValueError(
                f"price of {model!r} needs 'input' and 'output' and may have 'cached_input', 'cache_write', "
                f"'cache_write_1h'; got keys {sorted(rates)}"
            )
        cache_write = rates.get("cache_write", rates["input"])
        return cls(
            input=rates["input"],
            output=rates["output"],
            cached_input=rates.get("cached_input", rates["input"]),
            cache_write=cache_write,
            cache_write_1h=rates.get("cache_write_1h", cache_write),
        )


@dataclass(slots=True)  # not frozen, as `sdk.lifecycle.CallEnd`: built on every priced call, never changed once built
class Cost:
    """What one call cost in USD, split by token kind, and what its cache reads saved."""

    input_usd: float
    cached_input_usd: float
    cache_write_usd: float
    output_usd: float
    saved_usd: float

    @property
    def total_usd(self) -> float:
        """The whole cost of the call."""
        return self.input_usd + self.cached_input_usd + self.cache_write_usd + self.output_usd


def cost_of(usage: Usage, price: Price) -> Cost:
    """Price `usage` (whose input count includes cached tokens) at `price`; see the module formula."""
    read, write, write_1h = usage.cache_read_tokens, usage.cache_write_tokens, usage.cache_write_1h_tokens
    uncached = max(usage.input_tokens - read - write, 0)
    unit = TOKENS_PER_PRICE_UNIT
    long_rate = price.cache_write_1h if price.cache_write_1h is not None else price.cache_write
    return Cost(
        input_usd=uncached * price.input / unit,
        cached_input_usd=read * price.cached_input / unit,
        cache_write_usd=((write - write_1h) * price.cache_write + write_1h * long_rate) / unit,
        output_usd=usage.output_tokens * price.output / unit,
        saved_usd=read * (price.input - price.cached_input) / unit,
    )


@dataclass(frozen=True, slots=True)
class PriceTable:
    """Model name -> `Price`, with dated snapshots resolved to their base model.

    >>> table = PriceTable.load(overrides={"my-model": {"input": 1.0, "output": 2.0}})
    >>> table.lookup("claude-haiku-4-5-20251001")
    Price(input=1.0, output=5.0, cached_input=0.1, cache_write=1.25, cache_write_1h=2.0)
    """

    prices: Mapping[str, Price]
    source_date: str
    _by_length: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _resolved: dict[str, Price | None] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_length", tuple(sorted(self.prices, key=len, reverse=True)))
        # Memo of names already resolved: model names are few, and a prefix scan per call is waste.
        object.__setattr__(self, "_resolved", {})

    @classmethod
    def load(cls, overrides: Mapping[str, Mapping[str, float]] | None = None) -> PriceTable:
        """The built-in table with `overrides` (same shape as `Policy.prices`) replacing its entries."""
        prices, source_date = _builtin_prices()
        if overrides:
            merged = dict(prices)
            merged.update((model, Price.from_mapping(model, rates)) for model, rates in overrides.items())
            prices = MappingProxyType(merged)
        return cls(prices=prices, source_date=source_date)

    def lookup(self, model: str | None) -> Price | None:
        """The price of `model` (exact name, else the longest table name it extends), or None."""
        if not model:
            return None
        try:
            return self._resolved[model]
        except KeyError:
            pass
        price = self.prices.get(model)
        if price is None:
            for name in self._by_length:
                if model.startswith(name) and _SNAPSHOT_SUFFIX.fullmatch(model, len(name)):
                    price = self.prices[name]
                    break
        self._resolved[model] = price
        return price


@cache
def _builtin_prices() -> tuple[Mapping[str, Price], str]:
    """The packaged table and its source date, parsed once: constant, read-only data."""
    raw = json.loads(resources.files(__package__).joinpath(_PRICE_FILE).read_text(encoding="utf-8"))
    prices = {model: Price.from_mapping(model, rates) for model, rates in raw["models"].items()}
    return MappingProxyType(prices), str(raw["source_date"])
