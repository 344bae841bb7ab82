"""What the providers' prompt caches do, as their documentation states it: the one place a provider
fact lives (minimum cacheable lengths, breakpoints, lifetimes, which models take explicit marks).

Anthropic caches only at breakpoints (at most 4 per request, the caller's included) and only when the
prefix up to one reaches the model series' minimum length. OpenAI caches the longest seen prefix from
1,024 tokens on, automatically; models from gpt-5.6 on also take explicit `prompt_cache_breakpoint`
marks. Other OpenAI-compatible servers cache by prefix and ignore both.
"""

from __future__ import annotations

import re

from sdk.call import Provider

# Minimum cacheable prompt length in tokens by Anthropic model series, first match wins.
# Source date 2026-12-01: Anthropic's prompt-caching page ("Cache limitations") as quoted on
# 2026-11 pages (dev.to "Claude's prompt cache fails silently below 1,024 tokens", LiteLLM's docs):
# 512 for Opus/Fable/Mythos 5 and the 5.5 series, 2048 for Opus 4.7, 4096 for Opus 4.5/4.6 and
# Haiku 4.5, 1024 for Sonnet 5, Opus 4.8 and the older Sonnet/Opus 4; Sonnet 4.6 kept at the 2048
# the earlier page gave (sources differ: a higher minimum only skips a breakpoint that would not pay).
ANTHROPIC_MIN_CACHEABLE_TOKENS: tuple[tuple[str, int], ...] = (
    (r"claude-(opus|sonnet|haiku)-5-5|claude-(opus|fable|mythos)-5", 512),
    (r"claude-opus-4-7", 2048),
    (r"claude-haiku-4-5|claude-opus-4-[56]", 4096),
    (r"claude-(3-5-haiku|3-haiku|haiku-3)|claude-sonnet-4-6", 2048),
    (r"claude-", 1024),
)
ANTHROPIC_DEFAULT_MIN_TOKENS = 1024
ANTHROPIC_MAX_BREAKPOINTS = 4
ANTHROPIC_DEFAULT_TTL = "5m"
ANTHROPIC_LONG_TTL = "1h"  # Anthropic requires every 1h mark to come before any 5m one
ANTHROPIC_CACHE_TTL_SECONDS = {
    ANTHROPIC_DEFAULT_TTL: 300.0,
    ANTHROPIC_LONG_TTL: 3600.0,
}  # kept after a prefix's last use

OPENAI_MIN_CACHEABLE_TOKENS = 1024
OPENAI_CACHE_STEP_TOKENS = 128  # beyond the minimum, OpenAI caches prefixes in steps of this many tokens
OPENAI_SHORTEST_RETENTION_SECONDS = 300.0  # in-memory retention: "5 to 10 minutes of inactivity, up to an hour"
OPENAI_EXTENDED_RETENTION = "24h"  # the prompt_cache_retention value Policy.cache_ttl="1h" asks for
OPENAI_EXTENDED_RETENTION_SECONDS = 86_400.0
_OPENAI_EXPLICIT_BREAKPOINT_MODELS = re.compile(r"gpt-(\d+)\.(\d+)")
_OPENAI_FIRST_EXPLICIT = (5, 6)


def anthropic_min_tokens(model: str) -> int:
    """The minimum cacheable prefix length of `model`'s series."""
    for pattern, tokens in ANTHROPIC_MIN_CACHEABLE_TOKENS:
        if re.search(pattern, model):
            return tokens
    return ANTHROPIC_DEFAULT_MIN_TOKENS


def min_cacheable_tokens(provider: Provider, model: str) -> int:
    """The shortest prefix `provider` caches for `model` (OpenAI's minimum for OpenAI-compatible servers)."""
    return anthropic_min_tokens(model) if provider is Provider.ANTHROPIC else OPENAI_MIN_CACHEABLE_TOKENS


def supports_openai_breakpoints(model: str) -> bool:
    """Whether `model` takes explicit `prompt_cache_breakpoint` marks (gpt-5.6 and later)."""
    match = _OPENAI_EXPLICIT_BREAKPOINT_MODELS.search(model)
    return match is not None and (int(match[1]), int(match[2])) >= _OPENAI_FIRST_EXPLICIT
