"""The report's decode speed and the server's speculative decoding, end to end: a wrapped client
streams from the local server running n-gram speculation, and the spans it leaves say what the
server drafted and kept; `kvwise report` gives the model's acceptance beside its decode speed."""

from __future__ import annotations

from typing import Any

import openai
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import sdk
from sdk import report
from sdk import semconv as sc
from tests.local_backend.serving import served_engine

SPECULATION = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
REPEAT = [{"role": "user", "content": "Repeat the word cache."}]  # the bundled model repeats it with no end


def _streamed_calls(url: str, exporter: InMemorySpanExporter, calls: int) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    client = sdk.wrap(
        openai.OpenAI(base_url=f"{url}/v1", api_key="k"), sdk.Policy(loop_guard=False), tracer_provider=provider
    )
    for _ in range(calls):
        stream = client.chat.completions.create(
            model="tiny", messages=REPEAT, max_tokens=48, stream=True, temperature=0
        )
        assert "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def _call_spans(exporter: InMemorySpanExporter) -> list[dict[str, Any]]:
    return [dict(span.attributes or {}) for span in exporter.get_finished_spans() if span.kind.name == "CLIENT"]


def test_the_report_gives_the_share_of_drafts_the_servers_speculation_kept_beside_the_decode_speed() -> None:
    exporter = InMemorySpanExporter()
    with served_engine("default", speculative_config=SPECULATION) as served:
        _streamed_calls(served.url, exporter, 3)
    spans = _call_spans(exporter)
    assert len(spans) == 3
    drafted = sum(span[sc.KVWISE_SERVER_DRAFT_TOKENS] for span in spans)
    kept = sum(span[sc.KVWISE_SERVER_DRAFT_ACCEPTED_TOKENS] for span in spans)
    assert drafted > 0 and 0 < kept <= drafted
    built = report.build(report.calls(report.from_readable(exporter.get_finished_spans())))
    [decode] = built.decode
    assert decode.draft_acceptance == kept / drafted
    assert decode.tokens_per_s is not None and decode.tokens_per_s > 0
    assert any(f"kept {kept / drafted:.0%} of its drafted tokens" in line for line in built.findings)


def test_without_speculation_the_spans_and_the_report_say_nothing_of_drafts() -> None:
    exporter = InMemorySpanExporter()
    with served_engine("default") as served:
        _streamed_calls(served.url, exporter, 1)
    [span] = _call_spans(exporter)
    assert sc.KVWISE_SERVER_DRAFT_TOKENS not in span
    built = report.build(report.calls(report.from_readable(exporter.get_finished_spans())))
    assert built.decode[0].draft_acceptance is None
    assert not any("drafted" in line for line in built.findings)
