"""Whatever the wrapped client traces itself, it traces as bare, under kvwise's call span, and the
wrapped client sends no header the bare client would not.

anthropic 2.x traces its own calls whenever OpenTelemetry gives it a tracer (a global provider, or
its `open_telemetry={"tracer_provider": ...}`); openai 3.x traces nothing. Wrapped, the client's own
spans are the bare client's (names, attributes, one per call as its own retry loop has them) and
kvwise's call span is their parent: one trace per call, never two sibling call spans. Real clients
over loopback against the simulator, the real OpenTelemetry SDK with in-memory exporters, a global
provider installed by the test and the one before put back after it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from opentelemetry.util._once import Once

import sdk
from sdk import semconv as sc
from tests.sdk.helpers import anthropic_traces_itself, collect, resolve
from tests.sdk.telemetry.test_telemetry_spans import Otel, otel  # noqa: F401

pytestmark = pytest.mark.skipif(  # this module's subject
    not anthropic_traces_itself(),
    reason="the installed anthropic traces nothing of its own (open_telemetry=, from 2.x)",
)

CLAUDE = "claude-sonnet-4-6"
USER = [{"role": "user", "content": "What is prefill?"}]
TRACE_HEADERS = ("traceparent", "tracestate", "baggage")


@pytest.fixture
def global_spans() -> Iterator[InMemorySpanExporter]:
    """A real SDK provider installed as the global one for the test (`set_tracer_provider` takes one
    per process, so the test puts the one before, and its guard, back)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    before = (trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE)
    trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = None, Once()
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = before
        provider.shutdown()


def _client(simulator: Any, mode: str, family: str, **options: Any) -> Any:
    """A client as a user makes one: its own retries (kvwise's then follow the Policy), its own tracing."""
    if family == "anthropic":
        cls: Any = anthropic.Anthropic if mode == "sync" else anthropic.AsyncAnthropic
        return cls(base_url=simulator.anthropic_base_url, api_key="test-key", **options)
    cls = openai.OpenAI if mode == "sync" else openai.AsyncOpenAI
    return cls(base_url=simulator.openai_base_url, api_key="test-key", **options)


def _with_usage(spans: tuple[ReadableSpan, ...]) -> list[str]:
    """The CLIENT spans that carry usage (a backend summing `gen_ai.usage.*` sums these), by name."""
    return [
        span.name
        for span in spans
        if span.kind is SpanKind.CLIENT and sc.GEN_AI_USAGE_INPUT_TOKENS in (span.attributes or {})
    ]


CALLS: dict[str, tuple[str, str, Callable[[Any], Any]]] = {  # family, how it is read, the call
    "messages": ("anthropic", "answer", lambda c: c.messages.create(model=CLAUDE, max_tokens=64, messages=USER)),
    "messages, streamed": (
        "anthropic",
        "stream",
        lambda c: c.messages.create(model=CLAUDE, max_tokens=64, messages=USER, stream=True),
    ),
    "beta messages, streamed": (
        "anthropic",
        "stream",
        lambda c: c.beta.messages.create(model=CLAUDE, max_tokens=64, messages=USER, stream=True),
    ),
    "messages.stream helper": (
        "anthropic",
        "helper",
        lambda c: c.messages.stream(model=CLAUDE, max_tokens=64, messages=USER),
    ),
    "chat, streamed": (
        "openai",
        "stream",
        lambda c: c.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True),
    ),
}
MODELS = {"anthropic": CLAUDE, "openai": "gpt-4o-mini"}


async def _run(name: str, client: Any) -> None:
    """Make the call `name` and read its answer to the end."""
    _, how, call = CALLS[name]
    if how == "helper":
        manager = call(client)
        if hasattr(manager, "__aenter__"):
            async with manager as stream:
                await stream.get_final_message()
        else:
            with manager as stream:
                stream.get_final_message()
        return
    answer = await resolve(call(client))
    if how == "stream":
        await collect(answer)


VARYING = frozenset({sc.GEN_AI_RESPONSE_ID, "anthropic.request.id"})
"""Client span attributes that differ between any two answers (the simulator's ids); timings (floats)
are compared by their presence alone."""


def _client_spans(spans: tuple[ReadableSpan, ...]) -> list[tuple[str, dict[str, Any]]]:
    """The client's own spans (`anthropic.*`), by name and attributes but what differs per answer."""
    return sorted(
        (
            (
                span.name,
                {
                    key: float if isinstance(value, float) else value
                    for key, value in (span.attributes or {}).items()
                    if key not in VARYING
                },
            )
            for span in spans
            if span.name.startswith("anthropic.")
        ),
        key=lambda named: named[0],
    )


