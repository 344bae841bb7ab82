"""OpenAI (api.openai.com): its host, its telemetry name, and what its prompt cache does.

OpenAI caches the longest seen prefix from 1,024 tokens on, automatically, in steps of 128 tokens;
`prompt_cache_key` routes calls with the same stable prefix to the same cache, `prompt_cache_retention`
asks for extended (24-hour) retention, and models from gpt-5.6 on also take explicit
`prompt_cache_breakpoint` marks on text parts. Its usage reports cache reads (and writes) in the
`*_tokens_details` of Chat Completions and Responses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from sdk.call import Provider
from sdk.providers.facts import ProviderFacts
from sdk.semconv import ProviderName

HOST: Final = "api.openai.com"

MIN_CACHEABLE_TOKENS: Final = 1024
CACHE_STEP_TOKENS: Final = 128  # beyond the minimum, OpenAI caches prefixes in steps of this many tokens
SHORTEST_RETENTION_SECONDS: Final = 300.0  # in-memory retention: "5 to 10 minutes of inactivity, up to an hour"
EXTENDED_RETENTION: Final = "24h"  # the prompt_cache_retention value Policy.cache_ttl="1h" asks for
EXTENDED_RETENTION_SECONDS: Final = 86_400.0
RETENTION_PARAM: Final = "prompt_cache_retention"
POLICY_LONG_TTL: Final = "1h"  # the `Policy.cache_ttl` that asks for extended retention

CACHE_READ_FIELD: Final = "cached_tokens"
"""The usage details' field of the input tokens read from the cache (Chat's `prompt_tokens_details`,
Responses' `input_tokens_details`)."""
CACHE_WRITE_FIELD: Final = "cache_write_tokens"
"""The usage details' field of the input tokens written to the cache."""

_EXPLICIT_BREAKPOINT_MODELS = re.compile(r"gpt-(\d+)\.(\d+)")
_FIRST_EXPLICIT = (5, 6)


def supports_breakpoints(model: str) -> bool:
    """Whether `model` takes explicit `prompt_cache_breakpoint` marks (gpt-5.6 and later)."""
    match = _EXPLICIT_BREAKPOINT_MODELS.search(model)
    return match is not None and (int(match[1]), int(match[2])) >= _FIRST_EXPLICIT


def min_cacheable_tokens(model: str) -> int:
    """The shortest prefix OpenAI caches, whatever the model."""
    return MIN_CACHEABLE_TOKENS


def cache_lifetime(params: Mapping[str, Any], policy_ttl: str | None) -> float | None:
    """24 hours under extended retention (asked in `params`, or by the policy's "1h"), else not known
    (in-memory retention lasts "5 to 10 minutes of inactivity, up to an hour")."""
    if params.get(RETENTION_PARAM) == EXTENDED_RETENTION or policy_ttl == POLICY_LONG_TTL:
        return EXTENDED_RETENTION_SECONDS
    return None


FACTS: Final = ProviderFacts(
    provider=Provider.OPENAI,
    semconv_name=ProviderName.OPENAI.value,
    min_cacheable_tokens=min_cacheable_tokens,
    cache_lifetime=cache_lifetime,
    hosts=(HOST,),
    cache_step_tokens=CACHE_STEP_TOKENS,
    cache_keys=True,
    shortest_retention_seconds=SHORTEST_RETENTION_SECONDS,
)
