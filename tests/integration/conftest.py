"""One Phoenix, one local server on a tiny checkpoint, and the traced calls, shared by the Phoenix tests.

The calls go through a real `openai` client wrapped by `sdk.wrap`, to the real local backend, and
their spans to Phoenix by `sdk.telemetry.setup` (OTLP/HTTP); an in-memory exporter on the same
provider keeps what was sent, to compare with what Phoenix stored. Phoenix runs from its own venv
(built on first use by `make phoenix-venv`); nothing of it is imported here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import sdk
from examples.phoenix import Phoenix, phoenix_server
from local_backend import Engine
from local_backend.server import create_app, serve_in_thread
from sdk.telemetry import setup
from tests.local_backend.conftest import _build

PROJECT = "kvwise-test"
MODEL = "gpt-5.4-mini"
"""The name the tiny checkpoint is served under: a hosted model priced in kvwise's table and in Phoenix's
(Phoenix prices a span by `llm.model_name` from its own table and ignores `llm.cost.*`)."""
SYSTEM = "Prefill computes the prompt; decode emits one token at a time. A KV cache stores keys and values. " * 2
LOOP_MAX_TOKENS = 480
"""Room for the repeated two-character token (" e") to pass the loop guard's tripping span (640 characters)."""

ASK = {"stream": True, "stream_options": {"include_usage": True}, "max_tokens": 24}
CALLS: tuple[tuple[str, dict[str, Any]], ...] = (
    (
        "streamed",
        {**ASK, "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is prefill?"}]},
    ),
    (
        "cached",
        {**ASK, "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is prefill?"}]},
    ),
    ("non-streamed", {"max_tokens": 16, "messages": [{"role": "user", "content": "What is decode?"}]}),
    # A strongly negative frequency penalty makes the tiny model repeat one token: the loop guard cuts it.
    (
        "looping",
        {
            **ASK,
            "max_tokens": LOOP_MAX_TOKENS,
            "frequency_penalty": -2.0,
            "messages": [{"role": "user", "content": "Say it again."}],
        },
    ),
    (
        "captured",
        {**ASK, "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is prefill?"}]},
    ),
)
"""The calls made, by name, in order: the second repeats the first's prefix, so it reads the cache;
the last repeats the second's request through a client that captures content."""
CAPTURED = frozenset({"captured"})
"""The calls sent with content capture on (`Policy(capture_content=True)`); the others have it off."""


@dataclass(frozen=True, slots=True)
class Traced:
    """What the calls sent (in-memory spans) and what Phoenix stored (REST spans), by span id."""

    phoenix: Phoenix
    roots: dict[str, ReadableSpan]
    sent: dict[str, ReadableSpan]
    stored: dict[str, dict[str, Any]]

    def stored_children(self, root: ReadableSpan) -> list[dict[str, Any]]:
        """Phoenix's spans whose parent is `root`."""
        parent = span_id(root)
        return [span for span in self.stored.values() if span["parent_id"] == parent]


def span_id(span: ReadableSpan) -> str:
    """A span's id as Phoenix's REST API spells it (16 hex digits)."""
    return f"{span.context.span_id:016x}"


def trace_id(span: ReadableSpan) -> str:
    """A span's trace id as Phoenix spells it (32 hex digits)."""
    return f"{span.context.trace_id:032x}"


@pytest.fixture(scope="package")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    with phoenix_server(tmp_path_factory.mktemp("phoenix")) as server:
        yield server


@pytest.fixture(scope="package")
def local_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    checkpoint = _build(tmp_path_factory.mktemp("checkpoint") / "llama", "llama")
    engine = Engine.from_pretrained(checkpoint, device="cpu", max_model_len=512, kv_cache_memory=2**22)
    try:
        with serve_in_thread(create_app(engine, model_name=MODEL)) as url:
            yield url
    finally:
        engine.close()


@pytest.fixture(scope="package")
def traced(phoenix: Phoenix, local_url: str) -> Traced:
    memory = InMemorySpanExporter()
    provider = setup(phoenix.url, project=PROJECT, set_global=False)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    raw = openai.OpenAI(base_url=f"{local_url}/v1", api_key="local", max_retries=0)
    clients = {
        capture: sdk.wrap(raw, sdk.Policy(capture_content=capture), tracer_provider=provider)
        for capture in (False, True)
    }
    for name, kwargs in CALLS:
        answer = clients[name in CAPTURED].chat.completions.create(model=MODEL, temperature=0, **kwargs)
        if kwargs.get("stream"):
            for _ in answer:
                pass
    provider.force_flush()
    sent = {span_id(span): span for span in memory.get_finished_spans()}
    stored = {span["context"]["span_id"]: span for span in phoenix.wait_for_spans(PROJECT, len(sent))}
    provider.shutdown()
    roots = sorted((span for span in sent.values() if span.parent is None), key=lambda span: span.start_time or 0)
    return Traced(phoenix, {name: root for (name, _), root in zip(CALLS, roots, strict=True)}, sent, stored)