@pytest.mark.parametrize("name", list(CALLS))
async def test_a_call_under_a_global_tracer_provider_keeps_the_clients_own_spans_under_kvwises(
    simulator: Any, mode: str, name: str, global_spans: InMemorySpanExporter
) -> None:
    family = CALLS[name][0]
    seen = []
    for make in (lambda client: client, sdk.wrap):
        global_spans.clear()
        simulator.fail(429, times=1)  # two attempts under the client's own retry loop
        await _run(name, make(_client(simulator, mode, family)))
        seen.append(global_spans.get_finished_spans())
    bare, wrapped = seen
    assert len(simulator.requests) == 4
    assert _client_spans(wrapped) == _client_spans(bare)  # the bare client's spans: names, attributes, count
    assert len(_client_spans(bare)) == (1 if family == "anthropic" else 0)
    [root] = [span for span in wrapped if span.parent is None]  # one trace per call
    assert root.name == f"chat {MODELS[family]}" and root.kind is SpanKind.CLIENT
    for span in wrapped:
        assert span.context.trace_id == root.context.trace_id
        if span.name.startswith("anthropic."):
            assert span.parent is not None and span.parent.span_id == root.context.span_id


async def test_the_bare_anthropic_client_under_a_global_tracer_provider_has_one_of_its_own(
    simulator: Any, mode: str, global_spans: InMemorySpanExporter
) -> None:
    """What the wrapped client is held to: the bare one's single CLIENT span with usage."""
    await _run("messages", _client(simulator, mode, "anthropic"))
    assert _with_usage(global_spans.get_finished_spans()) == ["anthropic.messages.create"]


async def test_the_clients_own_span_stays_the_calls_one_where_kvwise_records_nothing(
    simulator: Any, mode: str, otel: Otel
) -> None:
    client = _client(simulator, mode, "anthropic", open_telemetry={"tracer_provider": otel.tracer_provider})
    await _run("messages, streamed", sdk.wrap(client))  # no provider for kvwise, none global
    assert _with_usage(otel.spans()) == ["anthropic.messages.create"]


@pytest.mark.parametrize("name", ["messages", "messages, streamed"])
async def test_the_clients_own_spans_of_a_retried_call_are_the_bare_clients(
    simulator: Any, mode: str, otel: Otel, name: str
) -> None:
    """The client's own retry loop runs under its own span, as bare: not one span per kvwise send."""
    seen = []
    for make in (lambda client: client, sdk.wrap):
        otel.spans_exporter.clear()
        simulator.fail(429, times=1)
        client = _client(simulator, mode, "anthropic", open_telemetry={"tracer_provider": otel.tracer_provider})
        await _run(name, make(client))  # no provider for kvwise, none global
        seen.append(sorted((span.name, span.parent is None) for span in otel.spans()))
    bare, wrapped = seen
    assert wrapped == bare and ("anthropic.messages.create", True) in bare
    assert len(simulator.requests) == 4


def _trace_ids(headers: dict[str, str]) -> tuple[str, str] | None:
    """(trace id, parent span id) of a `traceparent` header, None without one."""
    value = headers.get("traceparent")
    return None if value is None else tuple(value.split("-")[1:3])  # type: ignore[return-value]


NO_PROVIDER, GLOBAL_PROVIDER, APP_SPAN = "no global provider", "a global provider", "inside the app's own span"


