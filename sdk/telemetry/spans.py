"""The telemetry of one call: its CLIENT span, the `prefill` and `decode` child spans, and its metrics.

    chat gpt-4o-mini                  CLIENT  start() ............................ end()
    ├── (the client's own spans, as the bare client has them: ours is current while it sends,
    │    so anthropic's `anthropic.messages.create` is a child of ours, see `client_tracing`)
    ├── prefill                       INTERNAL  last attempt sent -> first content chunk
    │                                 (gen_ai.response.time_to_first_chunk: last attempt sent -> its
    │                                  first chunk of any kind)
    └── decode                        INTERNAL  first content chunk -> last content chunk

The phase spans are OpenInference CHAIN spans (Phoenix shows them, counts no tokens on them) carrying
what they measured, as `kvwise.prefill.*` / `kvwise.decode.*` and as their JSON `output.value`.

The wrapper drives a `CallRecord` through `activate`, `attempt`, `waited`, `first_chunk`, `chunk`
and exactly one `end` (whose `CallEnd` says how the call ended, a guard's cut included). What the
send learns after the span started (a fan-out wait, a refusal taken back, a state store that failed
at the fan-out join: `Decisions`) is data until `end` writes it: only this package writes spans. The phase
spans are created at `end` with the timestamps taken on the way, so a stream that is abandoned,
cut or failed still ends every span it has, and the per-chunk path is one counter and one clock
read. Every method swallows (and logs at debug level) its own exceptions: a broken tracer, meter or
exporter never breaks the call.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from time import time_ns
from types import TracebackType
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry._logs import Logger, LogRecord
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from sdk import semconv as sc
from sdk.cache.diagnostics import disagree
from sdk.call import Call, Usage
from sdk.lifecycle import CallEnd
from sdk.telemetry import content, openinference, phases
from sdk.telemetry.attributes import Attributes, Outcome, add_sending_attributes, error_type, outcome_attributes
from sdk.telemetry.metrics import Instruments
from sdk.telemetry.pricing import PriceTable, cost_of

if TYPE_CHECKING:
    from sdk.cache.fanout import Waited

logger = logging.getLogger(__name__)

_PREFILL, _DECODE = sc.PhaseName.PREFILL.value, sc.PhaseName.DECODE.value
_NO_CONTENT = sc.ContentCapture.NO_CONTENT
_NS_PER_S = 1e9
_UNFINISHED = (sc.FinishReason.ERROR.value,)

P = ParamSpec("P")
R = TypeVar("R")


def never_raises(method: Callable[P, R | None]) -> Callable[P, R | None]:
    """Run `method`, logging and swallowing its exceptions: telemetry must never fail the call."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R | None:
        try:
            return method(*args, **kwargs)
        except Exception:
            logger.debug("kvwise telemetry: %s failed; the call goes on", method.__qualname__, exc_info=True)
            return None

    return wrapper


@dataclass(frozen=True, slots=True)
class Sinks:
    """What every call of one wrapped client records into (built once by `Telemetry`)."""

    tracer: Tracer
    instruments: Instruments | None
    prices: PriceTable
    capture: sc.ContentCapture
    event_logger: Logger | None


def _server_cause(call: Call, reason: str | None) -> str | None:
    """The provider's cache-miss reason, logged at warning level when it contradicts kvwise's cause."""
    if reason and disagree(reason, call.decided.break_cause, call.decided.break_at):
        logger.warning(
            "kvwise: the provider says the cache missed because %s, kvwise thought %s (at %s)",
            reason,
            call.decided.break_cause or "nothing changed",
            call.decided.break_at or "the call's settings",
        )
    return reason


class _Activation:
    """Makes a span the current one for the `with` block; the block's own exceptions propagate."""

    __slots__ = ("_span", "_token")

    def __init__(self, span: Span) -> None:
        self._span = span
        self._token: object = None

    def __enter__(self) -> Span:
        try:
            self._token = otel_context.attach(trace.set_span_in_context(self._span))
        except Exception:
            logger.debug("kvwise telemetry: could not activate the call span", exc_info=True)
        return self._span

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if self._token is not None:
            try:
                otel_context.detach(self._token)  # type: ignore[arg-type]
            except Exception:
                logger.debug("kvwise telemetry: could not deactivate the call span", exc_info=True)
            self._token = None


