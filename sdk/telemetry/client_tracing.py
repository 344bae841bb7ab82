"""The wrapped client's own tracing under kvwise: its spans as the bare client has them, under kvwise's.

anthropic 2.x traces its API calls itself, on by default whenever OpenTelemetry gives it a tracer
(`ANTHROPIC_OPEN_TELEMETRY=false`, or the client's `open_telemetry=False`, turns it off): a CLIENT
span such as `anthropic.messages.create` per call, started under the span current when it is
called, and that span's trace context (`traceparent`, and whatever else the registered propagators
write) on each request. openai 3.x traces nothing of its own.

kvwise sends through the client with its own call span current (`CallRecord.activate`), so where
the client's tracer records, the client's spans are the bare client's, names, attributes and
headers, as children of kvwise's: one trace per call, never two sibling call spans. Where it
records nothing, the client still writes the context of the span current when it sends, kvwise's,
which would make the wrapped client send a `traceparent` the bare one does not; so there kvwise's
sends start no span of the client's (`sdk.compat.send_options`: it has none that records) and
carry, in its place, the trace headers the bare client would have sent, with kvwise's span as
their parent: none where the bare client sends none (its tracing or propagation off, or no trace
in progress to continue).

Where the client's own tracing is switched off, kvwise records no span of its own for it either,
unless `sdk.wrap` was given a tracer provider (`sdk.telemetry.Telemetry`): the app said no traces
for this client, and it calls nothing of OpenTelemetry's tracing API, wrapped as bare.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider, Span

logger = logging.getLogger(__name__)

_NO_TRACER = (NoOpTracerProvider, ProxyTracerProvider)
"""Providers whose tracers record nothing (the proxy is what the global provider is until an app
sets one): a span they start only carries on the context it starts in."""


def switched_off(client: Any) -> bool:
    """Whether `client`'s own tracing is switched off: anthropic's resolved `open_telemetry` option
    says its traces are disabled (the client was given `False`, or `traces` off, or was built with no
    option while `ANTHROPIC_OPEN_TELEMETRY=false`). A client with no tracing of its own (openai's),
    or an option that cannot be read, is not switched off. Never raises."""
    try:
        options = getattr(client, "open_telemetry", None)
        return isinstance(options, Mapping) and options["traces"]["enabled"] is False
    except Exception:
        logger.debug("kvwise telemetry: could not read the client's tracing switch", exc_info=True)
        return False


def trace_headers(client: Any, span: Span | None) -> dict[str, str] | None:
    """What kvwise's attempts through `client` send in place of the client's own tracing, for the
    call whose span is `span`; read in the caller's context, before `span` is made current.

    None: the client keeps its own spans and headers (it has no tracing of its own, or its tracer
    records: its spans are then children of kvwise's). Else its tracer records nothing, and these
    headers (perhaps none) are sent in place of what it would write: the propagators' output for
    `span`'s context where the bare client would have propagated a context. Never raises.
    """
    options = getattr(client, "open_telemetry", None)  # anthropic's resolved `open_telemetry` option
    if options is None or not isinstance(options, Mapping):  # None first: openai's clients have none
        return None
    try:
        if not options["traces"]["enabled"]:  # no span, no headers: nothing to stand in for
            return None
        provider = options.get("tracer_provider") or trace.get_tracer_provider()
        if not isinstance(provider, _NO_TRACER):  # the client's tracer makes spans of its own, under kvwise's
            return None
        if not options["propagation"] or not trace.get_current_span().get_span_context().is_valid:
            return {}
        # Importing it loads the environment's propagators: on first use, as the client does.
        from opentelemetry.propagate import inject

        carrier: dict[str, str] = {}
        inject(carrier, context=trace.set_span_in_context(span) if span is not None else None)
        return carrier
    except Exception:
        logger.debug(
            "kvwise telemetry: could not read the client's tracing options; it traces as it would", exc_info=True
        )
        return None
