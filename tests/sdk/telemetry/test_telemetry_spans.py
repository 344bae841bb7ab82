"""The call recorder with the real OpenTelemetry SDK: span, phases, attributes, errors.

Also home of the `otel` fixture (in-memory span exporter, metric reader and log exporter) that the
other `test_telemetry_*` modules import.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, Metric
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind, StatusCode

from sdk import semconv as sc
from sdk.adapters import adapter_for
from sdk.adapters.anthropic_messages import messages_usage
from sdk.cache.fanout import Waited
from sdk.call import Api, Call, Provider, Usage
from sdk.errors import StreamTruncated
from sdk.lifecycle import CallEnd, Ending
from sdk.policy import Policy
from sdk.telemetry import CallRecord, Telemetry

SERVER = ("127.0.0.1", 8000)


@dataclass
class Otel:
    """Real SDK providers wired to in-memory exporters."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    logger_provider: LoggerProvider
    spans_exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    logs_exporter: InMemoryLogRecordExporter

    def telemetry(self, policy: Policy | None = None) -> Telemetry:
        return Telemetry(
            policy or Policy(), self.tracer_provider, self.meter_provider, logger_provider=self.logger_provider
        )

    def spans(self) -> tuple[ReadableSpan, ...]:
        return self.spans_exporter.get_finished_spans()

    def span(self, name: str) -> ReadableSpan:
        [found] = [span for span in self.spans() if span.name == name]
        return found

    def metrics(self) -> dict[str, Metric]:
        data = self.reader.get_metrics_data()
        if data is None:
            return {}
        return {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}

    def events(self) -> list[Any]:
        return [readable.log_record for readable in self.logs_exporter.get_finished_logs()]


@pytest.fixture
def otel() -> Iterator[Otel]:
    spans_exporter, reader, logs_exporter = InMemorySpanExporter(), InMemoryMetricReader(), InMemoryLogRecordExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans_exporter))
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs_exporter))
    meter_provider = MeterProvider(metric_readers=[reader])
    yield Otel(tracer_provider, meter_provider, logger_provider, spans_exporter, reader, logs_exporter)
    tracer_provider.shutdown()
    meter_provider.shutdown()
    logger_provider.shutdown()


def make_call(api: Api = Api.CHAT, provider: Provider = Provider.OPENAI, **kwargs: Any) -> Call:
    """A `Call` as the wrapper builds it, from native kwargs of `api`."""
    native: dict[str, Any] = {"model": "gpt-4o-mini", **kwargs}
    if api is Api.RESPONSES:
        native.setdefault("input", "What is prefill?")
    else:
        native.setdefault("messages", [{"role": "user", "content": "What is prefill?"}])
    return adapter_for(api).to_call(native, provider)


def stream_through(record: CallRecord, chunks: int) -> None:
    """Drive `record` the way the stream guard does for `chunks` content chunks."""
    record.attempt(1)
    for index in range(chunks):
        if index == 0:
            record.first_chunk()
        record.chunk()


def test_a_non_streamed_call_is_one_client_span_named_after_operation_and_model(otel: Otel) -> None:
    record = otel.telemetry().start(make_call(max_tokens=64, temperature=0.2, seed=7), SERVER)
    record.attempt(1)
    record.end(
        CallEnd(
            Ending.ANSWERED,
            usage=Usage(input_tokens=30, output_tokens=5),
            response_id="r1",
            response_model="gpt-4o-mini-2024-07-18",
            finish_reasons=("stop",),
        )
    )
    [span] = otel.spans()
    assert span.name == "chat gpt-4o-mini" and span.kind is SpanKind.CLIENT and span.parent is None
    assert (
        dict(span.attributes or {}).items()
        >= {
            sc.GEN_AI_OPERATION_NAME: "chat",
            sc.GEN_AI_PROVIDER_NAME: "openai",
            sc.GEN_AI_REQUEST_MODEL: "gpt-4o-mini",
            sc.GEN_AI_REQUEST_MAX_TOKENS: 64,
            sc.GEN_AI_REQUEST_TEMPERATURE: 0.2,
            sc.GEN_AI_REQUEST_SEED: 7,
            sc.GEN_AI_RESPONSE_ID: "r1",
            sc.GEN_AI_RESPONSE_MODEL: "gpt-4o-mini-2024-07-18",
            sc.GEN_AI_RESPONSE_FINISH_REASONS: ("stop",),
            sc.GEN_AI_USAGE_INPUT_TOKENS: 30,
            sc.GEN_AI_USAGE_OUTPUT_TOKENS: 5,
            sc.SERVER_ADDRESS: "127.0.0.1",
            sc.SERVER_PORT: 8000,
            sc.KVWISE_ATTEMPTS: 1,
        }.items()
    )
    assert sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK not in (span.attributes or {})
    assert sc.GEN_AI_REQUEST_STREAM not in (span.attributes or {})  # set if and only if streaming


