"""`setup()`: an OpenTelemetry SDK exporting over OTLP/HTTP, for apps that have no tracing yet.

    from sdk.telemetry import setup
    setup("http://127.0.0.1:6006", project="my-app")   # Phoenix; or Jaeger, Tempo, any collector
    client = sdk.wrap(openai.OpenAI())                   # its spans now go there

Needs the `otlp` extra (`opentelemetry-sdk`, `opentelemetry-exporter-otlp-proto-http`), imported
only when `setup` runs, so `sdk` itself still needs `opentelemetry-api` alone. Nothing here runs on
import. Export happens on a background thread: a slow or unreachable backend costs the calls
nothing, and the exporter's failures are logged by OpenTelemetry, never raised into the app.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opentelemetry import trace

from sdk import semconv as sc

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

_TRACES_PATH = "/v1/traces"
"""OTLP/HTTP's traces path, appended to a base URL (as the exporter does to OTEL_EXPORTER_OTLP_ENDPOINT)."""


def setup(
    endpoint: str | None = None,
    service_name: str = "kvwise",
    project: str | None = None,
    *,
    set_global: bool = True,
) -> TracerProvider:
    """Build a `TracerProvider` that batches spans to an OTLP/HTTP endpoint, and make it the global one.

    `endpoint` is a base URL (`http://127.0.0.1:6006`, `/v1/traces` is appended) or the full traces
    URL; `None` leaves it to the standard variables (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
    `OTEL_EXPORTER_OTLP_ENDPOINT`), else `http://localhost:4318/v1/traces`. `project` names the
    Phoenix project through the resource attribute `openinference.project.name`. With
    `set_global=False` the provider is only returned: pass it to `sdk.wrap(..., tracer_provider=)`.
    OpenTelemetry lets the global provider be set once per process; later calls only return theirs.
    Call `provider.shutdown()` (or let the process exit) to flush what is still queued: it waits at
    most `EXPORT_SHUTDOWN_SECONDS` for a backend that is down, then drops the spans and logs how many
    (`sdk.telemetry.bounded_export`).
    """
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider

    from sdk.telemetry.bounded_export import BoundedBatchSpanProcessor

    resource = {SERVICE_NAME: service_name}
    if project:
        resource[sc.OPENINFERENCE_PROJECT_NAME] = project
    provider = TracerProvider(resource=Resource.create(resource))
    url = traces_url(endpoint) if endpoint else None
    provider.add_span_processor(
        BoundedBatchSpanProcessor(OTLPSpanExporter(endpoint=url), url or "the OTLP endpoint of the environment")
    )
    if set_global:
        trace.set_tracer_provider(provider)
    return provider


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of `endpoint`: itself if it already ends in `/v1/traces`, else with it."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith(_TRACES_PATH) else endpoint + _TRACES_PATH
