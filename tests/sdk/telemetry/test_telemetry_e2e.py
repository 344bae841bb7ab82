"""Telemetry of wrapped calls end to end: real clients, sync and async, against the provider simulator."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import sdk
from sdk import semconv as sc
from tests.sdk.helpers import LONG_SYSTEM, collect, resolve
from tests.sdk.telemetry.test_telemetry_content import SECRET_ANSWER, SECRET_PROMPT, SECRET_SYSTEM
from tests.sdk.telemetry.test_telemetry_resilience import RaisingExporter
from tests.sdk.telemetry.test_telemetry_spans import Otel, otel  # noqa: F401

MODEL = "gpt-4o-mini"
CLAUDE = "claude-sonnet-4-6"
FIRST_TOKEN_DELAY_S = 0.3
USAGE_IN_STREAM = {"include_usage": True}


def _wrap(client: Any, otel: Otel, policy: sdk.Policy | None = None) -> Any:
    return sdk.wrap(client, policy, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)


def _roots(otel: Otel) -> list[ReadableSpan]:
    return [span for span in otel.spans() if span.parent is None]


def _children(otel: Otel, parent: ReadableSpan) -> dict[str, ReadableSpan]:
    return {s.name: s for s in otel.spans() if s.parent is not None and s.parent.span_id == parent.context.span_id}


def _seconds(span: ReadableSpan) -> float:
    return ((span.end_time or 0) - (span.start_time or 0)) / 1e9


@pytest.fixture
def traced_anthropic_client(simulator: Any, mode: str, otel: Otel) -> Any:
    """An Anthropic client whose own tracing (on by default in 2.x) goes to the test's provider."""
    cls = anthropic.Anthropic if mode == "sync" else anthropic.AsyncAnthropic
    return cls(
        base_url=simulator.anthropic_base_url,
        api_key="test-key",
        max_retries=0,
        open_telemetry={"tracer_provider": otel.tracer_provider},
    )


async def test_a_slow_first_token_shows_as_prefill_and_a_repeated_long_prompt_as_cache_reads(
    simulator: Any, openai_client: Any, otel: Otel
) -> None:
    simulator.first_token_delay = FIRST_TOKEN_DELAY_S
    wrapped = _wrap(openai_client, otel)
    messages = [{"role": "system", "content": LONG_SYSTEM}, {"role": "user", "content": "What is prefill?"}]
    for _ in range(2):
        await collect(
            await resolve(
                wrapped.chat.completions.create(
                    model=MODEL, messages=messages, stream=True, stream_options=USAGE_IN_STREAM
                )
            )
        )
    roots = _roots(otel)
    assert [root.name for root in roots] == [f"chat {MODEL}"] * 2
    for root in roots:
        phases = _children(otel, root)
        assert set(phases) == {"prefill", "decode"}
        assert _seconds(phases["prefill"]) >= FIRST_TOKEN_DELAY_S
        assert (root.attributes or {})[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] >= FIRST_TOKEN_DELAY_S
    second = roots[1].attributes or {}
    assert second[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] >= 1024
    assert 0 < second[sc.KVWISE_CACHE_HIT_RATIO] <= 1