def test_a_streamed_call_has_prefill_then_decode_children_split_at_the_first_chunk(otel: Otel) -> None:
    record = otel.telemetry().start(make_call(stream=True), SERVER)
    stream_through(record, chunks=3)
    record.end(CallEnd(Ending.ANSWERED, usage=Usage(input_tokens=30, output_tokens=3), finish_reasons=("stop",)))
    root, prefill, decode = otel.span("chat gpt-4o-mini"), otel.span("prefill"), otel.span("decode")
    assert prefill.parent is not None and prefill.parent.span_id == root.context.span_id
    assert decode.parent is not None and decode.parent.span_id == root.context.span_id
    assert (
        root.start_time
        <= prefill.start_time
        <= prefill.end_time
        == decode.start_time
        <= decode.end_time
        <= root.end_time
    )
    attributes = root.attributes or {}
    assert (
        attributes[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] == (prefill.end_time - prefill.start_time) / 1e9
    )  # from the send
    assert attributes[sc.KVWISE_STREAM_CHUNKS] == 3 and (decode.attributes or {})[sc.KVWISE_STREAM_CHUNKS] == 3


def test_prefill_starts_when_the_last_attempt_is_sent(otel: Otel) -> None:
    record = otel.telemetry().start(make_call(stream=True), SERVER)
    record.attempt(1)
    record.attempt(2)
    record.first_chunk()
    record.chunk()
    record.end(CallEnd(Ending.ANSWERED, usage=None))
    assert otel.span("prefill").start_time > otel.span("chat gpt-4o-mini").start_time
    assert (otel.span("chat gpt-4o-mini").attributes or {})[sc.KVWISE_ATTEMPTS] == 2


def test_a_stream_abandoned_before_its_first_chunk_still_ends_its_prefill_span(otel: Otel) -> None:
    record = otel.telemetry().start(make_call(stream=True), SERVER)
    record.attempt(1)
    record.end(CallEnd(Ending.ABANDONED))
    assert {span.name for span in otel.spans()} == {"chat gpt-4o-mini", "prefill"}
    root = otel.span("chat gpt-4o-mini")
    assert (root.attributes or {})[sc.KVWISE_STREAM_ABANDONED] is True
    assert sc.ERROR_TYPE not in (root.attributes or {}) and root.status.status_code is not StatusCode.ERROR


def test_a_loop_guard_trip_is_recorded_with_the_tokens_it_saved(otel: Otel) -> None:
    record = otel.telemetry().start(make_call(stream=True, max_tokens=100), SERVER)
    stream_through(record, chunks=40)
    record.end(CallEnd(Ending.CUT, finish_reasons=("length",), guard="loop", tokens_saved=60))
    attributes = otel.span("chat gpt-4o-mini").attributes or {}
    assert attributes[sc.KVWISE_GUARD_TRIPPED] == "loop" and attributes[sc.KVWISE_GUARD_TOKENS_SAVED] == 60
    assert sc.ERROR_TYPE not in attributes