@pytest.mark.parametrize("scene", [NO_PROVIDER, GLOBAL_PROVIDER, APP_SPAN])
async def test_a_wrapped_anthropic_client_sends_the_trace_headers_the_bare_one_sends_naming_kvwises_span(
    simulator: Any, mode: str, scene: str, otel: Otel, request: pytest.FixtureRequest
) -> None:
    if scene == GLOBAL_PROVIDER:
        request.getfixturevalue("global_spans")
    token = app_span = None
    if scene == APP_SPAN:  # a trace in progress: even a tracer that records nothing continues it
        app_span = otel.tracer_provider.get_tracer("app").start_span("handle request")
        token = otel_context.attach(trace.set_span_in_context(app_span))
    try:
        client = _client(simulator, mode, "anthropic")
        await _run("messages", client)
        await _run("messages", sdk.wrap(client, tracer_provider=otel.tracer_provider))
    finally:
        if token is not None:
            otel_context.detach(token)
    bare, wrapped = (sent.headers for sent in simulator.requests)
    assert set(wrapped) == set(bare)  # no header the bare client would not send, none it sends missing
    assert [name for name in TRACE_HEADERS if name in wrapped] == ([] if scene == NO_PROVIDER else ["traceparent"])
    if scene == NO_PROVIDER:
        return
    [root] = [span for span in otel.spans() if span.name == f"chat {CLAUDE}"]
    parent = root  # the span whose context the client sends: kvwise's, or the client's own under it
    if scene == GLOBAL_PROVIDER:
        [parent] = [
            span
            for span in request.getfixturevalue("global_spans").get_finished_spans()
            if span.parent is not None and span.parent.span_id == root.context.span_id
        ]
        assert parent.name == "anthropic.messages.create"
    assert _trace_ids(wrapped) == (f"{root.context.trace_id:032x}", f"{parent.context.span_id:016x}")
    if app_span is not None:  # both continue the app's trace
        assert _trace_ids(bare) == (
            f"{app_span.get_span_context().trace_id:032x}",
            f"{app_span.get_span_context().span_id:016x}",
        )
        assert root.parent is not None and root.parent.span_id == app_span.get_span_context().span_id


TRACING_API = ("get_tracer_provider", "get_tracer", "get_current_span", "use_span", "set_span_in_context")
"""OpenTelemetry's tracing entry points: what a client whose tracing is off calls none of, bare."""


@pytest.mark.parametrize("switch", ["open_telemetry=False", "ANTHROPIC_OPEN_TELEMETRY=false"])
async def test_a_client_whose_own_tracing_is_off_is_traced_by_kvwise_no_more_than_bare(
    simulator: Any, mode: str, switch: str, global_spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The app said no traces for this client: kvwise, given no provider of its own, records none for it
    either (the global provider sees nothing) and calls nothing of the tracing API, wrapped as bare."""
    options: dict[str, Any] = {}
    if switch.startswith("ANTHROPIC"):
        monkeypatch.setenv("ANTHROPIC_OPEN_TELEMETRY", "false")  # read when the client is built
    else:
        options["open_telemetry"] = False
    called: dict[str, list[str]] = {}
    for bare in (True, False):
        seen = called.setdefault("bare" if bare else "wrapped", [])
        with monkeypatch.context() as patched:
            for name in TRACING_API:
                original = getattr(trace, name)
                patched.setattr(
                    trace, name, lambda *a, _f=original, _n=name, _s=seen, **k: _s.append(_n) or _f(*a, **k)
                )
            client = _client(simulator, mode, "anthropic", **options)
            client = client if bare else sdk.wrap(client)
            for name in ("messages", "messages, streamed", "messages.stream helper"):
                await _run(name, client)
    assert called == {"bare": [], "wrapped": []}
    assert global_spans.get_finished_spans() == ()
    assert len(simulator.requests) == 6 and not any("traceparent" in sent.headers for sent in simulator.requests)


async def test_a_client_whose_own_tracing_is_on_is_traced_by_kvwise_under_the_global_provider(
    simulator: Any, mode: str, global_spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The counterpart: the same client with its tracing on, and an openai client (no tracing of its own)."""
    monkeypatch.setenv("ANTHROPIC_OPEN_TELEMETRY", "true")
    await _run("messages", sdk.wrap(_client(simulator, mode, "anthropic")))
    await _run("chat, streamed", sdk.wrap(_client(simulator, mode, "openai")))
    names = sorted(span.name for span in global_spans.get_finished_spans() if span.kind is SpanKind.CLIENT)
    assert names == ["anthropic.messages.create", f"chat {CLAUDE}", "chat gpt-4o-mini"]


async def test_a_tracer_provider_given_to_wrap_records_the_calls_of_a_client_whose_tracing_is_off(
    simulator: Any, mode: str, otel: Otel
) -> None:
    """kvwise's own provider, named by the app: kvwise's span alone (the client's are off), and the
    headers the bare client sends (no trace context)."""
    client = _client(simulator, mode, "anthropic", open_telemetry=False)
    await _run("messages", client)
    await _run("messages, streamed", sdk.wrap(client, tracer_provider=otel.tracer_provider))
    assert [span.name for span in otel.spans() if span.kind is SpanKind.CLIENT] == [f"chat {CLAUDE}"]
    bare, wrapped = (sent.headers for sent in simulator.requests)
    assert set(wrapped) == set(bare) and "traceparent" not in wrapped