async def test_anthropic_cache_reads_and_writes_are_recorded_under_one_root_span_per_call(
    traced_anthropic_client: Any, otel: Otel
) -> None:
    wrapped = _wrap(traced_anthropic_client, otel)
    turns: list[dict[str, Any]] = [{"role": "user", "content": "What is prefill?"}]
    first = await resolve(wrapped.messages.create(model=CLAUDE, max_tokens=64, system=LONG_SYSTEM, messages=turns))
    turns += [
        {"role": "assistant", "content": f"{first.content[0].text} {LONG_SYSTEM}"},
        {"role": "user", "content": "And decode?"},
    ]
    second = await resolve(wrapped.messages.create(model=CLAUDE, max_tokens=64, system=LONG_SYSTEM, messages=turns))
    roots = _roots(otel)
    assert [root.name for root in roots] == [f"chat {CLAUDE}"] * 2
    for root, response in zip(roots, (first, second)):
        assert set(_children(otel, root)) == {"anthropic.messages.create"}  # the client's own span, under ours
        usage, attributes = response.usage, root.attributes or {}
        assert attributes[sc.GEN_AI_USAGE_INPUT_TOKENS] == (
            usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
        )
        assert attributes[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == usage.cache_read_input_tokens
        assert attributes[sc.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS] == usage.cache_creation_input_tokens
    assert second.usage.cache_read_input_tokens > 0 and second.usage.cache_creation_input_tokens > 0


async def test_an_anthropic_stream_has_its_phases_and_the_clients_own_span_under_our_root(
    traced_anthropic_client: Any, otel: Otel
) -> None:
    wrapped = _wrap(traced_anthropic_client, otel)
    await collect(
        await resolve(
            wrapped.messages.create(
                model=CLAUDE, max_tokens=64, messages=[{"role": "user", "content": "Hi"}], stream=True
            )
        )
    )
    [root] = _roots(otel)
    assert set(_children(otel, root)) == {"prefill", "decode", "anthropic.messages.create"}
    assert len(otel.spans()) == 4


async def test_metrics_are_recorded_after_streamed_and_non_streamed_calls(
    simulator: Any, openai_client: Any, otel: Otel
) -> None:
    wrapped = _wrap(openai_client, otel)
    messages = [{"role": "user", "content": "Hi"}]
    await resolve(wrapped.chat.completions.create(model=MODEL, messages=messages))
    await collect(
        await resolve(
            wrapped.chat.completions.create(model=MODEL, messages=messages, stream=True, stream_options=USAGE_IN_STREAM)
        )
    )
    metrics = otel.metrics()
    assert {name: metrics[name].unit for name in metrics} == {
        sc.GEN_AI_CLIENT_TOKEN_USAGE: "{token}",
        sc.GEN_AI_CLIENT_OPERATION_DURATION: "s",
        sc.GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK: "s",
        sc.GEN_AI_CLIENT_OPERATION_TIME_PER_OUTPUT_CHUNK: "s",
        sc.KVWISE_COST_USD: "USD",
    }
    [duration] = metrics[sc.GEN_AI_CLIENT_OPERATION_DURATION].data.data_points
    assert duration.count == 2 and tuple(duration.explicit_bounds) == sc.DURATION_BUCKETS
    token_points = metrics[sc.GEN_AI_CLIENT_TOKEN_USAGE].data.data_points
    assert {p.attributes[sc.GEN_AI_TOKEN_TYPE]: p.count for p in token_points} == {"input": 2, "output": 2}
    assert all(tuple(p.explicit_bounds) == tuple(map(float, sc.TOKEN_BUCKETS)) for p in token_points)


async def _secret_stream(client: Any, otel: Otel, policy: sdk.Policy | None = None) -> None:
    wrapped = _wrap(client, otel, policy)
    messages = [{"role": "system", "content": SECRET_SYSTEM}, {"role": "user", "content": SECRET_PROMPT}]
    await collect(
        await resolve(
            wrapped.chat.completions.create(model=MODEL, messages=messages, stream=True, stream_options=USAGE_IN_STREAM)
        )
    )


async def test_no_content_reaches_spans_events_or_metrics_by_default(
    simulator: Any, openai_client: Any, otel: Otel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(sc.CAPTURE_MESSAGE_CONTENT_ENV, raising=False)
    simulator.reply = SECRET_ANSWER
    await _secret_stream(openai_client, otel)
    exported = json.dumps(
        [dict(s.attributes or {}) for s in otel.spans()]
        + [dict(e.attributes or {}) for s in otel.spans() for e in s.events]
        + [m.to_json() for m in otel.metrics().values()],
        default=str,
    )
    assert SECRET_PROMPT not in exported and SECRET_SYSTEM not in exported and SECRET_ANSWER not in exported


async def test_with_capture_on_the_messages_appear_in_the_semconv_attributes(
    simulator: Any, openai_client: Any, otel: Otel
) -> None:
    simulator.reply = SECRET_ANSWER
    await _secret_stream(openai_client, otel, sdk.Policy(capture_content=True))
    attributes = _roots(otel)[0].attributes or {}
    assert json.loads(attributes[sc.GEN_AI_SYSTEM_INSTRUCTIONS]) == [{"type": "text", "content": SECRET_SYSTEM}]
    assert json.loads(attributes[sc.GEN_AI_INPUT_MESSAGES])[-1] == {
        "role": "user",
        "parts": [{"type": "text", "content": SECRET_PROMPT}],
    }
    [answer] = json.loads(attributes[sc.GEN_AI_OUTPUT_MESSAGES])
    assert answer["role"] == "assistant" and SECRET_ANSWER in answer["parts"][0]["content"]


async def test_a_loop_guard_trip_is_visible_on_the_span(simulator: Any, openai_client: Any, otel: Otel) -> None:
    simulator.loop("I will keep repeating this sentence. ")
    simulator.token_delay = 0.002
    wrapped = _wrap(openai_client, otel, sdk.Policy(max_output_tokens=2000))
    await collect(
        await resolve(
            wrapped.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Talk."}], stream=True)
        )
    )
    attributes = _roots(otel)[0].attributes or {}
    assert attributes[sc.KVWISE_GUARD_TRIPPED] == "loop"
    assert 0 < attributes[sc.KVWISE_GUARD_TOKENS_SAVED] < 2000
    assert attributes[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("length",)


async def test_a_retried_call_is_one_span_with_two_attempts(simulator: Any, openai_client: Any, otel: Otel) -> None:
    """The client's own retry, counted from what its answer says: a stream's request (a parsed answer
    keeps no trace)."""
    simulator.fail(status=429, times=1, headers={"retry-after-ms": "5"})
    wrapped = _wrap(openai_client, otel)
    await collect(
        await resolve(
            wrapped.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], stream=True)
        )
    )
    [root] = _roots(otel)
    assert (root.attributes or {})[sc.KVWISE_ATTEMPTS] == 2 and sc.ERROR_TYPE not in (root.attributes or {})


async def test_a_failed_call_records_the_clients_error_type(simulator: Any, openai_client: Any, otel: Otel) -> None:
    simulator.fail(status=400, times=1)
    wrapped = _wrap(openai_client, otel)
    with pytest.raises(Exception) as raised:
        await resolve(wrapped.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}]))
    [root] = _roots(otel)
    assert (root.attributes or {})[sc.ERROR_TYPE] == type(raised.value).__qualname__ == "BadRequestError"


async def test_calls_succeed_when_the_exporter_raises_on_every_export(simulator: Any, openai_client: Any) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(RaisingExporter()))
    wrapped = sdk.wrap(openai_client, sdk.Policy(capture_content=True), tracer_provider=provider)
    messages = [{"role": "user", "content": "Hi"}]
    response = await resolve(wrapped.chat.completions.create(model=MODEL, messages=messages))
    events = await collect(await resolve(wrapped.chat.completions.create(model=MODEL, messages=messages, stream=True)))
    assert response.choices[0].message.content
    assert events[-1].choices[0].finish_reason == "stop"
