"""kvwise's call spans as flat records, read from an OTLP/JSON file or from in-process spans.

Every source (`phoenix` adds a running Phoenix) becomes `RawSpan`s first (name, ids, times, plain
attributes), so the numbers never see where the spans came from. A call is a span of kvwise's own
tracer that is not a phase span (a source that drops the scope, as Phoenix does, keeps it by the
`kvwise.attempts` every call span carries); its `decode` child (streams only) gives the decode
time. The OTLP/JSON reader takes what the OpenTelemetry collector's file exporter writes: one
`ExportTraceServiceRequest` JSON per line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sdk import semconv as sc
from sdk.telemetry.pricing import Cost

_PHASES = frozenset(phase.value for phase in sc.PhaseName)


@dataclass(frozen=True, slots=True)
class RawSpan:
    """One span, whatever its source: ids as opaque strings, times in Unix nanoseconds."""

    name: str
    scope: str
    span_id: str
    parent_id: str | None
    start_ns: int
    end_ns: int
    attributes: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ReportedCall:
    """The facts of one wrapped call that the report reads (missing numbers are 0, missing texts None)."""

    start_ns: int
    model: str
    conversation: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    ttft_s: float | None
    decode_s: float | None
    cost: Cost
    fingerprint: str | None
    break_at: str | None
    break_cause: str | None
    break_cause_server: str | None
    guard: str | None
    guard_tokens_saved: int
    draft_tokens: int = 0  # proposed by the server's speculative decoding (0: none ran, or not reported)
    draft_accepted_tokens: int = 0
    expected_read_tokens: int = 0  # a call that read less than expected (`sdk.cache.expected_reads`): the expectation,
    missed_tokens: int = 0  # the tokens it missed
    miss_cause: str | None = None  # and why
    family: str | None = None  # the prompt family (`kvwise.prompt.family`)
    stable_kept: float | None = None  # the share of its stable prefix kept of the family's previous call

    @property
    def uncached_input_tokens(self) -> int:
        """Input tokens the server had to prefill (neither read from the cache nor counted twice)."""
        return max(self.input_tokens - self.cache_read_tokens, 0)

    @property
    def cost_usd(self) -> float:
        return self.cost.total_usd

    @property
    def broke(self) -> bool:
        return self.break_cause is not None or self.break_cause_server is not None


def from_readable(spans: Iterable[Any]) -> list[RawSpan]:
    """`RawSpan`s from OpenTelemetry SDK `ReadableSpan`s (e.g. an InMemorySpanExporter's)."""
    return [
        RawSpan(
            name=span.name,
            scope=span.instrumentation_scope.name if span.instrumentation_scope else "",
            span_id=format(span.context.span_id, "016x"),
            parent_id=format(span.parent.span_id, "016x") if span.parent is not None else None,
            start_ns=span.start_time or 0,
            end_ns=span.end_time or 0,
            attributes=dict(span.attributes or {}),
        )
        for span in spans
    ]


def read_otlp_json(path: Path, progress: Callable[[int, int], None] | None = None) -> list[RawSpan]:
    """`RawSpan`s from a file of OTLP/JSON `ExportTraceServiceRequest`s, one per line.

    `progress(bytes_read, total_bytes)` is called after each line (for a progress bar on large files).
    """
    spans: list[RawSpan] = []
    total, done = path.stat().st_size, 0
    with path.open("rb") as lines:
        for line in lines:
            if line.strip():
                spans.extend(_request_spans(json.loads(line)))
            done += len(line)
            if progress is not None:
                progress(done, total)
    return spans


def _request_spans(request: Mapping[str, Any]) -> Iterator[RawSpan]:
    for resource in request.get("resourceSpans", ()):
        for scope_spans in resource.get("scopeSpans", ()):
            scope = (scope_spans.get("scope") or {}).get("name", "")
            for span in scope_spans.get("spans", ()):
                yield otlp_span(span, scope)


def otlp_span(span: Mapping[str, Any], scope: str) -> RawSpan:
    """A `RawSpan` from one OTLP/JSON span, in the spec's lowerCamelCase or in Phoenix's snake_case."""
    spelling = _SNAKE if "span_id" in span else _CAMEL
    return RawSpan(
        name=span.get("name") or "",
        scope=scope,
        span_id=span.get(spelling["spanId"]) or "",
        parent_id=span.get(spelling["parentSpanId"]) or None,
        start_ns=int(span.get(spelling["startTimeUnixNano"]) or 0),
        end_ns=int(span.get(spelling["endTimeUnixNano"]) or 0),
        attributes={kv["key"]: _any_value(kv.get("value") or {}, spelling) for kv in span.get("attributes") or ()},
    )


_CAMEL = {
    key: key
    for key in (
        "spanId",
        "parentSpanId",
        "startTimeUnixNano",
        "endTimeUnixNano",
        "intValue",
        "doubleValue",
        "arrayValue",
        "stringValue",
        "boolValue",
    )
}
_SNAKE = {key: "".join(f"_{c.lower()}" if c.isupper() else c for c in key) for key in _CAMEL}
"""OTLP/JSON's field names, and the same in snake_case (Phoenix's REST answer), by their camelCase."""


def _any_value(value: Mapping[str, Any], spelling: Mapping[str, str] = _CAMEL) -> Any:
    """An OTLP `AnyValue` as a Python value (64-bit integers arrive as JSON strings; absent fields may be null)."""
    if (number := value.get(spelling["intValue"])) is not None:
        return int(number)
    if (number := value.get(spelling["doubleValue"])) is not None:
        return float(number)
    if (array := value.get(spelling["arrayValue"])) is not None:
        return tuple(_any_value(item, spelling) for item in array.get("values") or ())
    for key in ("stringValue", "boolValue"):
        if (plain := value.get(spelling[key])) is not None:
            return plain
    return None


def calls(spans: Iterable[RawSpan]) -> list[ReportedCall]:
    """The wrapped calls among `spans`, in start order."""
    spans = list(spans)
    decode_s = {
        span.parent_id: (span.end_ns - span.start_ns) / 1e9
        for span in spans
        if span.name == sc.PhaseName.DECODE and span.parent_id and span.scope in ("", sc.INSTRUMENTATION_SCOPE)
    }
    records = [_record(span, decode_s.get(span.span_id)) for span in spans if _is_call(span)]
    return sorted(records, key=lambda record: record.start_ns)


def _is_call(span: RawSpan) -> bool:
    if span.name in _PHASES:
        return False
    return span.scope == sc.INSTRUMENTATION_SCOPE or (not span.scope and sc.KVWISE_ATTEMPTS in span.attributes)


def _record(span: RawSpan, decode_s: float | None) -> ReportedCall:
    attributes = span.attributes

    def number(key: str) -> float:
        value = attributes.get(key)
        return float(value) if isinstance(value, (int, float)) else 0.0

    def text(key: str) -> str | None:
        value = attributes.get(key)
        return str(value) if value not in (None, "") else None

    model = text(sc.GEN_AI_REQUEST_MODEL) or text(sc.GEN_AI_RESPONSE_MODEL) or "unknown"
    ttft = attributes.get(sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK)
    return ReportedCall(
        start_ns=span.start_ns,
        model=model,
        conversation=text(sc.GEN_AI_CONVERSATION_ID) or model,
        input_tokens=int(number(sc.GEN_AI_USAGE_INPUT_TOKENS)),
        output_tokens=int(number(sc.GEN_AI_USAGE_OUTPUT_TOKENS)),
        cache_read_tokens=int(number(sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS)),
        cache_write_tokens=int(number(sc.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS)),
        ttft_s=float(ttft) if isinstance(ttft, (int, float)) else None,
        decode_s=decode_s,
        cost=Cost(
            input_usd=number(sc.KVWISE_COST_INPUT_USD),
            cached_input_usd=number(sc.KVWISE_COST_CACHED_INPUT_USD),
            cache_write_usd=number(sc.KVWISE_COST_CACHE_WRITE_USD),
            output_usd=number(sc.KVWISE_COST_OUTPUT_USD),
            saved_usd=number(sc.KVWISE_COST_SAVED_USD),
        ),
        fingerprint=text(sc.KVWISE_PREFIX_FINGERPRINT),
        break_at=text(sc.KVWISE_PREFIX_BREAK_AT),
        break_cause=text(sc.KVWISE_PREFIX_BREAK_CAUSE),
        break_cause_server=text(sc.KVWISE_PREFIX_BREAK_CAUSE_SERVER),
        guard=text(sc.KVWISE_GUARD_TRIPPED),
        guard_tokens_saved=int(number(sc.KVWISE_GUARD_TOKENS_SAVED)),
        draft_tokens=int(number(sc.KVWISE_SERVER_DRAFT_TOKENS)),
        draft_accepted_tokens=int(number(sc.KVWISE_SERVER_DRAFT_ACCEPTED_TOKENS)),
        expected_read_tokens=int(number(sc.KVWISE_CACHE_EXPECTED_READ_TOKENS)),
        missed_tokens=int(number(sc.KVWISE_CACHE_MISSED_TOKENS)),
        miss_cause=text(sc.KVWISE_CACHE_MISS_CAUSE),
        family=text(sc.KVWISE_PROMPT_FAMILY),
        stable_kept=float(kept)
        if isinstance((kept := attributes.get(sc.KVWISE_PROMPT_STABLE_KEPT)), (int, float))
        else None,
    )
