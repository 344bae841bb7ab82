"""The span processor `sdk.telemetry.setup` builds: OpenTelemetry's batch processor whose shutdown
waits at most `EXPORT_SHUTDOWN_SECONDS` and logs how many spans it dropped.

OpenTelemetry's own `BatchSpanProcessor.shutdown()` (run at exit) waits up to 30 s for its export
thread, which retries a dead endpoint for the exporter's timeout: a process whose collector was down
took seconds to tens of seconds to exit, a refused port or a black hole alike (docs/benchmarks.md,
`by_hand`). Here the thread gets the bound; the
spans still queued or in flight then are dropped (the thread is a daemon), and said so.

Imported by `setup` only (it needs the `otlp` extra's `opentelemetry-sdk`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from sdk._constants import EXPORT_SHUTDOWN_SECONDS

logger = logging.getLogger(__name__)


class CountingExporter(SpanExporter):
    """`exporter`, counting the spans it exported."""

    def __init__(self, exporter: SpanExporter) -> None:
        self.exporter = exporter
        self.exported = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.exporter.export(spans)
        if result is SpanExportResult.SUCCESS:
            self.exported += len(spans)
        return result

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporter.force_flush(timeout_millis)


class BoundedBatchSpanProcessor(BatchSpanProcessor):
    """A `BatchSpanProcessor` to `exporter` (sending to `where`) whose `shutdown()` takes at most
    `bound_seconds`, then logs the spans it could not export."""

    def __init__(self, exporter: SpanExporter, where: str, bound_seconds: float = EXPORT_SHUTDOWN_SECONDS) -> None:
        self._counted = CountingExporter(exporter)
        super().__init__(self._counted)
        self._where, self._bound = where, bound_seconds
        self._ended = 0

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None and span.context.trace_flags.sampled:  # what the batch processor queues
            self._ended += 1
        super().on_end(span)

    def shutdown(self) -> None:
        started = time.monotonic()
        self._batch_processor.shutdown(timeout_millis=int(self._bound * 1000))
        dropped = self._ended - self._counted.exported
        if dropped > 0:
            logger.warning(
                "kvwise telemetry: %d of %d spans were not exported to %s and are dropped "
                "(shutdown waited %.1f s, at most %.1f s)",
                dropped,
                self._ended,
                self._where,
                time.monotonic() - started,
                self._bound,
            )