def test_end_records_a_call_only_once(otel: Otel) -> None:
    record = otel.telemetry().start(make_call(), SERVER)
    record.end(CallEnd(Ending.ANSWERED, usage=Usage(input_tokens=1, output_tokens=1)))
    record.end(CallEnd(Ending.FAILED, error=RuntimeError("late")))
    [span] = otel.spans()
    assert sc.ERROR_TYPE not in (span.attributes or {})
    assert otel.metrics()[sc.GEN_AI_CLIENT_OPERATION_DURATION].data.data_points[0].count == 1


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (TimeoutError("slow"), "TimeoutError"),
        (StreamTruncated("cut"), "stream_truncated"),
        ("stream_truncated", "stream_truncated"),
        ("", "_OTHER"),
    ],
)
def test_a_failed_call_reports_error_type_and_error_status(otel: Otel, error: Any, expected: str) -> None:
    otel.telemetry().start(make_call(), SERVER).end(CallEnd(Ending.FAILED, error=error))
    [span] = otel.spans()
    assert (span.attributes or {})[sc.ERROR_TYPE] == expected
    assert span.status.status_code is StatusCode.ERROR and span.status.description == expected


def test_spans_started_while_the_record_is_active_are_children_of_the_call_span(otel: Otel) -> None:
    record = otel.telemetry().start(make_call(), SERVER)
    with record.activate():
        otel.tracer_provider.get_tracer("client").start_span("anthropic.messages.create").end()
    record.end(CallEnd(Ending.ANSWERED))
    child, root = otel.span("anthropic.messages.create"), otel.span("chat gpt-4o-mini")
    assert child.parent is not None and child.parent.span_id == root.context.span_id
    assert child.context.trace_id == root.context.trace_id


def test_the_active_block_lets_the_callers_exception_through_and_restores_the_context(otel: Otel) -> None:
    from opentelemetry import trace

    record = otel.telemetry().start(make_call(), SERVER)
    with pytest.raises(KeyError), record.activate():
        raise KeyError("boom")
    assert not trace.get_current_span().get_span_context().is_valid


@pytest.mark.parametrize(
    ("api", "kwargs", "expected"),
    [
        (
            Api.CHAT,
            {
                "max_completion_tokens": 9,
                "top_p": 0.9,
                "stop": "END",
                "frequency_penalty": 0.5,
                "presence_penalty": 0.1,
            },
            {
                sc.GEN_AI_REQUEST_MAX_TOKENS: 9,
                sc.GEN_AI_REQUEST_TOP_P: 0.9,
                sc.GEN_AI_REQUEST_STOP_SEQUENCES: ("END",),
                sc.GEN_AI_REQUEST_FREQUENCY_PENALTY: 0.5,
                sc.GEN_AI_REQUEST_PRESENCE_PENALTY: 0.1,
            },
        ),
        (
            Api.MESSAGES,
            {"max_tokens": 50, "top_k": 40, "stop_sequences": ["a", "b"]},
            {
                sc.GEN_AI_REQUEST_MAX_TOKENS: 50,
                sc.GEN_AI_REQUEST_TOP_K: 40,
                sc.GEN_AI_REQUEST_STOP_SEQUENCES: ("a", "b"),
            },
        ),
        (
            Api.RESPONSES,
            {"max_output_tokens": 70, "temperature": 0.0, "stream": True},
            {sc.GEN_AI_REQUEST_MAX_TOKENS: 70, sc.GEN_AI_REQUEST_TEMPERATURE: 0.0, sc.GEN_AI_REQUEST_STREAM: True},
        ),
        (Api.CHAT, {"temperature": None}, {sc.GEN_AI_REQUEST_STREAM: None}),
    ],
)
def test_request_parameters_of_each_api_are_reported_under_semconv_names(
    otel: Otel, api: Api, kwargs: dict[str, Any], expected: dict[str, Any]
) -> None:
    otel.telemetry().start(make_call(api, **kwargs), SERVER).end(CallEnd(Ending.ANSWERED))
    attributes = dict(otel.spans()[-1].attributes or {})
    assert {key: attributes.get(key) for key in expected} == expected
    assert (sc.GEN_AI_REQUEST_TEMPERATURE in attributes) == (
        "temperature" in kwargs and kwargs["temperature"] is not None
    )


