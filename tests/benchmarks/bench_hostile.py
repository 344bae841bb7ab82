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
"""

from __future__ import annotations

import asyncio
import json
import statistics
import threading
import time
import tracemalloc
from collections.abc import Callable

import httpx2
from starlette.types import ASGIApp, Receive, Scope, Send
from tokenizers import Tokenizer

from local_backend import Engine
from local_backend.chat_template import TemplateBoundError
from local_backend.server import create_app, serve_in_thread
from local_backend.server._constants import MAX_COUNTED_BYTES
from local_backend.tokenizer import TextTokenizer
from tests.local_backend.conftest import CHAT_TEMPLATE
from tests.local_backend.test_server_hostile_templates import ATTACKS

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
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": f"Tool number {i}.",
                                               "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}}
             for i in range(10_000)]  # fmt: skip
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


def main() -> None:
    engine = Engine.from_pretrained("default", device="cpu")
    watch = LoopWatch(create_app(engine, model_name="default"))
    try:
        with serve_in_thread(watch) as url, httpx2.Client(base_url=url, timeout=60) as http:
            print(f"hostile requests, ms to the 400, median (best) of {REQUESTS}")
            for name, body in _bodies().items():
                path = ROUTE.get(name, "/v1/chat/completions")
                median, best = refusal_ms(lambda: http.post(path, content=body, headers=JSON))
                print(f"{name:<22} {len(body) / 1e6:>6.2f} MB {median:>9.1f} ({best:.1f})", flush=True)
                if name in TARGETED:
                    print(f"  target median < {TARGET_MS:.0f} ms: {'met' if median < TARGET_MS else 'NOT met'}")
            assert http.post("/v1/chat/completions", json=CHAT).status_code == 200
            stall, health, counts, chats = flood(url, watch)
            print(f"count flood, {FLOOD_CLIENTS} clients x {FLOOD_SECONDS:.0f} s ({counts} counts of "
                  f"{MAX_COUNTED_BYTES // 1024} KiB, {chats} chat answers): event loop's longest stall {stall:.1f} ms, "
                  f"slowest /health {health:.1f} ms")
        template_refusals(engine.tokenizer.to_json())
    finally:
        engine.close()


if __name__ == "__main__":
    main()
