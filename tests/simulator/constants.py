"""Tunables of the provider simulator, in one place.

The cache figures copy the hosted APIs' documented rules (OpenAI prompt caching guide, Anthropic
prompt caching docs, as of 2025): OpenAI caches prompts of at least 1024 tokens in 128-token steps;
Anthropic caches only at `cache_control` breakpoints, at most 4 per request, each prefix at least the
model series' minimum (1024 tokens for Sonnet/Opus 4, 2048 or 4096 for others), looking back up to
20 blocks before a breakpoint for an earlier entry.
"""

from typing import Final

HOST: Final = "127.0.0.1"
"""The simulator only ever binds loopback."""

OPENAI_CACHE_MIN_TOKENS: Final = 1024
OPENAI_CACHE_STEP_TOKENS: Final = 128
ANTHROPIC_MIN_CACHE_TOKENS: Final = 1024
"""Default of `ProviderSimulator.anthropic_min_cache_tokens`."""
ANTHROPIC_MAX_BREAKPOINTS: Final = 4
ANTHROPIC_CACHE_TTL_SECONDS: Final = {"5m": 300.0, "1h": 3600.0}
"""How long an Anthropic cache entry lives after its last use, by its breakpoint's TTL."""
MIN_THINKING_BUDGET: Final = 1024
"""Anthropic's smallest `thinking.budget_tokens`."""
ANTHROPIC_LOOKBACK_BLOCKS: Final = 20
CHAT_MAX_STOP_SEQUENCES: Final = 4
LEGACY_DEFAULT_MAX_TOKENS: Final = 16
"""What `/v1/completions` decodes when the request names no `max_tokens` (the API's own default)."""

DEFAULT_REPLY: Final = "This is the simulated assistant reply."
DEFAULT_MAX_OUTPUT_TOKENS: Final = 4096
"""Cap used when an OpenAI request names none, so loop mode always ends."""
DEFAULT_MODELS: Final = ("gpt-sim-1", "claude-sim-1")

HOLD_TIMEOUT_SECONDS: Final = 30.0
"""Longest a held answer (`ProviderSimulator.hold`) waits for its release: a test that forgets it still ends."""
IDLE_WAIT_SECONDS: Final = 5.0
"""How long `ProviderSimulator.streams` waits for in-flight requests to finish."""
CONNECTION_IDLE_TIMEOUT_SECONDS: Final = 30.0
"""A keep-alive connection with no new request for this long is closed by the server."""
SERVER_POLL_SECONDS: Final = 0.05