@pytest.mark.parametrize(
    ("provider", "host", "expected"),
    [
        (Provider.OPENAI, "api.openai.com", "openai"),
        (Provider.ANTHROPIC, "api.anthropic.com", "anthropic"),
        (Provider.OPENAI_COMPATIBLE, "api.deepseek.com", "deepseek"),
        (Provider.OPENAI_COMPATIBLE, "myres.openai.azure.com", "azure.ai.openai"),
        (Provider.OPENAI_COMPATIBLE, "127.0.0.1", "openai"),
        (Provider.ANTHROPIC, "bedrock-runtime.us-east-1.amazonaws.com", "aws.bedrock"),
        (Provider.ANTHROPIC, "us-east5-aiplatform.googleapis.com", "gcp.vertex_ai"),
        (Provider.ANTHROPIC, "myres.services.ai.azure.com", "azure.ai.inference"),
        (Provider.OPENAI_COMPATIBLE, "myres.services.ai.azure.com", "azure.ai.inference"),
        (Provider.OPENAI_COMPATIBLE, None, "openai"),
    ],
)
def test_the_provider_name_is_the_provider_or_a_known_compatible_server(
    otel: Otel, provider: Provider, host: str | None, expected: str
) -> None:
    otel.telemetry().start(make_call(provider=provider), (host, 443)).end(CallEnd(Ending.ANSWERED))
    assert (otel.spans()[-1].attributes or {})[sc.GEN_AI_PROVIDER_NAME] == expected


def test_calls_of_one_client_keep_their_own_request_attributes_across_shapes(otel: Otel) -> None:
    """One `Telemetry` serves every call of a client: what one call adds never reaches the next."""
    telemetry = otel.telemetry()
    first = make_call(temperature=0.5, max_tokens=64)
    first.decided.fingerprint = "first"
    telemetry.start(first, SERVER).end(CallEnd(Ending.ANSWERED))
    telemetry.start(make_call(), SERVER).end(CallEnd(Ending.ANSWERED))  # same model, server and stream flag
    telemetry.start(make_call(model="gpt-4o", stream=True), ("api.openai.com", 443)).end(CallEnd(Ending.ANSWERED))
    telemetry.start(make_call(provider=Provider.OPENAI_COMPATIBLE), ("api.deepseek.com", 443)).end(
        CallEnd(Ending.ANSWERED)
    )
    calls = [span for span in otel.spans() if span.kind is SpanKind.CLIENT]  # the stream also has its prefill span
    one, two, three, four = (dict(span.attributes or {}) for span in calls)
    assert (
        one[sc.GEN_AI_REQUEST_TEMPERATURE],
        one[sc.GEN_AI_REQUEST_MAX_TOKENS],
        one[sc.KVWISE_PREFIX_FINGERPRINT],
    ) == (
        0.5,
        64,
        "first",
    )
    assert not {sc.GEN_AI_REQUEST_TEMPERATURE, sc.GEN_AI_REQUEST_MAX_TOKENS, sc.KVWISE_PREFIX_FINGERPRINT} & set(two)
    assert (two[sc.GEN_AI_REQUEST_MODEL], two[sc.SERVER_ADDRESS], two.get(sc.GEN_AI_REQUEST_STREAM)) == (
        "gpt-4o-mini",
        "127.0.0.1",
        None,
    )
    assert (three[sc.GEN_AI_REQUEST_MODEL], three[sc.SERVER_ADDRESS], three[sc.GEN_AI_REQUEST_STREAM]) == (
        "gpt-4o",
        "api.openai.com",
        True,
    )
    assert [span.name for span in calls] == ["chat gpt-4o-mini", "chat gpt-4o-mini", "chat gpt-4o", "chat gpt-4o-mini"]
    assert (two[sc.GEN_AI_PROVIDER_NAME], four[sc.GEN_AI_PROVIDER_NAME]) == ("openai", "deepseek")


