"""Adding a provider touches one new `sdk/providers/` module (its `FACTS`, registered in
`sdk.providers.PROVIDERS`) plus, for a new API, its adapter: here a provider speaking the OpenAI Chat
API, written as a shipped module would be, registered by patching the tuple, routed by `sdk.wrap` from
its host and served with its own facts (name, cache minimum, cache keys) and no other file changed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import openai
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import sdk
from sdk import providers
from sdk import semconv as sc
from sdk.call import Provider
from sdk.providers.facts import ProviderFacts
from tests.sdk.canned_server import canned  # noqa: F401 (the fixture)

# --- the new provider's module, as `sdk/providers/acme.py` would hold it ---------------------------


ACME = Provider("acme")
HOST = "127.0.0.1"  # the loopback server stands in for the provider's host
MIN_CACHEABLE_TOKENS = 16  # far below OpenAI's 1,024, so a short prompt is cached


def cache_lifetime(params: Mapping[str, Any], policy_ttl: str | None) -> float | None:
    return None


FACTS = ProviderFacts(
    provider=ACME,
    semconv_name="acme",
    min_cacheable_tokens=lambda model: MIN_CACHEABLE_TOKENS,
    cache_lifetime=cache_lifetime,
    hosts=(HOST,),
    cache_keys=True,
)

# --------------------------------------------------------------------------------------------------

SYSTEM = "You answer questions about the Acme rocket catalogue, briefly and politely, in English."
MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Which rocket is fastest?"}]
ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "acme-1",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "The X-9."}, "finish_reason": "stop"}],
    "usage": {
        "prompt_tokens": 400,
        "completion_tokens": 4,
        "total_tokens": 404,
        "prompt_tokens_details": {"cached_tokens": 0},
    },
}


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(providers, "PROVIDERS", (*providers.PROVIDERS, FACTS))


def _two_calls(url: str) -> list[Any]:
    """Two identical calls through a wrapped client; the spans they made."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    client = sdk.wrap(
        openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0), tracer_provider=tracer_provider, state="memory"
    )
    for _ in range(2):
        client.chat.completions.create(model="acme-1", messages=MESSAGES, max_tokens=8)
    return list(exporter.get_finished_spans())


def test_a_registered_provider_is_looked_up_by_its_host_and_its_facts(registered):
    assert providers.provider_for(HOST, "openai") is ACME
    assert providers.facts_for(ACME) is FACTS
    assert providers.min_cacheable_tokens(ACME, "acme-1") == MIN_CACHEABLE_TOKENS
    assert providers.semconv_name(ACME, HOST) == "acme"
    assert providers.provider_for("api.openai.com", "openai") is Provider.OPENAI  # the others keep theirs


def test_without_its_module_the_host_is_a_plain_openai_compatible_server():
    assert providers.provider_for(HOST, "openai") is Provider.OPENAI_COMPATIBLE
    with pytest.raises(LookupError):
        providers.facts_for(ACME)


def test_wrap_takes_a_registered_provider_by_name_and_refuses_one_that_is_not(registered):
    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="k")
    assert sdk.wrap(client, provider="acme", state="memory") is not None
    with pytest.raises(
        ValueError, match=r"provider must be one of \['openai', 'anthropic', 'openai_compatible', 'acme'\]"
    ):
        sdk.wrap(client, provider="acme-2", state="memory")


def test_wrap_routes_a_call_to_the_registered_provider_and_uses_its_facts(canned, registered):
    canned.answer(ANSWER)
    first, second = _two_calls(canned.url)
    assert first.attributes[sc.GEN_AI_PROVIDER_NAME] == "acme"
    assert all(seen.body["prompt_cache_key"].startswith("kvwise-") for seen in canned.seen)  # its cache keys
    # its 16-token minimum: the short prompt is cacheable, so the second call should have read it
    assert second.attributes[sc.KVWISE_CACHE_EXPECTED_READ_TOKENS] == 400
    assert second.attributes[sc.KVWISE_CACHE_MISS_CAUSE] == sc.MissCause.EVICTED.value


def test_the_same_calls_unregistered_get_the_openai_compatible_facts(canned):
    canned.answer(ANSWER)
    first, second = _two_calls(canned.url)
    assert first.attributes[sc.GEN_AI_PROVIDER_NAME] == "openai"
    assert all("prompt_cache_key" not in seen.body for seen in canned.seen)
    assert sc.KVWISE_CACHE_EXPECTED_READ_TOKENS not in second.attributes  # under OpenAI's 1,024-token minimum
