"""Cache facts the hints rely on: Anthropic's minimum cacheable lengths (source-dated) and OpenAI's retention."""

from __future__ import annotations

from typing import Any

import pytest

import sdk
from sdk.adapters import adapter_for
from sdk.cache.hints import place_cache_hints
from sdk.call import Api, Provider
from sdk.providers.anthropic import min_cacheable_tokens as anthropic_min_tokens
from tests.sdk.helpers import LONG_SYSTEM

QUESTION = [{"role": "system", "content": LONG_SYSTEM}, {"role": "user", "content": "What is prefill?"}]


@pytest.mark.parametrize(
    ("model", "tokens"),
    [
        ("claude-opus-5-5", 512),
        ("claude-sonnet-5-5", 512),
        ("claude-haiku-5-5", 512),
        ("claude-opus-5", 512),
        ("claude-fable-5-1", 512),
        ("claude-mythos-5-2", 512),
        ("claude-opus-4-7", 2048),
        ("claude-opus-4-7-20260416", 2048),
        ("claude-opus-4-6", 4096),
        ("claude-opus-4-5", 4096),
        ("claude-haiku-4-5-20251001", 4096),
        ("claude-sonnet-5", 1024),
        ("claude-opus-4-8", 1024),
        ("claude-sonnet-4-5", 1024),
        ("claude-sonnet-4-6", 2048),
        ("claude-3-haiku-20240307", 2048),
    ],
)
def test_the_minimum_cacheable_length_follows_anthropics_current_table(model: str, tokens: int) -> None:
    assert anthropic_min_tokens(model) == tokens


def test_a_2048_token_minimum_skips_a_breakpoint_a_1024_token_model_would_get() -> None:
    adapter = adapter_for(Api.MESSAGES)
    system = "word " * 1200  # about 1500 tokens at 4 characters a token
    placed = {}
    for model in ("claude-sonnet-4-5", "claude-opus-4-7"):
        call = adapter.to_call(
            {"model": model, "max_tokens": 9, "system": system, "messages": QUESTION[1:]}, Provider.ANTHROPIC
        )
        place_cache_hints(call, sdk.Policy(), adapter)
        placed[model] = "cache_breakpoint:system" in call.decided.changes
    assert placed == {"claude-sonnet-4-5": True, "claude-opus-4-7": False}


@pytest.mark.parametrize(
    ("ttl", "provider", "caller", "expected"),
    [
        ("1h", Provider.OPENAI, {}, "24h"),
        (None, Provider.OPENAI, {}, None),
        ("5m", Provider.OPENAI, {}, None),
        ("1h", Provider.OPENAI, {"prompt_cache_retention": "in_memory"}, "in_memory"),
        ("1h", Provider.OPENAI_COMPATIBLE, {}, None),
    ],
)
def test_a_one_hour_cache_ttl_asks_openai_for_extended_retention_unless_the_caller_chose(
    ttl: Any, provider: Provider, caller: dict[str, Any], expected: str | None
) -> None:
    for api, native in ((Api.CHAT, {"messages": QUESTION}), (Api.RESPONSES, {"input": QUESTION})):
        adapter = adapter_for(api)
        call = adapter.to_call({"model": "gpt-5.5", **native, **caller}, provider)
        place_cache_hints(call, sdk.Policy(cache_ttl=ttl), adapter)
        assert adapter.to_kwargs(call).get("prompt_cache_retention") == expected, api
