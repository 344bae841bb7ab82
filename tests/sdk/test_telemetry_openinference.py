"""OpenInference attributes (what Phoenix reads) on the call span, beside the GenAI ones."""

from __future__ import annotations

import pytest

from sdk.call import Api, Provider, Usage
from sdk.policy import Policy
from sdk.telemetry import semconv as sc
from tests.sdk.test_telemetry_spans import SERVER, Otel, make_call, otel, stream_through  # noqa: F401

PRICES = {"my-model": {"input": 2.0, "cached_input": 0.5, "cache_write": 2.5, "output": 8.0}}
USAGE = Usage(input_tokens=10_000, output_tokens=1_000, cache_read_tokens=6_000, cache_write_tokens=3_000)


def test_a_priced_call_span_carries_openinference_kind_model_tokens_cache_and_cost(otel: Otel) -> None:
    record = otel.telemetry(Policy(prices=PRICES)).start(make_call(model="my-model"), SERVER)
    record.end(usage=USAGE, response_model="my-model-2026-01-01")
    attributes = dict(otel.spans()[-1].attributes or {})
    assert attributes.items() >= {
        sc.OPENINFERENCE_SPAN_KIND: "LLM",
        sc.LLM_MODEL_NAME: "my-model-2026-01-01",
        sc.LLM_PROVIDER: "openai",
        sc.LLM_SYSTEM: "openai",
        sc.LLM_TOKEN_COUNT_PROMPT: 10_000,
        sc.LLM_TOKEN_COUNT_COMPLETION: 1_000,
        sc.LLM_TOKEN_COUNT_TOTAL: 11_000,
        sc.LLM_TOKEN_COUNT_PROMPT_DETAILS_CACHE_READ: 6_000,
        sc.LLM_TOKEN_COUNT_PROMPT_DETAILS_CACHE_WRITE: 3_000,
    }.items()
    assert attributes[sc.LLM_TOKEN_COUNT_PROMPT] == attributes[sc.GEN_AI_USAGE_INPUT_TOKENS]
    assert attributes[sc.LLM_COST_PROMPT] == pytest.approx((1_000 * 2.0 + 6_000 * 0.5 + 3_000 * 2.5) / 1e6)
    assert attributes[sc.LLM_COST_COMPLETION] == pytest.approx(1_000 * 8.0 / 1e6)
    assert attributes[sc.LLM_COST_TOTAL] == pytest.approx(attributes[sc.KVWISE_COST_USD])
    assert sc.LLM_TOKEN_COUNT_COMPLETION_DETAILS_REASONING not in attributes


def test_the_requested_model_names_the_span_until_a_response_model_replaces_it(otel: Otel) -> None:
    otel.telemetry().start(make_call(model="my-model"), SERVER).end(error="APIConnectionError")
    attributes = dict(otel.spans()[-1].attributes or {})
    assert attributes[sc.OPENINFERENCE_SPAN_KIND] == "LLM" and attributes[sc.LLM_MODEL_NAME] == "my-model"
    assert not any(key.startswith(("llm.token_count.", "llm.cost.")) for key in attributes)


def test_reasoning_tokens_are_reported_when_there_were_some(otel: Otel) -> None:
    record = otel.telemetry().start(make_call(), SERVER)
    record.end(usage=Usage(input_tokens=20, output_tokens=50, reasoning_tokens=30))
    assert (otel.spans()[-1].attributes or {})[sc.LLM_TOKEN_COUNT_COMPLETION_DETAILS_REASONING] == 30


def test_an_unpriced_model_has_token_counts_but_no_cost(otel: Otel) -> None:
    otel.telemetry().start(make_call(model="unknown-model"), SERVER).end(usage=Usage(input_tokens=20, output_tokens=5))
    attributes = dict(otel.spans()[-1].attributes or {})
    assert attributes[sc.LLM_TOKEN_COUNT_TOTAL] == 25
    assert not any(key.startswith("llm.cost.") for key in attributes)


@pytest.mark.parametrize(
    ("api", "provider", "host", "llm_provider", "llm_system"),
    [
        (Api.CHAT, Provider.OPENAI, "api.openai.com", "openai", "openai"),
        (Api.RESPONSES, Provider.OPENAI, "api.openai.com", "openai", "openai"),
        (Api.MESSAGES, Provider.ANTHROPIC, "api.anthropic.com", "anthropic", "anthropic"),
        (Api.CHAT, Provider.OPENAI_COMPATIBLE, "myres.openai.azure.com", "azure", "openai"),
        (Api.CHAT, Provider.OPENAI_COMPATIBLE, "generativelanguage.googleapis.com", "google", "openai"),
        (Api.CHAT, Provider.OPENAI_COMPATIBLE, "api.mistral.ai", "mistralai", "openai"),
        (Api.CHAT, Provider.OPENAI_COMPATIBLE, "api.moonshot.ai", "moonshot", "openai"),
        (Api.CHAT, Provider.OPENAI_COMPATIBLE, "api.x.ai", "xai", "openai"),
        (Api.CHAT, Provider.OPENAI_COMPATIBLE, "127.0.0.1", "openai", "openai"),
    ],
)
def test_provider_and_system_are_spelled_as_openinference_spells_them(
    otel: Otel, api: Api, provider: Provider, host: str, llm_provider: str, llm_system: str
) -> None:
    otel.telemetry().start(make_call(api, provider), (host, 443)).end()
    attributes = otel.spans()[-1].attributes or {}
    assert (attributes[sc.LLM_PROVIDER], attributes[sc.LLM_SYSTEM]) == (llm_provider, llm_system)


def test_only_the_call_span_is_an_llm_span_so_phoenix_counts_its_tokens_once(otel: Otel) -> None:
    record = otel.telemetry().start(make_call(stream=True), SERVER)
    stream_through(record, chunks=3)
    record.end(usage=Usage(input_tokens=20, output_tokens=3))
    kinds = {span.name: (span.attributes or {}).get(sc.OPENINFERENCE_SPAN_KIND) for span in otel.spans()}
    assert kinds == {"prefill": None, "decode": None, "chat gpt-4o-mini": "LLM"}
