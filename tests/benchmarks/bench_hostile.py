"""Hostile requests refused cheaply: milliseconds from sending to the 400, over HTTP to the served default model.

Rows: a chat request offering 10,000 tools (it rendered and tokenized a 953k-token prompt before
the context check refused it: 2-2.7 s), a `response_format` schema of 10,000 properties (compiled
for 5.8-15 s, then served), a message of 4 MB of text (tokenized, then refused), a body nested
100,000 deep; and issue 42's: a count of 3.9 MB of text (counted on the event loop: 3.4 s), 100,000
empty messages (2.1 s before the refusal), a schema whose `$ref`s chain 3,000 definitions (it
killed the process). The median of several requests after a warm-up one, and in brackets the best
(the figure least moved by other load). Targets: each of those five refusals under 100 ms.

Then a flood: three clients (threads of this process, as the server is) count the heaviest text a
count accepts (just under `MAX_COUNTED_BYTES`), over and over, for `FLOOD_SECONDS`, while a fourth
asks `/health` and a chat request in turn; the table gives the event loop's longest stall in that
time (a watcher that sleeps 1 ms and measures how late it wakes) and the slowest `/health`.

Then issue 54's refusals at start-up: each hostile chat template of `test_server_hostile_templates`
(ms to its refusal, the bound it passed, the peak of Python's allocations meanwhile), and each
crafted model file of `test_model_file_input` served by the CLI's `main` in a process of its own
(ms from `main` to its exit, the process's whole life, its peak resident memory, read from the
kernel by a parent of its own), beside a process that refuses nothing (the imports' floor).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import httpx2
from starlette.types import ASGIApp, Receive, Scope, Send
from tokenizers import Tokenizer

from local_backend import Engine
from local_backend.model.chat_template import TemplateBoundError
from local_backend.model.tokenizer import TextTokenizer
from local_backend.server import create_app, serve_in_thread
from local_backend.server._constants import MAX_COUNTED_BYTES
from tests.local_backend.conftest import CHAT_TEMPLATE
from tests.local_backend.model.test_model_file_input import (
    CASES,
    DRIVER,
    REFUSAL_PEAK_RSS,
    REFUSAL_SECONDS,
    error_lines,
    run_bounded,
)
from tests.local_backend.server.test_server_hostile_templates import ATTACKS

JSON = {"content-type": "application/json"}

REQUESTS = 7
TARGET_MS = 100.0
TARGETED = ("10k tools", "10k-property schema", "3.9 MB count_tokens", "100k messages", "3,000-link schema")
CHAT = {"model": "default", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
COUNT_PATH = "/v1/messages/count_tokens"
ROUTE = {"3.9 MB count_tokens": COUNT_PATH}
FLOOD_SECONDS = 10.0
FLOOD_CLIENTS = 3
WATCH_SECONDS = 0.001


class LoopWatch:
    """ASGI wrapper whose first request starts a watcher on the server's event loop: it sleeps
    `WATCH_SECONDS` over and over and keeps the longest it overslept (the loop's longest stall)."""

    def __init__(self, app: ASGIApp):
        self._app = app
        self._task: asyncio.Task[None] | None = None
        self.worst = 0.0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._watch())
        await self._app(scope, receive, send)

    async def _watch(self) -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(WATCH_SECONDS)
            self.worst = max(self.worst, time.perf_counter() - start - WATCH_SECONDS)


