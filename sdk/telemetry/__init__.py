"""OpenTelemetry for kvwise calls: one CLIENT span per call, prefill/decode phases, usage, cost, metrics.

    telemetry = Telemetry(policy, tracer_provider=None, meter_provider=None)  # one per wrapped client
    record = telemetry.start(call, server=(host, port))   # after the request rewrite, before sending
    with record.activate():                               # our span is current while the client sends
        ...
    record.end(CallEnd(Ending.ANSWERED, usage=...))       # exactly once (through `sdk.lifecycle`)

Only `opentelemetry-api` is used here: with no SDK configured every call is a cheap no-op, and the
app's own providers (or the ones passed in) receive everything. Every name is in `sdk.semconv`. Modules:
`attributes` (call/outcome -> attributes), `openinference` (the same facts as Phoenix reads them),
`spans` (the recorder), `metrics`, `pricing`, `content`; `setup` configures an SDK for apps without one.
"""

from __future__ import annotations

import dataclasses
import logging
from importlib import metadata
from time import time_ns
from typing import Any

from opentelemetry import _logs, trace
from opentelemetry.metrics import get_meter
from opentelemetry.trace import SpanKind

from sdk import semconv as sc
from sdk.call import Call, Server
from sdk.policy import Policy
from sdk.telemetry import openinference
from sdk.telemetry.attributes import Attributes, provider_name, request_attributes, shape_attributes, span_name
from sdk.telemetry.content import capture_mode
from sdk.telemetry.conversation import current_conversation
from sdk.telemetry.metrics import Instruments
from sdk.telemetry.pricing import PriceTable
from sdk.telemetry.setup import setup
from sdk.telemetry.spans import CallRecord, Sinks

__all__ = ["CallRecord", "Telemetry", "setup"]

logger = logging.getLogger(__name__)

_DISTRIBUTION = "kvwise"
_METRIC_KEYS = (sc.GEN_AI_OPERATION_NAME, sc.GEN_AI_PROVIDER_NAME, sc.GEN_AI_REQUEST_MODEL)
"""Attributes of every metric point (see `sdk.telemetry.metrics` for why no others)."""
_MAX_SHAPES = 1024
"""Call shapes (model, provider, stream flag, server) whose attributes are kept; past it the memo starts over."""
Shape = tuple[str, Attributes, Attributes]
"""A call shape's span name, request attributes and metric attributes."""


def _version() -> str | None:
    try:
        return metadata.version(_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None


class Telemetry:
    """Where the calls of one wrapped client record their spans, metrics and (opt-in) content events.

    `None` providers mean the global ones, looked up through OpenTelemetry's proxies, so a provider
    the app installs after `sdk.wrap` still receives everything. With no tracer provider given,
    kvwise's spans follow the wrapped client's own switch: a client whose own tracing is off
    (`client_tracing.switched_off`) gets no span of kvwise's either, and nothing of OpenTelemetry's
    tracing API is called for it (the tracer is looked up at the first call that records); a provider
    given to `sdk.wrap` is kvwise's own, and records every call. The content-capture mode is read
    once, here: `Policy.capture_content`, else `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`.
    An invalid `Policy.prices` raises `ValueError` here; nothing else does.
    """

    def __init__(
        self,
        policy: Policy,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        *,
        logger_provider: Any = None,
    ) -> None:
        self.policy = policy
        prices = PriceTable.load(policy.prices)
        capture = capture_mode(policy.capture_content)
        self._version = version = _version()
        self._tracer_provider = tracer_provider
        instruments: Instruments | None = None
        event_logger: _logs.Logger | None = None
        try:
            instruments = Instruments(get_meter(sc.INSTRUMENTATION_SCOPE, version or "", meter_provider))
            if capture.on_event:
                event_logger = _logs.get_logger(
                    sc.INSTRUMENTATION_SCOPE, version or "", logger_provider=logger_provider
                )
        except Exception:
            logger.debug("kvwise telemetry: a provider failed; recording what is left", exc_info=True)
        self._shapes: dict[tuple[object, ...], Shape] = {}
        self._untraced = Sinks(
            tracer=trace.NoOpTracer(),
            instruments=instruments,
            prices=prices,
            capture=capture,
            event_logger=event_logger,
        )
        self._traced: Sinks | None = None

    def start(self, call: Call, server: Server, client_tracing_off: bool = False) -> CallRecord:
        """Open the call's CLIENT span, named `"{operation} {model}"`, with everything known before sending;
        none where the wrapped client's own tracing is off (`client_tracing_off`) and kvwise was given
        no tracer provider (its metrics are still recorded)."""
        start_ns = time_ns()
        try:
            name, shape, metric_attributes = self._shape(call, server)
            attributes = request_attributes(call, shape)
            conversation_id = current_conversation()
            if conversation_id is not None:
                attributes[sc.GEN_AI_CONVERSATION_ID] = conversation_id
        except Exception:
            logger.debug("kvwise telemetry: could not describe the call; it goes unrecorded", exc_info=True)
            return CallRecord(None, call, None, {}, start_ns)
        if client_tracing_off and self._tracer_provider is None:
            return CallRecord(self._untraced, call, None, metric_attributes, start_ns, attributes)
        sinks = self._sinks()
        try:
            span = sinks.tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attributes, start_time=start_ns)
        except Exception:
            logger.debug("kvwise telemetry: the tracer failed; this call gets metrics only", exc_info=True)
            span = None
        return CallRecord(sinks, call, span, metric_attributes, start_ns, attributes)

    def _sinks(self) -> Sinks:
        """The sinks of a call that records a span: the tracer looked up at the first such call."""
        if self._traced is None:
            try:
                tracer = trace.get_tracer(sc.INSTRUMENTATION_SCOPE, self._version, self._tracer_provider)
            except Exception:
                logger.debug("kvwise telemetry: the tracer provider failed; calls get metrics only", exc_info=True)
                tracer = self._untraced.tracer
            self._traced = dataclasses.replace(self._untraced, tracer=tracer)
        return self._traced

    def _shape(self, call: Call, server: Server) -> Shape:
        """What every call of this model, provider, stream flag and server shares, built once (read-only)."""
        key = (call.model, call.provider, call.stream, server)
        shape = self._shapes.get(key)
        if shape is None:
            provider = provider_name(call, server[0])
            attributes = shape_attributes(call, provider, server)
            attributes.update(openinference.request_attributes(call, provider))
            metric_attributes = {name: attributes[name] for name in _METRIC_KEYS if name in attributes}
            shape = (span_name(call), attributes, metric_attributes)
            if len(self._shapes) >= _MAX_SHAPES:
                self._shapes.clear()
            self._shapes[key] = shape
        return shape
