"""Per-call overhead of `sdk.wrap` (telemetry on) against the raw client and two OpenAI instrumentations.

    .venv/bin/python tests/benchmarks/bench_sdk_overhead.py [--calls 300] [--rounds 5] [--processes 4]

Contenders, each in processes of its own (OpenLLMetry's `uninstrument()` does not unwrap), all with
the same OpenTelemetry SDK setup (TracerProvider + BatchSpanProcessor to a null exporter,
MeterProvider with an in-memory reader), against one loopback mock server in a process of its own:

    raw          openai.OpenAI, nothing else
    kvwise-noop  sdk.wrap with no OpenTelemetry SDK configured (the SDK's own rewrite and guards)
    kvwise       sdk.wrap, telemetry on
    otel-genai   opentelemetry-instrumentation-genai-openai's OpenAIInstrumentor (official GenAI)
    openllmetry  opentelemetry-instrumentation-openai's OpenAIInstrumentor (Traceloop), its defaults
    otel-floor   the raw client plus only the OpenTelemetry SDK calls that emit what kvwise records
                 for the call (its span with the same attributes, made current while the client
                 sends; a stream's prefill and decode spans; the same metric points), with every
                 attribute computed once up front: the least any instrumentation pays to emit it

With `--baseline FOLDER` (a checkout of an earlier commit, e.g. `git worktree add /tmp/base <commit>`)
one more contender, `kvwise-base`, runs that checkout's `sdk` the same way as `kvwise`: a regression
check whose figures share the run's load, where figures copied from another day would not.

Both peers work with openai 3.x as installed (genai-openai 1.3b0, OpenLLMetry 0.62.4); a peer that
fails to import or instrument is listed with its error instead of a figure. The deprecated
`opentelemetry-instrumentation-openai-v2` is no contender: it does not import with openai 3.x.

The mock answers with Content-Length and TCP_NODELAY (without them every call stalls on
delayed ACKs). The contenders' rounds are interleaved (so a change in machine load hits all alike),
each contender runs in `--processes` processes (one process's memory layout can cost it tens of µs
per call for its whole life), and each figure is the median over those processes of each one's best
round (mean µs per call); the non-streamed call and a 200-chunk stream are timed in the same run.
Each figure comes twice: wall-clock, and the CPU time of the contender's process (all its threads,
the span exporter's included), which the other load on a shared machine moves far less. Two rows
have no I/O at all, with the same SDK setup: `recorder` times kvwise's `CallRecord` alone (start,
activate, attempt, chunks, end with usage), and `floor-alone` the otel-floor's SDK calls alone (the
client is not called): what emitting kvwise's data costs before any I/O.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
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
CONTENDERS = ("raw", "kvwise-noop", "kvwise", "otel-genai", "openllmetry", "otel-floor")
PEERS = ("otel-genai", "openllmetry")
NO_IO = ("recorder", "floor-alone")
OPENINFERENCE_PREFIXES = ("llm.", "openinference.")
KEYS = ("whole_us", "stream_us", "whole_cpu_us", "stream_cpu_us")
"""What each round measures: wall-clock and CPU µs per call, plain and streamed."""
"""Rows timed without any I/O: absolute µs per call, not compared with the raw client."""
MESSAGES = [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "What is prefill?"}]
USAGE = {
    "prompt_tokens": 20,
    "completion_tokens": STREAM_CHUNKS,
    "total_tokens": 20 + STREAM_CHUNKS,
    "prompt_tokens_details": {"cached_tokens": 0},
}


# --- the mock server -------------------------------------------------------------------------


def _completion_body() -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1,
            "model": MODEL,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "Prefill reads the prompt."},
                    "finish_reason": "stop",
                }
            ],
            "usage": USAGE,
        }
    ).encode()


def _stream_body() -> bytes:
    def chunk(delta: dict[str, Any], finish: str | None, usage: dict[str, Any] | None = None) -> str:
        choices = [{"index": 0, "delta": delta, "finish_reason": finish}] if usage is None else []
        event = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": MODEL,
            "choices": choices,
            "usage": usage,
        }
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


def _install_otel_sdk(export_in_call: bool = False) -> tuple[Any, Any]:
    """The OpenTelemetry SDK every contender shares: spans to a null exporter, metrics in memory.

    Spans go through a `BatchSpanProcessor`, as in production; with `export_in_call` through a
    `SimpleSpanProcessor` instead, so each span is handed over when it ends rather than queued for a
    thread whose timing moves the cyclic collector's work (`bench_sdk_instructions` counts that way)."""
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult

    class NullExporter(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    processor = SimpleSpanProcessor if export_in_call else BatchSpanProcessor
    tracer_provider.add_span_processor(processor(NullExporter()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    return tracer_provider, meter_provider


def _client(name: str, port: int, baseline: str | None = None, export_in_call: bool = False) -> Any:
    import openai

    if name == "kvwise-base" and baseline:
        sys.path.insert(0, baseline)  # this process's `sdk` is the earlier checkout's
    if name in PEERS or name in ("kvwise", "kvwise-base"):
        _install_otel_sdk(export_in_call)
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


def _mean_us(fn: Callable[[], Any], calls: int) -> tuple[float, float]:
    """Mean µs per call of `fn`: wall-clock, and this process's CPU time (all its threads).

    The CPU figure is what a contender costs the app's process, without the waits a loaded
    machine adds to the wall-clock one (the mock server runs in a process of its own)."""
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6, (time.process_time() - cpu) / calls * 1e6


class Contender:
    """One contender's client in this process: warmed up, then timed one round at a time."""

    def __init__(self, name: str, port: int, baseline: str | None = None, export_in_call: bool = False) -> None:
        client = _client(name, port, baseline, export_in_call)
        create = client.chat.completions.create
        self.whole = lambda: create(model=MODEL, messages=MESSAGES)
        self.streamed = lambda: [
            _ for _ in create(model=MODEL, messages=MESSAGES, stream=True, stream_options={"include_usage": True})
        ]


class Recorder:
    """kvwise's telemetry alone (start, activate, attempt, chunks, end with usage; no I/O), same SDK setup."""

    def __init__(self) -> None:
        from sdk.adapters import adapter_for
        from sdk.call import Api, Provider, Usage
        from sdk.lifecycle import CallEnd, Ending
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
                record.end(
                    CallEnd(
                        Ending.ANSWERED, usage=usage, response_id="r", response_model=MODEL, finish_reasons=("stop",)
                    )
                )

            return run

        self.whole, self.streamed = one(False), one(True)


class _Captured:
    """What kvwise records for one call of each shape (plain, streamed), captured once from a real wrapped call."""

    def __init__(self, port: int) -> None:
        import openai
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

        import sdk

        started: dict[str, dict[str, Any]] = {}
        ended: dict[str, dict[str, Any]] = {}

        class Capture(SpanProcessor):
            def on_start(self, span: Any, parent_context: Any = None) -> None:
                started[span.name] = dict(span.attributes or {})

            def on_end(self, span: Any) -> None:
                ended[span.name] = dict(span.attributes or {})

        self.shapes: dict[bool, dict[str, Any]] = {}
        for stream in (False, True):
            tracer_provider, reader = TracerProvider(), InMemoryMetricReader()
            tracer_provider.add_span_processor(Capture())
            started.clear()
            ended.clear()
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="bench", max_retries=0)
            wrapped = sdk.wrap(
                client, tracer_provider=tracer_provider, meter_provider=MeterProvider(metric_readers=[reader])
            )
            answer = wrapped.chat.completions.create(
                model=MODEL,
                messages=MESSAGES,
                stream=stream,
                **({"stream_options": {"include_usage": True}} if stream else {}),
            )
            if stream:
                list(answer)
            data = reader.get_metrics_data()
            points = [
                (metric.name, dict(point.attributes))
                for rm in data.resource_metrics
                for sm in rm.scope_metrics
                for metric in sm.metrics
                for point in metric.data.data_points
            ]
            root = next(name for name in started if name.startswith("chat"))
            self.shapes[stream] = {
                "root": root,
                "start": started[root],
                "end": {key: value for key, value in ended[root].items() if key not in started[root]},
                "phases": {name: ended[name] for name in ("prefill", "decode") if name in ended},
                "points": points,
            }


class Floor:
    """The OpenTelemetry SDK calls that emit what kvwise records, around the raw client (see the module docstring).

    With `send=False` the client is not called: the SDK calls alone, no I/O (the `floor-alone` row).
    With `openinference=False` the span leaves out the OpenInference attributes (`llm.*`,
    `openinference.span.kind`, Phoenix's names for what the GenAI ones say): what DESIGN.md's
    GenAI and kvwise attributes cost alone (`bench_sdk_instructions`' `otel-floor-genai` row).
    """

    def __init__(self, port: int, send: bool = True, openinference: bool = True, export_in_call: bool = False) -> None:
        from opentelemetry import context, metrics, trace
        from opentelemetry.trace import SpanKind

        captured = _Captured(port)
        _install_otel_sdk(export_in_call)
        tracer, meter = trace.get_tracer("bench-floor"), metrics.get_meter("bench-floor")
        recorders: dict[str, Callable[[float, dict[str, Any]], None]] = {}
        create = _client("raw", port).chat.completions.create

        def recorder(name: str) -> Callable[[float, dict[str, Any]], None]:
            """`add` of a counter (kvwise's), `record` of a histogram (the GenAI ones), made once per name."""
            if name not in recorders:
                recorders[name] = (
                    meter.create_counter(name).add
                    if name.startswith("kvwise.")
                    else meter.create_histogram(name).record
                )
            return recorders[name]

        def kept(attributes: dict[str, Any]) -> dict[str, Any]:
            return (
                attributes
                if openinference
                else {key: value for key, value in attributes.items() if not key.startswith(OPENINFERENCE_PREFIXES)}
            )

        def one(stream: bool) -> Callable[[], None]:
            shape = captured.shapes[stream]
            start, end = kept(shape["start"]), kept(shape["end"])
            points = [(recorder(name), attributes) for name, attributes in shape["points"]]
            extra = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}

            def run() -> None:
                span = tracer.start_span(shape["root"], kind=SpanKind.CLIENT, attributes=start)
                token = context.attach(trace.set_span_in_context(span))
                try:
                    if send:
                        answer = create(model=MODEL, messages=MESSAGES, **extra)
                        if stream:
                            answer = [_ for _ in answer]  # consumed as every contender's stream is
                finally:
                    context.detach(token)
                span.set_attributes(end)
                parent = trace.set_span_in_context(span)
                for name, attributes in shape["phases"].items():
                    tracer.start_span(name, parent, attributes=attributes).end()
                span.end()
                for record, attributes in points:
                    record(1, attributes)

            return run

        self.whole, self.streamed = one(False), one(True)


def work(name: str, port: int, calls: int, baseline: str | None = None) -> None:
    """A contender process: set up, warm up, then answer one timed round per line read from stdin."""
    try:
        contender: Contender | Recorder | Floor = (
            Recorder()
            if name == "recorder"
            else Floor(port, send=name == "otel-floor")
            if name in ("otel-floor", "floor-alone")
            else Contender(name, port, baseline)
        )
        for _ in range(max(calls // 5, 10)):
            contender.whole()
        for _ in range(max(calls // 50, 3)):
            contender.streamed()
    except Exception as error:  # a peer that does not work with the installed client: say why
        print(json.dumps({"error": f"{type(error).__name__}: {error}"[:300]}), flush=True)
        return
    scale = 5 if name in NO_IO else 1  # no I/O: more calls for the same precision
    print(json.dumps({"ready": True}), flush=True)
    for _ in sys.stdin:
        whole, whole_cpu = _mean_us(contender.whole, calls * scale)
        streamed, streamed_cpu = _mean_us(contender.streamed, max(calls // 10, 5) * scale)
        print(
            json.dumps(
                {"whole_us": whole, "stream_us": streamed, "whole_cpu_us": whole_cpu, "stream_cpu_us": streamed_cpu}
            ),
            flush=True,
        )


# --- the driver ------------------------------------------------------------------------------


def _start(name: str, common: list[str]) -> tuple[subprocess.Popen[str] | None, str | None]:
    """A warmed-up worker for `name`, or None and why it could not start."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # one dict layout for every worker
    worker = subprocess.Popen(
        [sys.executable, __file__, "--contender", name, *common],
        cwd=ROOT,
        text=True,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert worker.stdout is not None and worker.stderr is not None
    first = worker.stdout.readline()
    status = json.loads(first) if first.startswith("{") else {"error": worker.stderr.read().strip()[-300:] or "?"}
    if "error" in status:
        worker.kill()
        return None, status["error"]
    return worker, None


def _rounds(names: tuple[str, ...], common: list[str], rounds: int, processes: int) -> list[dict[str, Any]]:
    """Run every contender in `processes` processes of its own, interleaving all their rounds so load
    changes hit all alike.

    A contender's figure is the median over its processes of each one's best round.
    """
    workers: list[tuple[str, subprocess.Popen[str]]] = []
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        results[name] = {"name": name}
        for _ in range(processes):
            worker, error = _start(name, common)
            if worker is None:
                results[name] = {"name": name, "error": error}
                break
            workers.append((name, worker))
    workers = [(name, worker) for name, worker in workers if "error" not in results[name]]
    best: dict[int, dict[str, float]] = {}
    for _ in range(rounds):
        for _name, worker in workers:
            assert worker.stdin is not None and worker.stdout is not None
            worker.stdin.write("round\n")
            worker.stdin.flush()
            measured = json.loads(worker.stdout.readline())
            mine = best.setdefault(worker.pid, {})
            for key in KEYS:
                mine[key] = min(mine.get(key, math.inf), measured[key])  # the least disturbed round
    for name, worker in workers:
        worker.kill()
        worker.wait()
        for key in KEYS:
            results[name].setdefault(key, []).append(best[worker.pid][key])
    for result in results.values():
        for key in KEYS:
            if key in result:
                result[key] = statistics.median(result[key])
    return [results[name] for name in names]


def _report(results: list[dict[str, Any]]) -> None:
    by_name = {r["name"]: r for r in results}
    raw = by_name.get("raw", {})
    for measure, suffix in (("wall-clock", "_us"), ("CPU time of the contender's process", "_cpu_us")):
        whole, stream = "whole" + suffix, "stream" + suffix
        print(
            f"\n{measure}: µs per call (median over processes of each one's best round); overhead = contender - raw; "
            f"{STREAM_CHUNKS}-chunk stream\n"
        )
        print(f"{'contender':<13} {'call':>9} {'overhead':>9} {'x raw':>6} {'stream':>9} {'overhead':>9} {'x raw':>6}")
        for r in results:
            if "error" in r:
                print(f"{r['name']:<13} does not work here: {r['error']}")
                continue
            cells = []
            for key in (whole, stream):
                value, base = r[key], raw.get(key)
                extra = value - base if base and r["name"] not in NO_IO else value
                ratio = f"{value / base:6.2f}" if base and r["name"] not in NO_IO else "     -"
                cells.append(f"{value:9.0f} {extra:9.0f} {ratio}")
            print(f"{r['name']:<13} " + " ".join(cells))
        kvwise = by_name.get("kvwise")
        if kvwise and "error" not in kvwise and raw:
            for peer in (*PEERS, "kvwise-base"):
                other = by_name.get(peer)
                if other and "error" not in other:
                    for key, label in ((whole, "call"), (stream, "stream")):
                        ours, theirs = kvwise[key] - raw[key], other[key] - raw[key]
                        verdict = f"{theirs / ours:.1f}x kvwise's" if ours > 0 else "kvwise adds nothing measurable"
                        print(f"{peer} {label} overhead: {theirs:.0f} µs vs kvwise {ours:.0f} µs ({verdict})")
    kvwise = by_name.get("kvwise")
    floor = by_name.get("otel-floor")
    if kvwise and "error" not in kvwise and floor and "error" not in floor and raw:
        for key, label in (("whole_us", "call"), ("stream_us", "stream")):
            print(
                f"OpenTelemetry SDK floor for kvwise's data, {label}: {floor[key] - raw[key]:.0f} µs; "
                f"kvwise beyond it: {kvwise[key] - floor[key]:.0f} µs"
            )
    recorder, alone = by_name.get("recorder"), by_name.get("floor-alone")
    if recorder and alone and "error" not in recorder and "error" not in alone:
        for key, label in (("whole_us", "call"), ("stream_us", "stream")):
            print(
                f"Without I/O, per {label}: the SDK calls alone {alone[key]:.0f} µs,"
                f" kvwise's recorder {recorder[key]:.0f} µs"
            )


def main() -> None:
    """Start the mock server, time every contender in its own process, print the table and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="calls per round (streams: a tenth)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--processes", type=int, default=4, help="processes per contender")
    parser.add_argument("--baseline", help="a checkout of an earlier commit: its sdk runs as the kvwise-base contender")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--contender", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    if args.contender:
        work(args.contender, args.port, args.calls, args.baseline)
        return
    port_file = Path(f"/tmp/kvwise-bench-{time.time_ns()}.port")
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port_file)], cwd=ROOT)
    try:
        while not port_file.exists() or not port_file.read_text():
            time.sleep(0.05)
        port = int(port_file.read_text())
        common = ["--calls", str(args.calls), "--port", str(port)]
        names: tuple[str, ...] = (*CONTENDERS, *NO_IO)
        if args.baseline:
            common += ["--baseline", str(Path(args.baseline).resolve())]
            names = (*CONTENDERS[:3], "kvwise-base", *CONTENDERS[3:], *NO_IO)
        results = _rounds(names, common, args.rounds, args.processes)
    finally:
        server.terminate()
        server.wait()
        port_file.unlink(missing_ok=True)
    _report(results)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