def _bodies() -> dict[str, bytes]:
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": f"Tool number {i}.",
                "parameters": {"type": "object", "properties": {"x": {"type": "string"}}},
            },
        }
        for i in range(10_000)
    ]
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(10_000)}}
    response_format = {"type": "json_schema", "json_schema": {"name": "wide", "schema": schema}}
    text = {**CHAT, "messages": [{"role": "user", "content": "word " * 800_000}]}
    deep = json.dumps(CHAT)[:-1] + ', "metadata": ' + "[" * 100_000 + "]" * 100_000 + "}"
    defs: dict[str, object] = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(3000)}
    defs["d3000"] = {"type": "string"}
    chain = {"type": "json_schema", "json_schema": {"name": "chain", "schema": {"$defs": defs, "$ref": "#/$defs/d0"}}}
    return {
        "10k tools": json.dumps({**CHAT, "tools": tools}).encode(),
        "10k-property schema": json.dumps({**CHAT, "response_format": response_format}).encode(),
        "4 MB of text": json.dumps(text).encode(),
        "nested 100k deep": deep.encode(),
        "3.9 MB count_tokens": json.dumps(_count("word " * 780_000)).encode(),
        "100k messages": json.dumps({**CHAT, "messages": [{"role": "user", "content": ""}] * 100_000}).encode(),
        "3,000-link schema": json.dumps({**CHAT, "response_format": chain}).encode(),
    }


def _count(text: str) -> dict[str, object]:
    return {"model": "default", "messages": [{"role": "user", "content": text}]}


