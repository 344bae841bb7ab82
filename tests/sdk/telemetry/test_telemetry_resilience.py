"""A broken tracer, span processor, exporter or meter never breaks the call it records."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from sdk import semconv as sc
from sdk.call import Usage
from sdk.lifecycle import CallEnd, Ending
from sdk.policy import Policy
from sdk.telemetry import Telemetry
from tests.sdk.telemetry.test_telemetry_spans import SERVER, Otel, make_call, otel, stream_through  # noqa: F401


class RaisingExporter(SpanExporter):
    def export(self, spans: Any) -> SpanExportResult:
        raise RuntimeError("exporter down")


class RaisingProcessor(SpanProcessor):
    def on_start(self, span: Any, parent_context: Any = None) -> None:
        raise RuntimeError("processor broken on start")

    def on_end(self, span: Any) -> None:
        raise RuntimeError("processor broken on end")


class RaisingProvider:
    def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("no tracer")

    def get_meter(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("no meter")


class RaisingMeterProvider:
    """A meter whose instruments raise on every record."""

    def get_meter(self, *args: Any, **kwargs: Any) -> Any:
        return self

    def __getattr__(self, name: str) -> Any:
        if name.startswith("create_"):
            return lambda *args, **kwargs: self
        raise AttributeError(name)

    def record(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("record failed")

    add = record


def _raising_exporter() -> tuple[Any, Any]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(RaisingExporter()))
    return provider, RaisingMeterProvider()


def _raising_processor() -> tuple[Any, Any]:
    provider = TracerProvider()
    provider.add_span_processor(RaisingProcessor())
    return provider, None


@pytest.mark.parametrize(
    "providers",
    [_raising_exporter, _raising_processor, lambda: (RaisingProvider(), RaisingProvider())],
    ids=["exporter-and-meter-raise", "span-processor-raises", "providers-raise"],
)
def test_broken_telemetry_backends_never_raise_into_the_call(providers: Any) -> None:
    tracer_provider, meter_provider = providers()
    telemetry = Telemetry(Policy(capture_content=True), tracer_provider, meter_provider)
    for stream in (False, True):
        record = telemetry.start(make_call(stream=stream), SERVER)
        with record.activate():
            stream_through(record, chunks=3)
        record.end(
            CallEnd(
                Ending.CUT,
                usage=Usage(input_tokens=10, output_tokens=3),
                output_text="ok",
                finish_reasons=("stop",),
                guard="loop",
                tokens_saved=5,
            )
        )


def test_metrics_are_still_recorded_when_a_span_processor_raises(otel: Otel) -> None:
    otel.tracer_provider.add_span_processor(RaisingProcessor())
    record = otel.telemetry().start(make_call(stream=True), SERVER)
    stream_through(record, chunks=2)
    record.end(CallEnd(Ending.ANSWERED, usage=Usage(input_tokens=10, output_tokens=2)))
    metrics = otel.metrics()
    assert metrics[sc.GEN_AI_CLIENT_OPERATION_DURATION].data.data_points[0].count == 1
    assert {p.attributes[sc.GEN_AI_TOKEN_TYPE] for p in metrics[sc.GEN_AI_CLIENT_TOKEN_USAGE].data.data_points} == {
        "input",
        "output",
    }
