"""`sdk.telemetry.setup`: OTLP/HTTP export for apps without tracing, and calls unharmed when it fails."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from sdk import semconv as sc
from sdk.telemetry import setup
from sdk.telemetry.setup import traces_url

SUBPROCESS_TIMEOUT_S = 120
EXPORT_TIMEOUT_S = "2"
"""OTLP export timeout of the app whose backend is down: its flush at exit retries for that long."""
SIMULATOR_REPLY = "Prefill reads the prompt once."


class _Collector(ThreadingHTTPServer):
    """An OTLP/HTTP receiver on a free loopback port that keeps what it is sent: (path, request) pairs."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Receive)
        self.received: list[tuple[str, ExportTraceServiceRequest]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Receive(BaseHTTPRequestHandler):
    server: _Collector

    def do_POST(self) -> None:  # noqa: N802 (http.server's spelling)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.received.append((self.path, ExportTraceServiceRequest.FromString(body)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[_Collector]:
    server = _Collector()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port that refuses connections: bound (so nobody else takes it) but not listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def test_setup_sends_spans_with_the_service_and_the_phoenix_project_to_the_otlp_traces_path(
    collector: _Collector,
) -> None:
    provider = setup(collector.url, service_name="my-service", project="my-project", set_global=False)
    provider.get_tracer("test").start_span("chat m").end()
    provider.shutdown()
    [(path, request)] = collector.received
    [resource_spans] = request.resource_spans
    resource = {kv.key: kv.value.string_value for kv in resource_spans.resource.attributes}
    assert path == "/v1/traces"
    assert resource.items() >= {"service.name": "my-service", sc.OPENINFERENCE_PROJECT_NAME: "my-project"}.items()
    assert [span.name for scope in resource_spans.scope_spans for span in scope.spans] == ["chat m"]


def test_setup_without_a_project_leaves_phoenix_to_its_default_project(collector: _Collector) -> None:
    provider = setup(collector.url, set_global=False)
    provider.get_tracer("test").start_span("chat m").end()
    provider.shutdown()
    keys = {kv.key for kv in collector.received[0][1].resource_spans[0].resource.attributes}
    assert "service.name" in keys and sc.OPENINFERENCE_PROJECT_NAME not in keys


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        ("http://127.0.0.1:6006", "http://127.0.0.1:6006/v1/traces"),
        ("http://127.0.0.1:6006/", "http://127.0.0.1:6006/v1/traces"),
        ("http://127.0.0.1:4318/v1/traces", "http://127.0.0.1:4318/v1/traces"),
        ("https://collector.example/otlp", "https://collector.example/otlp/v1/traces"),
    ],
)
def test_an_endpoint_is_a_base_url_or_the_full_traces_url(endpoint: str, expected: str) -> None:
    assert traces_url(endpoint) == expected


def test_importing_sdk_loads_neither_the_opentelemetry_sdk_nor_an_exporter() -> None:
    probe = (
        "import sys, sdk, sdk.telemetry;"
        " print(sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk', 'opentelemetry.exporter'))))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


APP = textwrap.dedent(
    """
    import sys
    import openai
    import sdk
    from sdk.telemetry import setup

    base_url, endpoint = sys.argv[1], sys.argv[2]
    if endpoint != "off":
        setup(endpoint, project="down")
    client = sdk.wrap(openai.OpenAI(base_url=base_url, api_key="k", max_retries=0))
    messages = [{"role": "user", "content": "What is prefill?"}]
    answer = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
    print(answer.choices[0].message.content)
    stream = client.chat.completions.create(model="gpt-4o-mini", messages=messages, stream=True)
    print("".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices))
    """
)


@pytest.mark.parametrize("telemetry", ["off", "backend down"])
def test_calls_succeed_and_no_exception_reaches_the_app_with_telemetry_off_or_its_backend_down(
    simulator: Any, closed_port: int, telemetry: str
) -> None:
    simulator.reply = SIMULATOR_REPLY
    endpoint = "off" if telemetry == "off" else f"http://127.0.0.1:{closed_port}"
    result = subprocess.run(
        [sys.executable, "-c", APP, simulator.openai_base_url, endpoint],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        env={**os.environ, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": EXPORT_TIMEOUT_S},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [SIMULATOR_REPLY, SIMULATOR_REPLY]
    assert "Traceback" not in result.stderr


EXITING_APP = textwrap.dedent(
    """
    import sys
    from sdk.telemetry import setup

    tracer = setup(sys.argv[1], project="down").get_tracer("app")
    for index in range(5):
        with tracer.start_as_current_span(f"work {index}"):
            pass
    """
)
SLOW_EXPORT_TIMEOUT_S = "30"  # the exporter's own timeout: OpenTelemetry's shutdown alone would wait it out
EXIT_WELL_WITHIN_S = (
    22.0  # EXPORT_SHUTDOWN_SECONDS (5 s) plus a loaded start-up, loosely; waiting the export out takes 30 s
)


@pytest.fixture
def black_hole() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(16)
        yield listening.getsockname()[1]


@pytest.mark.parametrize("backend", ["refused", "black hole"])
def test_a_process_exporting_to_a_dead_endpoint_exits_within_the_shutdown_bound_and_says_what_it_dropped(
    closed_port: int, black_hole: int, backend: str
) -> None:
    port = closed_port if backend == "refused" else black_hole
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", EXITING_APP, f"http://127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        env={**os.environ, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": SLOW_EXPORT_TIMEOUT_S},
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert "5 of 5 spans were not exported" in result.stderr
    assert elapsed < EXIT_WELL_WITHIN_S, elapsed