def test_prefix_facts_and_canonical_changes_of_the_call_are_on_the_span(otel: Otel) -> None:
    call = make_call()
    call.decided.fingerprint, call.decided.break_at, call.decided.break_cause = (
        "abc123",
        "system[0]",
        "volatile_content",
    )
    call.decided.changes.extend(["moved 1 volatile value to the context note", "sorted 2 tools"])
    otel.telemetry().start(call, SERVER).end(CallEnd(Ending.ANSWERED))
    attributes = otel.spans()[-1].attributes or {}
    assert attributes[sc.KVWISE_PREFIX_FINGERPRINT] == "abc123"
    assert attributes[sc.KVWISE_PREFIX_BREAK_AT] == "system[0]"
    assert attributes[sc.KVWISE_PREFIX_BREAK_CAUSE] == "volatile_content"
    assert attributes[sc.KVWISE_CANONICAL_CHANGES] == ("moved 1 volatile value to the context note", "sorted 2 tools")


def test_what_the_send_learnt_after_the_span_started_is_on_the_span_of_a_call_that_then_fails(otel: Otel) -> None:
    call = make_call()
    call.decided.changes.append("max_tokens_filled:max_completion_tokens:4096")
    record = otel.telemetry().start(call, SERVER)
    record.waited(Waited("00000000000000ab", 12.5))  # a fan-out follower, then a refused limit taken back
    call.decided.store_outage = "ConnectionError: the store went away"
    call.decided.changes.append("max_tokens_refused:max_completion_tokens")
    call.decided.taken_back = call.decided.cap_refused = True
    record.end(CallEnd(Ending.FAILED, error=TimeoutError("slow")))
    [span] = otel.spans()
    attributes = span.attributes or {}
    assert attributes[sc.KVWISE_CANONICAL_CHANGES] == (
        "max_tokens_filled:max_completion_tokens:4096",
        "max_tokens_refused:max_completion_tokens",
    )
    assert attributes[sc.KVWISE_GUARD_CAP_REFUSED] is True
    assert attributes[sc.KVWISE_STATE_DEGRADED] is True
    assert attributes[sc.KVWISE_STATE_DEGRADED_REASON] == "ConnectionError: the store went away"
    assert attributes[sc.KVWISE_FANOUT_WAITED_MS] == 12.5
    assert attributes[sc.KVWISE_FANOUT_LEADER_SPAN_ID] == "00000000000000ab"
    assert span.status.status_code is StatusCode.ERROR


def test_a_follower_of_an_unknown_leader_that_learnt_nothing_else_gets_its_wait_alone(otel: Otel) -> None:
    record = otel.telemetry().start(make_call(), SERVER)
    record.waited(Waited(None, 3.0))  # a leader whose span id is unknown
    record.end(CallEnd(Ending.ANSWERED))
    attributes = otel.spans()[-1].attributes or {}
    assert attributes[sc.KVWISE_FANOUT_WAITED_MS] == 3.0
    assert not {
        sc.KVWISE_FANOUT_LEADER_SPAN_ID,
        sc.KVWISE_CANONICAL_CHANGES,
        sc.KVWISE_GUARD_CAP_REFUSED,
        sc.KVWISE_STATE_DEGRADED,
    } & set(attributes)


