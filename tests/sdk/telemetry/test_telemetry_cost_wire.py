"""Cost on the span and the counter, end to end: the TTL a request wrote with, and gpt-5.6's billed writes.

Real clients over loopback against the simulator, the real OpenTelemetry SDK; every figure is checked
against a hand computation from the token counts the server reported and the published rates.
"""

from __future__ import annotations

from typing import Any

import pytest

import sdk
from sdk import semconv as sc
from tests.sdk.helpers import LONG_SYSTEM, collect, resolve
from tests.sdk.telemetry.test_telemetry_spans import Otel, otel  # noqa: F401

CLAUDE = "claude-sonnet-4-6"
SONNET_4_6 = {"input": 3.0, "cached_input": 0.3, "write_5m": 3.75, "write_1h": 6.0, "output": 15.0}
"""USD per million tokens, from Anthropic's pricing page: 1h writes 2x input, 5m writes 1.25x input."""
GPT_5_6 = {"input": 4.0, "cached_input": 0.4, "write": 5.0, "output": 20.0}
"""USD per million tokens: gpt-5.6 bills cache writes at 1.25x input."""


def _wrap(client: Any, otel: Otel, policy: sdk.Policy) -> Any:
    return sdk.wrap(client, policy, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)


def _cost_counter(otel: Otel) -> float:
    [point] = otel.metrics()[sc.KVWISE_COST_USD].data.data_points
    return point.value


async def test_a_one_hour_ttl_anthropic_call_is_priced_with_the_one_hour_write_rate(
    anthropic_client: Any, otel: Otel
) -> None:
    wrapped = _wrap(anthropic_client, otel, sdk.Policy(cache_ttl="1h"))
    answer = await resolve(
        wrapped.messages.create(
            model=CLAUDE, max_tokens=64, system=LONG_SYSTEM, messages=[{"role": "user", "content": "What is prefill?"}]
        )
    )
    usage = answer.usage
    written_1h = usage.cache_creation.ephemeral_1h_input_tokens
    assert written_1h == usage.cache_creation_input_tokens > 0  # every write had the 1h TTL
    rates = SONNET_4_6
    expected_write = written_1h * rates["write_1h"] / 1e6
    expected = expected_write + usage.input_tokens * rates["input"] / 1e6 + usage.output_tokens * rates["output"] / 1e6
    [span] = otel.spans()
    attributes = span.attributes or {}
    assert attributes[sc.KVWISE_COST_CACHE_WRITE_USD] == pytest.approx(expected_write)
    assert attributes[sc.KVWISE_COST_USD] == pytest.approx(expected)
    assert _cost_counter(otel) == pytest.approx(expected)
    assert attributes[sc.KVWISE_COST_CACHE_WRITE_USD] > written_1h * rates["write_5m"] / 1e6  # not the 5m rate


async def test_a_gpt_5_6_call_with_cache_writes_is_priced_with_its_write_rate(openai_client: Any, otel: Otel) -> None:
    wrapped = _wrap(openai_client, otel, sdk.Policy())
    messages = [{"role": "system", "content": LONG_SYSTEM}, {"role": "user", "content": "What is prefill?"}]
    answer = await resolve(wrapped.chat.completions.create(model="gpt-5.6", messages=messages))
    usage = answer.usage
    written = usage.prompt_tokens_details.cache_write_tokens
    assert written > 0 and usage.prompt_tokens_details.cached_tokens == 0
    rates = GPT_5_6
    uncached = usage.prompt_tokens - written
    expected = (uncached * rates["input"] + written * rates["write"] + usage.completion_tokens * rates["output"]) / 1e6
    [span] = otel.spans()
    attributes = span.attributes or {}
    assert attributes[sc.KVWISE_COST_CACHE_WRITE_USD] == pytest.approx(written * rates["write"] / 1e6)
    assert attributes[sc.KVWISE_COST_USD] == pytest.approx(expected)
    assert _cost_counter(otel) == pytest.approx(expected)


async def test_a_streamed_one_hour_ttl_call_keeps_the_one_hour_rate_from_message_start(
    anthropic_client: Any, otel: Otel
) -> None:
    wrapped = _wrap(anthropic_client, otel, sdk.Policy(cache_ttl="1h"))
    stream = await resolve(
        wrapped.messages.create(
            model=CLAUDE,
            max_tokens=64,
            system=LONG_SYSTEM,
            messages=[{"role": "user", "content": "What is prefill?"}],
            stream=True,
        )
    )
    events = await collect(stream)
    start_usage = events[0].message.usage
    written_1h = start_usage.cache_creation.ephemeral_1h_input_tokens
    assert written_1h == start_usage.cache_creation_input_tokens > 0
    [root] = [span for span in otel.spans() if span.parent is None]
    assert (root.attributes or {})[sc.KVWISE_COST_CACHE_WRITE_USD] == pytest.approx(
        written_1h * SONNET_4_6["write_1h"] / 1e6
    )
