"""What a stream's events say beyond text and usage reaches the span as a whole answer's would:
Anthropic's cache diagnosis (in `message_start`), OpenAI's service tier and system fingerprint.
Real clients over loopback against the simulator, the real OpenTelemetry SDK."""

from __future__ import annotations

from typing import Any

import sdk
from sdk.telemetry import semconv as sc
from tests.sdk.helpers import LONG_SYSTEM, collect, resolve
from tests.sdk.test_telemetry_spans import Otel, otel  # noqa: F401

QUESTION = [{"role": "user", "content": "What is prefill?"}]


async def test_a_streamed_anthropic_answer_carries_the_servers_cache_miss_reason(anthropic_client: Any, otel: Otel) -> None:
    wrapped = sdk.wrap(anthropic_client, tracer_provider=otel.tracer_provider, provider="anthropic")
    for system in (LONG_SYSTEM, LONG_SYSTEM + " Be terse."):
        await collect(await resolve(wrapped.messages.create(
            model="claude-sonnet-4-6", max_tokens=64, system=system, messages=QUESTION, stream=True)))
    first, second = (dict(span.attributes or {}) for span in otel.spans() if span.parent is None)
    assert sc.KVWISE_PREFIX_BREAK_CAUSE_SERVER not in first
    assert (second[sc.KVWISE_PREFIX_BREAK_CAUSE], second[sc.KVWISE_PREFIX_BREAK_CAUSE_SERVER]) == ("system_changed",) * 2


async def test_a_streamed_openai_answer_carries_its_service_tier_and_system_fingerprint(
    openai_client: Any, otel: Otel
) -> None:
    wrapped = sdk.wrap(openai_client, tracer_provider=otel.tracer_provider)
    chunks = await collect(await resolve(wrapped.chat.completions.create(
        model="gpt-4o-mini", messages=QUESTION, stream=True, service_tier="auto")))
    [root] = [span for span in otel.spans() if span.parent is None]
    attributes = dict(root.attributes or {})
    assert attributes[sc.OPENAI_REQUEST_SERVICE_TIER] == "auto"
    assert attributes[sc.OPENAI_RESPONSE_SERVICE_TIER] == chunks[0].service_tier
    assert attributes[sc.OPENAI_RESPONSE_SYSTEM_FINGERPRINT] == chunks[0].system_fingerprint
