"""Per-call overhead of `sdk.wrap` (telemetry on) against the raw client and two OpenAI instrumentations.

    .venv/bin/python tests/benchmarks/bench_sdk_overhead.py [--calls 300] [--rounds 7]

Contenders, each in its own process (OpenLLMetry's `uninstrument()` does not unwrap), all with the
same OpenTelemetry SDK setup (TracerProvider + BatchSpanProcessor to a null exporter, MeterProvider
with an in-memory reader), against one loopback mock server in a process of its own:

    raw          openai.OpenAI, nothing else
    kvwise-noop  sdk.wrap with no OpenTelemetry SDK configured (the SDK's own rewrite and guards)
    kvwise       sdk.wrap, telemetry on
    otel-genai   opentelemetry-instrumentation-genai-openai's OpenAIInstrumentor (official GenAI)
    openllmetry  opentelemetry-instrumentation-openai's OpenAIInstrumentor (Traceloop), its defaults

Both peers work with openai 3.x as installed (genai-openai 1.3b0, OpenLLMetry 0.62.4); a peer that
fails to import or instrument is listed with its error instead of a figure. The deprecated
`opentelemetry-instrumentation-openai-v2` is no contender: it does not import with openai 3.x.

The mock answers with Content-Length and TCP_NODELAY (without them every call stalls ~40 ms on
delayed ACKs). The contenders' rounds are interleaved (so a change in machine load hits all alike)
and each figure is the best round's mean µs per call; the non-streamed call and a 200-chunk stream
are timed in the same run. `recorder` times kvwise's `CallRecord` alone (start, activate, attempt,
chunks, end with usage; no I/O) with the same SDK setup.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MODEL = "gpt-5.4-mini"
STREAM_CHUNKS = 200
CONTENDERS = ("raw", "kvwise-noop", "kvwise", "otel-genai", "openllmetry")
PEERS = ("otel-genai", "openllmetry")
MESSAGES = [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "What is prefill?"}]
USAGE = {"prompt_tokens": 20, "completion_tokens": STREAM_CHUNKS, "total_tokens": 20 + STREAM_CHUNKS,
         "prompt_tokens_details": {"cached_tokens": 0}}


# --- the mock server -------------------------------------------------------------------------


def _completion_body() -> bytes:
    return json.dumps({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 1, "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Prefill reads the prompt."},
                     "finish_reason": "stop"}],
        "usage": USAGE,
    }).encode()


def _stream_body() -> bytes:
    def chunk(delta: dict[str, Any], finish: str | None, usage: dict[str, Any] | None = None) -> str:
        choices = [{"index": 0, "delta": delta, "finish_reason": finish}] if usage is None else []
        event = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
                 "choices": choices, "usage": usage}
        return f"data: {json.dumps(event)}\n\n"

    events = [chunk({"role": "assistant", "content": ""}, None)]
    events += [chunk({"content": f"tok{i} "}, None) for i in range(STREAM_CHUNKS)]
    events += [chunk({}, "stop"), chunk({}, None, USAGE), "data: [DONE]\n\n"]
    return "".join(events).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    whole, streamed = _completion_body(), _stream_body()

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        stream = bool(request.get("stream"))
        body = self.streamed if stream else self.whole
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream" if stream else "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return


def serve(port_file: str) -> None:
    """Run the mock server; write its port to `port_file` once it listens."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    Path(port_file).write_text(str(server.server_address[1]))
    server.serve_forever()


# --- one contender ---------------------------------------------------------------------------