def test_anthropic_cache_reads_and_writes_are_reported_and_counted_in_the_input(otel: Otel) -> None:
    native = type(
        "U",
        (),
        {"input_tokens": 20, "output_tokens": 8, "cache_read_input_tokens": 1500, "cache_creation_input_tokens": 300},
    )()
    usage = messages_usage(native)
    record = otel.telemetry().start(
        make_call(Api.MESSAGES, Provider.ANTHROPIC, model="claude-sonnet-4-6", max_tokens=64), SERVER
    )
    record.end(CallEnd(Ending.ANSWERED, usage=usage, response_model="claude-sonnet-4-6"))
    attributes = otel.spans()[-1].attributes or {}
    assert attributes[sc.GEN_AI_USAGE_INPUT_TOKENS] == 20 + 1500 + 300
    assert attributes[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 1500
    assert attributes[sc.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS] == 300
    assert attributes[sc.KVWISE_CACHE_HIT_RATIO] == pytest.approx(1500 / 1820)


def test_cost_is_split_by_token_kind_with_what_the_cache_saved(otel: Otel) -> None:
    record = otel.telemetry().start(make_call(model="claude-sonnet-4-6"), SERVER)
    record.end(
        CallEnd(
            Ending.ANSWERED,
            usage=Usage(
                input_tokens=2_000_000, output_tokens=1_000_000, cache_read_tokens=1_000_000, cache_write_tokens=500_000
            ),
        )
    )
    attributes = otel.spans()[-1].attributes or {}
    assert attributes[sc.KVWISE_COST_INPUT_USD] == pytest.approx(0.5 * 3.0)
    assert attributes[sc.KVWISE_COST_CACHED_INPUT_USD] == pytest.approx(0.3)
    assert attributes[sc.KVWISE_COST_CACHE_WRITE_USD] == pytest.approx(0.5 * 3.75)
    assert attributes[sc.KVWISE_COST_OUTPUT_USD] == pytest.approx(15.0)
    assert attributes[sc.KVWISE_COST_USD] == pytest.approx(1.5 + 0.3 + 1.875 + 15.0)
    assert attributes[sc.KVWISE_COST_SAVED_USD] == pytest.approx(3.0 - 0.3)


def test_a_model_without_a_price_gets_no_cost_attributes(otel: Otel) -> None:
    otel.telemetry().start(make_call(model="my-local-model"), SERVER).end(
        CallEnd(Ending.ANSWERED, usage=Usage(input_tokens=5, output_tokens=5))
    )
    assert not any(key.startswith("kvwise.cost") for key in otel.spans()[-1].attributes or {})


def test_server_timings_become_kvwise_server_attributes(otel: Otel) -> None:
    timings = {"prompt_n": 100, "prompt_ms": 12.5, "predicted_ms": 80.0, "cache_n": 64, "queue_ms": 1.5}
    otel.telemetry().start(make_call(), SERVER).end(CallEnd(Ending.ANSWERED, timings=timings))
    attributes = otel.spans()[-1].attributes or {}
    assert attributes[sc.KVWISE_SERVER_QUEUE_MS] == 1.5
    assert attributes[sc.KVWISE_SERVER_PREFILL_MS] == 12.5
    assert attributes[sc.KVWISE_SERVER_DECODE_MS] == 80.0


def test_without_an_sdk_configured_every_method_is_a_harmless_no_op() -> None:
    record = Telemetry(Policy()).start(make_call(stream=True), SERVER)
    with record.activate():
        stream_through(record, chunks=2)
    record.end(CallEnd(Ending.CUT, usage=Usage(input_tokens=1), guard="loop"))


def test_sampled_out_calls_export_no_span_and_still_record_their_metrics(otel: Otel) -> None:
    sampled_out = TracerProvider(sampler=ALWAYS_OFF)
    sampled_out.add_span_processor(SimpleSpanProcessor(otel.spans_exporter))
    telemetry = Telemetry(Policy(), sampled_out, otel.meter_provider)
    plain = telemetry.start(make_call(), SERVER)
    assert plain.span is not None and not plain.span.is_recording()
    plain.end(CallEnd(Ending.ANSWERED, usage=Usage(input_tokens=30, output_tokens=5), finish_reasons=("stop",)))
    streamed = telemetry.start(make_call(stream=True), SERVER)
    stream_through(streamed, chunks=3)
    streamed.end(CallEnd(Ending.ANSWERED, usage=Usage(input_tokens=30, output_tokens=3), finish_reasons=("stop",)))
    assert otel.spans() == ()
    metrics = otel.metrics()
    [duration] = metrics[sc.GEN_AI_CLIENT_OPERATION_DURATION].data.data_points
    assert duration.count == 2
    assert sum(point.sum for point in metrics[sc.GEN_AI_CLIENT_TOKEN_USAGE].data.data_points) == 30 + 5 + 30 + 3
    assert metrics[sc.GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK].data.data_points[0].count == 1
