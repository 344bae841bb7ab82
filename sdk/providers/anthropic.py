"""Anthropic (api.anthropic.com, and every client of the `anthropic` package): its telemetry name and
what its prompt cache does.

Anthropic caches only at breakpoints (at most 4 per request, the caller's included) and only when the
prefix up to one reaches the model series' minimum length; a mark lives 5 minutes after its last use,
or an hour (`ttl: "1h"`). Its usage counts cache reads and writes apart from `input_tokens`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from sdk.call import Provider
from sdk.providers.facts import ProviderFacts
from sdk.semconv import ProviderName

HOST: Final = "api.anthropic.com"
CLIENT_PACKAGE: Final = "anthropic"

# Minimum cacheable prompt length in tokens by Anthropic model series, first match wins.
# Source date 2026-12-01: Anthropic's prompt-caching page ("Cache limitations") as quoted on
# 2026-11 pages (dev.to "Claude's prompt cache fails silently below 1,024 tokens", LiteLLM's docs):
# 512 for Opus/Fable/Mythos 5 and the 5.5 series, 2048 for Opus 4.7, 4096 for Opus 4.5/4.6 and
# Haiku 4.5, 1024 for Sonnet 5, Opus 4.8 and the older Sonnet/Opus 4; Sonnet 4.6 kept at the 2048
# the earlier page gave (sources differ: a higher minimum only skips a breakpoint that would not pay).
MIN_CACHEABLE_TOKENS: tuple[tuple[str, int], ...] = (
    (r"claude-(opus|sonnet|haiku)-5-5|claude-(opus|fable|mythos)-5", 512),
    (r"claude-opus-4-7", 2048),
    (r"claude-haiku-4-5|claude-opus-4-[56]", 4096),
    (r"claude-(3-5-haiku|3-haiku|haiku-3)|claude-sonnet-4-6", 2048),
    (r"claude-", 1024),
)
DEFAULT_MIN_TOKENS: Final = 1024
MAX_BREAKPOINTS: Final = 4
DEFAULT_TTL: Final = "5m"
LONG_TTL: Final = "1h"  # Anthropic requires every 1h mark to come before any 5m one
CACHE_TTL_SECONDS: Final = {
    DEFAULT_TTL: 300.0,
    LONG_TTL: 3600.0,
}  # kept after a prefix's last use

CACHE_READ_FIELD: Final = "cache_read_input_tokens"
"""The usage field of the input tokens read from the cache (not counted in `input_tokens`)."""
CACHE_WRITE_FIELD: Final = "cache_creation_input_tokens"
"""The usage field of the input tokens written to the cache (not counted in `input_tokens`)."""
CACHE_WRITE_SPLIT_FIELD: Final = "cache_creation"
"""The usage field splitting the writes by TTL (priced differently)."""
CACHE_WRITE_1H_FIELD: Final = "ephemeral_1h_input_tokens"
"""The split's field of the writes with a one-hour TTL."""


def min_cacheable_tokens(model: str) -> int:
    """The minimum cacheable prefix length of `model`'s series."""
    for pattern, tokens in MIN_CACHEABLE_TOKENS:
        if re.search(pattern, model):
            return tokens
    return DEFAULT_MIN_TOKENS


def cache_lifetime(params: Mapping[str, Any], policy_ttl: str | None) -> float | None:
    """The TTL asked for: 5 minutes by default, or "1h"."""
    return CACHE_TTL_SECONDS[policy_ttl or DEFAULT_TTL]


FACTS: Final = ProviderFacts(
    provider=Provider.ANTHROPIC,
    semconv_name=ProviderName.ANTHROPIC.value,
    min_cacheable_tokens=min_cacheable_tokens,
    cache_lifetime=cache_lifetime,
    hosts=(HOST,),
    client_package=CLIENT_PACKAGE,
    breakpoints_only=True,
)