def _install_otel_sdk() -> tuple[Any, Any]:
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class NullExporter(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(NullExporter()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    return tracer_provider, meter_provider


def _client(name: str, port: int) -> Any:
    import openai

    if name in PEERS or name == "kvwise":
        _install_otel_sdk()
    if name == "otel-genai":
        from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument()
    elif name == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor as TraceloopInstrumentor

        TraceloopInstrumentor().instrument()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="bench", max_retries=0)
    if name.startswith("kvwise"):
        import sdk

        return sdk.wrap(client)
    return client


def _mean_us(fn: Callable[[], Any], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


class Contender:
    """One contender's client in this process: warmed up, then timed one round at a time."""

    def __init__(self, name: str, port: int) -> None:
        client = _client(name, port)
        create = client.chat.completions.create
        self.whole = lambda: create(model=MODEL, messages=MESSAGES)
        self.streamed = lambda: [_ for _ in create(model=MODEL, messages=MESSAGES, stream=True,
                                                   stream_options={"include_usage": True})]


class Recorder:
    """kvwise's telemetry alone (start, activate, attempt, chunks, end with usage; no I/O), same SDK setup."""

    def __init__(self) -> None:
        from sdk.adapters import adapter_for
        from sdk.call import Api, Provider, Usage
        from sdk.policy import Policy
        from sdk.telemetry import Telemetry

        tracer_provider, meter_provider = _install_otel_sdk()
        telemetry = Telemetry(Policy(), tracer_provider, meter_provider)
        usage = Usage(input_tokens=2048, output_tokens=STREAM_CHUNKS, cache_read_tokens=1024)

        def one(stream: bool) -> Callable[[], None]:
            native = {"model": MODEL, "messages": MESSAGES, "stream": stream, "max_tokens": 512}
            call = adapter_for(Api.CHAT).to_call(native, Provider.OPENAI)

            def run() -> None:
                record = telemetry.start(call, ("127.0.0.1", 8000))
                with record.activate():
                    record.attempt(1)
                if stream:
                    record.first_chunk()
                    for _ in range(STREAM_CHUNKS):
                        record.chunk()
                record.end(usage=usage, response_id="r", response_model=MODEL, finish_reasons=("stop",))

            return run

        self.whole, self.streamed = one(False), one(True)


def work(name: str, port: int, calls: int) -> None:
    """A contender process: set up, warm up, then answer one timed round per line read from stdin."""
    try:
        contender: Contender | Recorder = Recorder() if name == "recorder" else Contender(name, port)
        for _ in range(max(calls // 5, 10)):
            contender.whole()
        for _ in range(max(calls // 50, 3)):
            contender.streamed()
    except Exception as error:  # a peer that does not work with the installed client: say why
        print(json.dumps({"error": f"{type(error).__name__}: {error}"[:300]}), flush=True)
        return
    scale = 5 if name == "recorder" else 1  # no I/O: more calls for the same precision
    print(json.dumps({"ready": True}), flush=True)
    for _ in sys.stdin:
        whole = _mean_us(contender.whole, calls * scale)
        streamed = _mean_us(contender.streamed, max(calls // 10, 5) * scale)
        print(json.dumps({"whole_us": whole, "stream_us": streamed}), flush=True)


# --- the driver ------------------------------------------------------------------------------


def _rounds(names: tuple[str, ...], common: list[str], rounds: int) -> list[dict[str, Any]]:
    """Run every contender in its own process, interleaving their rounds so load changes hit all alike."""
    workers: dict[str, subprocess.Popen[str]] = {}
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        worker = subprocess.Popen([sys.executable, __file__, "--contender", name, *common], cwd=ROOT, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert worker.stdout is not None
        first = worker.stdout.readline()
        status = json.loads(first) if first.startswith("{") else {"error": worker.stderr.read().strip()[-300:] if worker.stderr else "?"}
        if "error" in status:
            results[name] = {"name": name, "error": status["error"]}
            worker.kill()
            continue
        workers[name] = worker
        results[name] = {"name": name, "whole_us": [], "stream_us": []}
    for _ in range(rounds):
        for name, worker in workers.items():
            assert worker.stdin is not None and worker.stdout is not None
            worker.stdin.write("round\n")
            worker.stdin.flush()
            measured = json.loads(worker.stdout.readline())
            for key in ("whole_us", "stream_us"):
                results[name][key].append(measured[key])
    for name, worker in workers.items():
        worker.kill()
        worker.wait()
        for key in ("whole_us", "stream_us"):
            results[name][key] = min(results[name][key])  # the least disturbed round
    return [results[name] for name in names]


def _report(results: list[dict[str, Any]]) -> None:
    by_name = {r["name"]: r for r in results}
    raw = by_name.get("raw", {})
    print(f"\nµs per call (best of interleaved rounds); overhead = contender - raw; {STREAM_CHUNKS}-chunk stream\n")
    print(f"{'contender':<13} {'call':>9} {'overhead':>9} {'x raw':>6} {'stream':>9} {'overhead':>9} {'x raw':>6}")
    for r in results:
        if "error" in r:
            print(f"{r['name']:<13} does not work here: {r['error']}")
            continue
        cells = []
        for key in ("whole_us", "stream_us"):
            value, base = r[key], raw.get(key)
            extra = value - base if base and r["name"] != "recorder" else value
            ratio = f"{value / base:6.2f}" if base and r["name"] != "recorder" else "     -"
            cells.append(f"{value:9.0f} {extra:9.0f} {ratio}")
        print(f"{r['name']:<13} " + " ".join(cells))
    kvwise = by_name.get("kvwise")
    if kvwise and "error" not in kvwise and raw:
        for peer in PEERS:
            other = by_name.get(peer)
            if other and "error" not in other:
                for key, label in (("whole_us", "call"), ("stream_us", "stream")):
                    ours, theirs = kvwise[key] - raw[key], other[key] - raw[key]
                    verdict = f"{theirs / ours:.1f}x kvwise's" if ours > 0 else "kvwise adds nothing measurable"
                    print(f"{peer} {label} overhead: {theirs:.0f} µs vs kvwise {ours:.0f} µs ({verdict})")


def main() -> None:
    """Start the mock server, time every contender in its own process, print the table and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="calls per round (streams: a tenth)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--contender", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    if args.contender:
        work(args.contender, args.port, args.calls)
        return
    port_file = Path(f"/tmp/kvwise-bench-{time.time_ns()}.port")
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port_file)], cwd=ROOT)
    try:
        while not port_file.exists() or not port_file.read_text():
            time.sleep(0.05)
        port = int(port_file.read_text())
        results = _rounds((*CONTENDERS, "recorder"), ["--calls", str(args.calls), "--port", str(port)], args.rounds)
    finally:
        server.terminate()
        server.wait()
        port_file.unlink(missing_ok=True)
    _report(results)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
