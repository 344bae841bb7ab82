"""Time to first chunk as the conventions define it: from the send of the request that produced the
chunk to the first chunk received, of any kind; tool-call streams get it too, with their decode span.
Real clients over loopback against the simulator, the real OpenTelemetry SDK."""

from __future__ import annotations

from time import time_ns
from typing import Any

import sdk
from sdk import semconv as sc
from sdk.lifecycle import CallEnd, Ending
from tests.sdk.helpers import collect, resolve
from tests.sdk.telemetry.test_telemetry_spans import SERVER, Otel, make_call, otel  # noqa: F401

RETRY_AFTER_MS = "300"
CONTENT_GAP_S = 0.2
QUESTION = [{"role": "user", "content": "Weather in Paris?"}]


def _wrap(client: Any, otel: Otel) -> Any:
    return sdk.wrap(client, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)


def _call_and_phases(otel: Otel) -> tuple[Any, dict[str, Any]]:
    [root] = [span for span in otel.spans() if span.parent is None]
    return root, {span.name: span for span in otel.spans() if span.parent is not None}


def _ttft_points(otel: Otel) -> list[Any]:
    return list(otel.metrics()[sc.GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK].data.data_points)


def test_time_to_first_chunk_runs_from_the_attempts_send_to_the_chunk_received(otel: Otel) -> None:
    record = otel.telemetry().start(make_call(stream=True), SERVER)
    record.attempt(1)
    record.attempt(2)  # the first attempt failed: the second one is what produced the chunks
    received = time_ns()  # a header event, before the first content chunk below
    record.first_chunk(received_ns=received)
    record.chunk()
    record.end(CallEnd(Ending.ANSWERED))
    root, phases = _call_and_phases(otel)
    sent = phases["prefill"].start_time  # the prefill span starts at the answering attempt's send
    assert root.attributes[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] == (received - sent) / 1e9
    assert phases["prefill"].end_time >= received  # prefill still ends at the first content chunk
    [point] = _ttft_points(otel)
    assert point.sum == (received - sent) / 1e9


async def test_a_retried_stream_measures_from_the_attempt_that_answered(
    simulator: Any, openai_client: Any, otel: Otel
) -> None:
    simulator.fail(503, headers={"retry-after-ms": RETRY_AFTER_MS})
    stream = await resolve(
        _wrap(openai_client, otel).chat.completions.create(model="gpt-4o-mini", messages=QUESTION, stream=True)
    )
    await collect(stream)
    root, phases = _call_and_phases(otel)
    ttft_ns = root.attributes[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] * 1e9
    assert root.attributes[sc.KVWISE_ATTEMPTS] == 2
    waited_ns = phases["prefill"].start_time - root.start_time  # the first attempt and the Retry-After wait
    assert waited_ns >= int(RETRY_AFTER_MS) * 1e6
    assert ttft_ns <= phases["prefill"].end_time - phases["prefill"].start_time  # counted from the second send
    assert ttft_ns < phases["prefill"].end_time - root.start_time - waited_ns + 1  # none of the wait in it


async def test_a_stream_of_tool_call_deltas_only_gets_a_time_to_first_chunk_and_a_decode_span(
    simulator: Any, openai_client: Any, anthropic_client: Any, otel: Otel
) -> None:
    simulator.tool_call = "get_weather"
    simulator.reply = '{"city": "Paris", "unit": "celsius"}'
    await collect(
        await resolve(
            _wrap(openai_client, otel).chat.completions.create(model="gpt-4o-mini", messages=QUESTION, stream=True)
        )
    )
    await collect(
        await resolve(
            _wrap(anthropic_client, otel).messages.create(
                model="claude-haiku-4-5", max_tokens=64, messages=QUESTION, stream=True
            )
        )
    )
    roots = [span for span in otel.spans() if span.parent is None]
    assert len(roots) == 2
    for root in roots:
        assert root.attributes[sc.GEN_AI_RESPONSE_FINISH_REASONS][0] in ("tool_calls", "tool_use")
        assert root.attributes[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] >= 0
        phases = {s.name: s for s in otel.spans() if s.parent is not None and s.parent.span_id == root.context.span_id}
        assert {"prefill", "decode"} <= set(phases)
        assert phases["decode"].attributes[sc.KVWISE_STREAM_CHUNKS] >= 2
    assert sum(point.count for point in _ttft_points(otel)) == 2


async def test_the_first_chunk_is_the_first_one_received_even_a_header_before_any_content(
    simulator: Any, anthropic_client: Any, otel: Otel
) -> None:
    simulator.first_content_delay = CONTENT_GAP_S  # message_start, then a pause, then the first text delta
    await collect(
        await resolve(
            _wrap(anthropic_client, otel).messages.create(
                model="claude-haiku-4-5", max_tokens=64, messages=QUESTION, stream=True
            )
        )
    )
    root, phases = _call_and_phases(otel)
    prefill_ns = phases["prefill"].end_time - phases["prefill"].start_time  # to the first content chunk
    assert prefill_ns >= CONTENT_GAP_S * 1e9
    assert root.attributes[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] * 1e9 < prefill_ns  # to message_start, before it
