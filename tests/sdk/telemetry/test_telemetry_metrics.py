"""The GenAI client histograms and kvwise counters, read back through an in-memory metric reader."""

from __future__ import annotations

import pytest

from sdk import semconv as sc
from sdk.call import Api, Provider, Usage
from sdk.lifecycle import CallEnd, Ending
from tests.sdk.telemetry.test_telemetry_spans import SERVER, Otel, make_call, otel, stream_through  # noqa: F401


def _points(otel: Otel, name: str) -> list[object]:
    return list(otel.metrics()[name].data.data_points)


def test_histograms_have_semconv_names_units_and_bucket_boundaries(otel: Otel) -> None:
    telemetry = otel.telemetry()
    telemetry.start(make_call(), SERVER).end(CallEnd(Ending.ANSWERED, usage=Usage(input_tokens=100, output_tokens=10)))
    streamed = telemetry.start(make_call(stream=True), SERVER)
    stream_through(streamed, chunks=4)
    streamed.end(CallEnd(Ending.ANSWERED, usage=Usage(input_tokens=100, output_tokens=4)))
    metrics = otel.metrics()
    expected = {
        sc.GEN_AI_CLIENT_TOKEN_USAGE: ("{token}", sc.TOKEN_BUCKETS),
        sc.GEN_AI_CLIENT_OPERATION_DURATION: ("s", sc.DURATION_BUCKETS),
        sc.GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK: ("s", sc.DURATION_BUCKETS),
        sc.GEN_AI_CLIENT_OPERATION_TIME_PER_OUTPUT_CHUNK: ("s", sc.DURATION_BUCKETS),
    }
    for name, (unit, buckets) in expected.items():
        assert metrics[name].unit == unit
        for point in metrics[name].data.data_points:
            assert tuple(point.explicit_bounds) == tuple(float(b) for b in buckets)
    assert sum(p.count for p in _points(otel, sc.GEN_AI_CLIENT_OPERATION_DURATION)) == 2
    assert sum(p.count for p in _points(otel, sc.GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK)) == 1


def test_token_usage_is_recorded_per_token_type_with_the_call_identity(otel: Otel) -> None:
    record = otel.telemetry().start(
        make_call(Api.MESSAGES, Provider.ANTHROPIC, model="claude-haiku-4-5", max_tokens=9), SERVER
    )
    record.end(
        CallEnd(
            Ending.ANSWERED, usage=Usage(input_tokens=1200, output_tokens=9), response_model="claude-haiku-4-5-20251001"
        )
    )
    by_type = {p.attributes[sc.GEN_AI_TOKEN_TYPE]: p for p in _points(otel, sc.GEN_AI_CLIENT_TOKEN_USAGE)}
    assert by_type["input"].sum == 1200 and by_type["output"].sum == 9
    assert dict(by_type["input"].attributes) == {
        sc.GEN_AI_OPERATION_NAME: "chat",
        sc.GEN_AI_PROVIDER_NAME: "anthropic",
        sc.GEN_AI_REQUEST_MODEL: "claude-haiku-4-5",
        sc.GEN_AI_TOKEN_TYPE: "input",
    }


def test_time_per_output_chunk_is_one_mean_per_streamed_call(otel: Otel) -> None:
    record = otel.telemetry().start(make_call(stream=True), SERVER)
    stream_through(record, chunks=200)
    record.end(CallEnd(Ending.ANSWERED))
    [point] = _points(otel, sc.GEN_AI_CLIENT_OPERATION_TIME_PER_OUTPUT_CHUNK)
    assert point.count == 1
    prefill_end = otel.span("prefill").end_time
    decode = otel.span("decode")
    assert point.sum == pytest.approx((decode.end_time - prefill_end) / 199 / 1e9)


def test_a_non_streamed_call_records_no_chunk_metrics(otel: Otel) -> None:
    otel.telemetry().start(make_call(), SERVER).end(
        CallEnd(Ending.ANSWERED, usage=Usage(input_tokens=1, output_tokens=1))
    )
    metrics = otel.metrics()
    assert sc.GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK not in metrics
    assert sc.GEN_AI_CLIENT_OPERATION_TIME_PER_OUTPUT_CHUNK not in metrics


def test_a_failed_call_records_its_duration_with_the_error_type(otel: Otel) -> None:
    otel.telemetry().start(make_call(), SERVER).end(CallEnd(Ending.FAILED, error=ConnectionError("refused")))
    [point] = _points(otel, sc.GEN_AI_CLIENT_OPERATION_DURATION)
    assert point.attributes[sc.ERROR_TYPE] == "ConnectionError"
    assert sc.GEN_AI_CLIENT_TOKEN_USAGE not in otel.metrics()


def test_cache_reads_and_cost_are_counted_across_calls(otel: Otel) -> None:
    telemetry = otel.telemetry()
    for _ in range(3):
        telemetry.start(make_call(model="gpt-4o"), SERVER).end(
            CallEnd(Ending.ANSWERED, usage=Usage(input_tokens=2048, output_tokens=100, cache_read_tokens=1024))
        )
    [reads] = _points(otel, sc.KVWISE_CACHE_READ_TOKENS)
    [cost] = _points(otel, sc.KVWISE_COST_USD)
    assert reads.value == 3 * 1024
    per_call = (1024 * 2.5 + 1024 * 1.25 + 100 * 10.0) / 1e6
    assert cost.value == pytest.approx(3 * per_call)
    assert otel.metrics()[sc.KVWISE_COST_USD].unit == "USD"