class CallRecord:
    """The telemetry of one call, driven by the send and the stream watcher (see the module docstring)."""

    __slots__ = (
        "_attempt_ns",
        "_attempts",
        "_base",
        "_call",
        "_chunks",
        "_ended",
        "_first_ns",
        "_last_ns",
        "_received_ns",
        "_request",
        "_sinks",
        "_span",
        "_start_ns",
        "_streamed",
        "_usage_estimated",
        "_waited",
    )

    def __init__(
        self,
        sinks: Sinks | None,
        call: Call,
        span: Span | None,
        base: Attributes,
        start_ns: int,
        request: Attributes | None = None,
    ) -> None:
        self._sinks = sinks
        self._call = call
        self._streamed = call.stream
        self._span = span
        self._base = base
        self._request = request  # the span's start attributes (read-only), for the content event
        self._start_ns = self._attempt_ns = start_ns
        self._attempts = 1
        self._first_ns: int | None = None
        self._received_ns: int | None = None
        self._last_ns: int | None = None
        self._chunks = 0
        self._usage_estimated = False
        self._waited: Waited | None = None
        self._ended = sinks is None

    @property
    def span(self) -> Span | None:
        """The call's CLIENT span (None when the tracer could not start one; metrics are still recorded)."""
        return self._span

    @property
    def captures_content(self) -> bool:
        """Whether `end` records the answer's text (content capture is on); callers skip building it otherwise."""
        return self._sinks is not None and self._sinks.capture is not _NO_CONTENT

    def activate(self) -> AbstractContextManager[Any]:
        """Make the call span current while the client sends, so the client's own spans nest under it."""
        return _Activation(self._span) if self._span is not None else nullcontext()

    def attempt(self, number: int) -> None:
        """Attempt `number` (1, 2, ...) is about to be sent: the prefill of a stream starts here.

        Nothing here can raise (as in `chunk`), so not `never_raises`: one wrapper less on every call."""
        self._attempts = number
        self._attempt_ns = time_ns()

    def waited(self, waited: Waited) -> None:
        """The call, a fan-out follower, waited for its leader before its first send (the span says so at its end)."""
        self._waited = waited

    def first_chunk(self, received_ns: int | None = None) -> None:
        """The first content chunk reached the caller: prefill ends, decode starts.

        `received_ns`: when the first chunk of any kind (a header event included) of the attempt that
        produced it arrived, if before now: the time to first chunk runs from that attempt's send to it.
        Nothing here can raise (as in `chunk`), so not `never_raises`.
        """
        if self._first_ns is None:
            self._first_ns = self._last_ns = now = time_ns()
            self._received_ns = received_ns if received_ns is not None else now

    def chunk(self) -> None:
        """A content chunk reached the caller (called for every chunk, the first included).

        The hot path of a stream: one counter and one clock read, nothing that can raise, so not `never_raises`.
        """
        self._chunks += 1
        self._last_ns = time_ns()

    @never_raises
    def end(self, end: CallEnd) -> None:
        """Finish the call: attributes, phase spans, content, then the span ends; then metrics. Only once.

        `end.output_text`, `end.output_tool_calls` are given only when content is captured
        (`captures_content`); an abandoned stream is no error (`KVWISE_STREAM_ABANDONED`).
        """
        if self._ended or self._sinks is None:
            return
        self._ended = True
        self._usage_estimated = end.usage_estimated
        end_ns = time_ns()
        sinks, span = self._sinks, self._span
        try:
            outcome = self._outcome(sinks, end)
        except Exception:
            if span is not None:
                span.end(end_time=end_ns)  # never leave the span open
            raise
        if span is not None:
            self._finish_span(
                sinks, span, outcome, content.output_messages(end.output_text, end.output_tool_calls), end_ns
            )
        if sinks.instruments is not None:
            self._record_metrics(sinks.instruments, outcome, end_ns)

    def _outcome(self, sinks: Sinks, end: CallEnd) -> Outcome:
        streamed, first = self._streamed, self._first_ns
        usage, error, finish_reasons = end.usage, end.error, end.finish_reasons
        price = (
            (sinks.prices.lookup(end.response_model) or sinks.prices.lookup(self._call.model))
            if usage is not None
            else None
        )
        if not finish_reasons and error is not None and (first is not None or end.response_id is not None):
            finish_reasons = _UNFINISHED  # the generation started and never reached a terminal reason
        return Outcome(
            end=end,
            cost=cost_of(usage, price) if usage is not None and price is not None else None,
            finish_reasons=tuple(finish_reasons),
            error_type=error_type(error) if error is not None else None,
            attempts=self._attempts,
            chunks=self._chunks if streamed else None,
            time_to_first_chunk_s=self._time_to_first_chunk_s() if streamed and first is not None else None,
            break_cause_server=_server_cause(self._call, end.cache_miss_reason) if end.cache_miss_reason else None,
            miss=self._call.decided.read_miss,
        )

    def _time_to_first_chunk_s(self) -> float:
        """From the send of the attempt that produced the first chunk to that chunk's arrival."""
        received = self._received_ns if self._received_ns is not None else self._first_ns or self._attempt_ns
        return max(received - self._attempt_ns, 0) / _NS_PER_S

    @never_raises
    def _finish_span(
        self, sinks: Sinks, span: Span, outcome: Outcome, answer: list[dict[str, Any]], end_ns: int
    ) -> None:
        try:
            if not span.is_recording() and sinks.capture is _NO_CONTENT:
                return  # sampled out, or no SDK: nothing reads its attributes (the span still ends)
            attributes = outcome_attributes(outcome)
            attributes.update(openinference.outcome_attributes(outcome))
            attributes.update(openinference.invocation_attributes(self._call))
            if sinks.capture is not _NO_CONTENT:
                attributes.update(self._capture(sinks, span, outcome, answer))
            if self._usage_estimated:
                attributes[sc.KVWISE_USAGE_ESTIMATED] = True
            add_sending_attributes(attributes, self._call.decided, self._waited)
            span.set_attributes(attributes)
            if outcome.error_type:
                span.set_status(Status(StatusCode.ERROR, outcome.error_type))
            if self._streamed:
                self._end_phases(sinks.tracer, span, outcome.end.usage, end_ns)
        finally:
            span.end(end_time=end_ns)

    @never_raises
    def _record_metrics(self, instruments: Instruments, outcome: Outcome, end_ns: int) -> None:
        instruments.record(outcome, self._base, end_ns - self._start_ns, self._per_chunk_ns())

    def _per_chunk_ns(self) -> float | None:
        if not self._streamed or self._first_ns is None or self._last_ns is None or self._chunks < 2:
            return None
        return (self._last_ns - self._first_ns) / (self._chunks - 1)

    def _end_phases(self, tracer: Tracer, span: Span, usage: Usage | None, end_ns: int) -> None:
        """Create and end `prefill` (and `decode`, once a chunk arrived) as children of the call span."""
        parent = trace.set_span_in_context(span)
        first = self._first_ns
        prefill_end = first if first is not None else end_ns
        prefill_facts = phases.prefill_facts(usage, prefill_end - self._attempt_ns)
        prefill = tracer.start_span(
            _PREFILL, parent, kind=SpanKind.INTERNAL, attributes=prefill_facts, start_time=self._attempt_ns
        )
        prefill.end(end_time=prefill_end)
        if first is not None:
            decode_end = max(self._last_ns or first, first)
            decode_facts = phases.decode_facts(usage, decode_end - first)
            decode_facts[sc.KVWISE_STREAM_CHUNKS] = self._chunks
            decode = tracer.start_span(
                _DECODE, parent, kind=SpanKind.INTERNAL, attributes=decode_facts, start_time=first
            )
            decode.end(end_time=decode_end)

    def _capture(self, sinks: Sinks, span: Span, outcome: Outcome, answer: list[dict[str, Any]]) -> Attributes:
        """Emit the prompt and answer as an event and/or return them as span attributes, per the capture mode.

        The event carries the span's attributes and the content as structured values; the span, whose
        attributes take no maps, the content as JSON strings.
        """
        call = self._call
        system, inputs = content.system_instructions(call), content.input_messages(call)
        structured: Attributes = {
            sc.GEN_AI_SYSTEM_INSTRUCTIONS: system,
            sc.GEN_AI_INPUT_MESSAGES: inputs,
            sc.GEN_AI_OUTPUT_MESSAGES: answer,
        }
        if sinks.capture.on_event and sinks.event_logger is not None:
            span_attributes = {**(self._request or self._base), **outcome_attributes(outcome)}
            sinks.event_logger.emit(
                LogRecord(
                    event_name=sc.GEN_AI_INFERENCE_DETAILS_EVENT,
                    context=trace.set_span_in_context(span),
                    attributes={**span_attributes, **structured},
                )
            )
        if not sinks.capture.on_span:
            return {}
        attributes = {name: content.to_json(value) for name, value in structured.items()}
        attributes.update(openinference.content_attributes(call, system, inputs, answer))
        return attributes
