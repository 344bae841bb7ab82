"""`kvwise report` on 100,000 synthetic spans: read, numbers, figures, page (issue target: under 10 s).

    .venv/bin/python -m tests.benchmarks bench_report [--spans 100000]

The spans are what wrapped calls leave: a call span of kvwise's scope with its usage, cost, cache and
guard attributes, and its `prefill` and `decode` children (every call is streamed), over several
models and prompt families with breaks, as the collector's file exporter writes them (OTLP/JSON, one
`ExportTraceServiceRequest` per line). Each stage is timed once on a warm process (the figures'
first matplotlib import is timed apart). No peer draws these pictures, so the table's ratio is
against the issue's target.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from sdk import report
from sdk import semconv as sc
from sdk.report.figures import write_figures
from sdk.report.page import render

TARGET_S = 10.0
SPANS_PER_CALL = 3  # the call, its prefill, its decode
SPANS_PER_REQUEST = 3000  # spans per OTLP/JSON line, about what a batch exporter sends
MODELS = ("gpt-5.4-mini", "gpt-5.6", "claude-sonnet-4-6", "claude-haiku-4-5", "default")
FAMILIES = 60
CAUSES = ("volatile_content", "system_changed", "tools_changed", "ttl_expired", "model_changed")


def _attribute(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, (bool, str)):
        return {"key": key, "value": {"boolValue" if isinstance(value, bool) else "stringValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"doubleValue": value}}


def _call_spans(index: int, rng: random.Random, start_ns: int) -> list[dict[str, Any]]:
    model = MODELS[index % len(MODELS)]
    family = f"family-{rng.randrange(FAMILIES)}"
    prompt = rng.choice((256, 1024, 4096, 16384))
    cached = 0 if rng.random() < 0.2 else prompt * rng.randrange(50, 95) // 100
    output = max(1, int(rng.lognormvariate(5, 0.8)))
    ttft = 0.05 + (prompt - cached) * 2e-4 * rng.uniform(0.8, 1.2)
    decode = output / rng.uniform(40, 120)
    attributes = {
        sc.GEN_AI_REQUEST_MODEL: model,
        sc.GEN_AI_CONVERSATION_ID: family,
        sc.GEN_AI_USAGE_INPUT_TOKENS: prompt,
        sc.GEN_AI_USAGE_OUTPUT_TOKENS: output,
        sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: cached,
        sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: ttft,
        sc.KVWISE_COST_INPUT_USD: (prompt - cached) * 1e-6,
        sc.KVWISE_COST_CACHED_INPUT_USD: cached * 1e-7,
        sc.KVWISE_COST_OUTPUT_USD: output * 8e-6,
        sc.KVWISE_COST_SAVED_USD: cached * 9e-7,
        sc.KVWISE_PREFIX_FINGERPRINT: f"{rng.getrandbits(64):016x}",
        sc.KVWISE_ATTEMPTS: 1,
    }
    if not cached:
        attributes[sc.KVWISE_PREFIX_BREAK_CAUSE] = rng.choice(CAUSES)
        attributes[sc.KVWISE_PREFIX_BREAK_AT] = "system[0]"
    if rng.random() < 0.01:
        attributes[sc.KVWISE_GUARD_TRIPPED] = "loop"
        attributes[sc.KVWISE_GUARD_TOKENS_SAVED] = rng.randrange(100, 2000)
    call_id = f"{index * SPANS_PER_CALL:016x}"
    end_ns = start_ns + int((ttft + decode) * 1e9)
    first_ns = start_ns + int(ttft * 1e9)
    return [
        {
            "spanId": call_id,
            "name": f"chat {model}",
            "startTimeUnixNano": str(start_ns),
            "endTimeUnixNano": str(end_ns),
            "attributes": [_attribute(key, value) for key, value in attributes.items()],
        },
        {
            "spanId": f"{index * SPANS_PER_CALL + 1:016x}",
            "parentSpanId": call_id,
            "name": "prefill",
            "startTimeUnixNano": str(start_ns),
            "endTimeUnixNano": str(first_ns),
            "attributes": [],
        },
        {
            "spanId": f"{index * SPANS_PER_CALL + 2:016x}",
            "parentSpanId": call_id,
            "name": "decode",
            "startTimeUnixNano": str(first_ns),
            "endTimeUnixNano": str(end_ns),
            "attributes": [_attribute(sc.GEN_AI_USAGE_OUTPUT_TOKENS, output)],
        },
    ]


def write_traces(path: Path, spans: int, seed: int = 0) -> int:
    """Write about `spans` spans of synthetic wrapped calls to `path`; return how many were written."""
    rng, written, start_ns = random.Random(seed), 0, 1_780_000_000 * 10**9
    with path.open("w", encoding="utf-8") as out:
        batch: list[dict[str, Any]] = []
        for index in range(spans // SPANS_PER_CALL):
            start_ns += int(rng.expovariate(1 / 0.5) * 1e9)
            batch += _call_spans(index, rng, start_ns)
            if len(batch) >= SPANS_PER_REQUEST:
                out.write(_request(batch))
                written, batch = written + len(batch), []
        if batch:
            out.write(_request(batch))
            written += len(batch)
    return written


def _request(spans: list[dict[str, Any]]) -> str:
    scope = {"scope": {"name": sc.INSTRUMENTATION_SCOPE}, "spans": spans}
    return json.dumps({"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [scope]}]}) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spans", type=int, default=100_000)
    args = parser.parse_args()
    started = time.perf_counter()
    import matplotlib.pyplot  # noqa: F401 (its first import, timed apart from the figures)

    import_s = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as folder:
        traces, out = Path(folder) / "traces.jsonl", Path(folder) / "report"
        count = write_traces(traces, args.spans)
        size_mb = traces.stat().st_size / 1e6
        stages: list[tuple[str, float]] = []

        def timed(name: str, work: Any) -> Any:
            begin = time.perf_counter()
            result = work()
            stages.append((name, time.perf_counter() - begin))
            return result

        raw = timed("read OTLP/JSON", lambda: report.read_otlp_json(traces))
        records = timed("calls", lambda: report.calls(raw))
        built = timed("numbers and findings", lambda: report.build(records))
        figures = timed("figures (4 PNGs)", lambda: write_figures(built, out))
        timed("page", lambda: (out / "report.html").write_text(render(built, figures), encoding="utf-8"))
    total = sum(seconds for _, seconds in stages)
    print(
        f"\nkvwise report of {count} spans ({len(records)} calls,"
        f" {len(built.conversations)} conversations in the table,"
        f" {size_mb:.0f} MB of OTLP/JSON)\n"
    )
    print(f"{'stage':<24} {'seconds':>8}")
    for name, seconds in stages:
        print(f"{name:<24} {seconds:8.2f}")
    print(
        f"{'total':<24} {total:8.2f}   target {TARGET_S:.0f} s: {TARGET_S / total:.2f}x the speed needed"
        f" ({'met' if total < TARGET_S else 'not met'}); matplotlib's first import {import_s:.2f} s on top"
    )


if __name__ == "__main__":
    main()