def flood(url: str, watch: LoopWatch) -> tuple[float, float, int, int]:
    """The loop's longest stall and the slowest `/health` (ms) while three clients count heavy text,
    with the counts and the chat requests answered in that time."""
    heavy = json.dumps(_count("word " * (MAX_COUNTED_BYTES // 6))).encode()
    stop = threading.Event()
    counts: list[int] = []

    def count() -> None:
        with httpx2.Client(base_url=url, timeout=60) as client:
            while not stop.is_set():
                response = client.post(COUNT_PATH, content=heavy, headers=JSON)
                counts.append(response.status_code)

    clients = [threading.Thread(target=count) for _ in range(FLOOD_CLIENTS)]
    for client in clients:
        client.start()
    slowest, chats = 0.0, 0
    watch.worst = 0.0
    with httpx2.Client(base_url=url, timeout=60) as http:
        end = time.monotonic() + FLOOD_SECONDS
        while time.monotonic() < end:
            start = time.perf_counter()
            assert http.get("/health").status_code == 200
            slowest = max(slowest, time.perf_counter() - start)
            chats += http.post("/v1/chat/completions", json=CHAT).status_code == 200
    worst = watch.worst
    stop.set()
    for client in clients:
        client.join()
    return worst * 1000, slowest * 1000, counts.count(200), chats


def refusal_ms(send: Callable[[], httpx2.Response]) -> tuple[float, float]:
    """Median and best milliseconds of a refused request, after one warm-up."""
    samples = []
    for attempt in range(REQUESTS + 1):
        start = time.perf_counter()
        response = send()
        elapsed = (time.perf_counter() - start) * 1000
        assert response.status_code == 400, response.text[:300]
        if attempt:
            samples.append(elapsed)
    return statistics.median(samples), min(samples)


def template_refusals(tokenizer_json: str) -> None:
    """Each hostile template's start-up refusal: ms, the bound it passed, peak MB allocated meanwhile."""
    raw = Tokenizer.from_str(tokenizer_json)
    print("hostile chat templates, refused at start-up: ms, bound, peak MB allocated")
    for name, (body, _) in ATTACKS.items():
        tracemalloc.start()
        start = time.perf_counter()
        try:
            TextTokenizer(raw, {}, CHAT_TEMPLATE + body)
            bound = "NOT refused"
        except TemplateBoundError as exc:
            bound = exc.bound
        elapsed = (time.perf_counter() - start) * 1000
        peak = tracemalloc.get_traced_memory()[1] / 1e6
        tracemalloc.stop()
        print(f"{name:<22} {elapsed:>9.1f} ms  {bound:<11} {peak:>8.1f} MB", flush=True)


def _refusal(paths: list[str]) -> tuple[int, float, float, int, str]:
    """(exit status, ms from `main` to its exit, seconds of the process, peak RSS, the `error:` line) of
    `DRIVER` serving `paths` (none: the imports alone)."""
    start = time.perf_counter()
    code, output, peak = run_bounded([sys.executable, "-c", DRIVER, *paths], REFUSAL_SECONDS)
    wall = time.perf_counter() - start
    exits = [line.split() for line in output.splitlines() if line.startswith("=== exit ")]
    status = int(exits[0][2]) if exits and exits[0][2].isdigit() else -1
    milliseconds = float(exits[0][4]) * 1000 if exits else float("nan")
    lines = error_lines(output)
    return (status if paths else code), milliseconds, wall, peak, lines[0] if len(lines) == 1 else ""


def model_file_refusals() -> None:
    """Each crafted model file refused by the CLI in a process of its own: ms in `main`, the process's
    seconds, its peak RSS; against the tests' bounds (`REFUSAL_SECONDS`, `REFUSAL_PEAK_RSS`)."""
    mib = 2**20
    code, _, floor_wall, floor, _ = _refusal([])
    print(
        f"crafted model files, refused by `serve` in a process each: ms in main to the exit, process s, peak RSS "
        f"MiB (bounds: {REFUSAL_SECONDS} s, {REFUSAL_PEAK_RSS // mib} MiB)"
    )
    print(f"{'(imports only, no file)':<52} {'':>11} {floor_wall:>6.2f} s {floor / mib:>6.0f} MiB  exit {code}")
    worst_ms, worst_wall, worst_peak, missed = 0.0, 0.0, 0, []
    with tempfile.TemporaryDirectory() as folder:
        for index, (name, (build, says)) in enumerate(CASES.items()):
            path = build(Path(folder) / f"case{index:02d}.gguf")
            status, milliseconds, wall, peak, line = _refusal([str(path)])
            path.unlink()
            refused = status == 2 and says in line
            missed += [] if refused else [name]
            worst_ms, worst_wall, worst_peak = max(worst_ms, milliseconds), max(worst_wall, wall), max(worst_peak, peak)
            print(
                f"{name:<52} {milliseconds:>8.1f} ms {wall:>6.2f} s {peak / mib:>6.0f} MiB  exit {status}"
                f"{'' if refused else '  NOT refused as the test expects'}",
                flush=True,
            )
    within = worst_wall < REFUSAL_SECONDS and worst_peak < REFUSAL_PEAK_RSS and not missed
    print(
        f"{len(CASES)} files: slowest {worst_ms:.1f} ms in main, {worst_wall:.2f} s a process; highest peak "
        f"{worst_peak / mib:.0f} MiB ({(worst_peak - floor) / mib:+.0f} over the floor); "
        f"{'all refused within the bounds' if within else 'NOT within the bounds: ' + ', '.join(missed)}"
    )


def main() -> None:
    engine = Engine.from_pretrained("default", device="cpu")
    watch = LoopWatch(create_app(engine, model_name="default"))
    try:
        with serve_in_thread(watch) as url, httpx2.Client(base_url=url, timeout=60) as http:
            print(f"hostile requests, ms to the 400, median (best) of {REQUESTS}")
            for name, body in _bodies().items():
                path = ROUTE.get(name, "/v1/chat/completions")
                median, best = refusal_ms(lambda path=path, body=body: http.post(path, content=body, headers=JSON))
                print(f"{name:<22} {len(body) / 1e6:>6.2f} MB {median:>9.1f} ({best:.1f})", flush=True)
                if name in TARGETED:
                    print(f"  target median < {TARGET_MS:.0f} ms: {'met' if median < TARGET_MS else 'NOT met'}")
            assert http.post("/v1/chat/completions", json=CHAT).status_code == 200
            stall, health, counts, chats = flood(url, watch)
            print(
                f"count flood, {FLOOD_CLIENTS} clients x {FLOOD_SECONDS:.0f} s ({counts} counts of "
                f"{MAX_COUNTED_BYTES // 1024} KiB, {chats} chat answers): event loop's longest stall {stall:.1f} ms, "
                f"slowest /health {health:.1f} ms"
            )
        template_refusals(engine.tokenizer.to_json())
    finally:
        engine.close()
    model_file_refusals()


if __name__ == "__main__":
    main()
