"""Export kvwise's spans to any OTLP backend (Jaeger, Tempo, Phoenix, Honeycomb, ...).

    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 python -m examples.otlp_export http://127.0.0.1:8000

Needs the `otlp` extra (`pip install kvwise[otlp]`).
"""

from __future__ import annotations

import sys
from typing import Any

import openai
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

import sdk


def main(base_url: str, exporter: SpanExporter | None = None, model: str = "default") -> Any:
    """One streamed call traced to `exporter` (OTLP over HTTP by default); returns the provider."""
    provider = TracerProvider(resource=Resource.create({"service.name": "kvwise-example"}))
    provider.add_span_processor(BatchSpanProcessor(exporter or OTLPSpanExporter()))
    client = sdk.wrap(openai.OpenAI(base_url=f"{base_url}/v1", api_key="local"), tracer_provider=provider)
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "What is decode?"}], max_tokens=24, stream=True
    )
    for _ in stream:
        pass
    provider.force_flush()
    provider.shutdown()
    return provider


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000")
