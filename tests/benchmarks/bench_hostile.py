"""Hostile requests refused cheaply: milliseconds from sending to the 400, over HTTP to the served default model.

Rows: a chat request offering 10,000 tools (it rendered and tokenized a 953k-token prompt before
the context check refused it: 2-2.7 s), a `response_format` schema of 10,000 properties (compiled
for 5.8-15 s, then served), a message of 4 MB of text (tokenized, then refused), and a body nested
100,000 deep. The median of several requests after a warm-up one, and in brackets the best (the
figure least moved by other load). Target (issue 33): the 10k-tool and 10k-property refusals each
under 100 ms.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable

import httpx2

from local_backend import Engine
from local_backend.server import create_app, serve_in_thread

REQUESTS = 7
TARGET_MS = 100.0
TARGETED = ("10k tools", "10k-property schema")
CHAT = {"model": "default", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}


def _bodies() -> dict[str, bytes]:
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": f"Tool number {i}.",
                                               "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}}
             for i in range(10_000)]  # fmt: skip
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(10_000)}}
    response_format = {"type": "json_schema", "json_schema": {"name": "wide", "schema": schema}}
    text = {**CHAT, "messages": [{"role": "user", "content": "word " * 800_000}]}
    deep = json.dumps(CHAT)[:-1] + ', "metadata": ' + "[" * 100_000 + "]" * 100_000 + "}"
    return {
        "10k tools": json.dumps({**CHAT, "tools": tools}).encode(),
        "10k-property schema": json.dumps({**CHAT, "response_format": response_format}).encode(),
        "4 MB of text": json.dumps(text).encode(),
        "nested 100k deep": deep.encode(),
    }


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


def main() -> None:
    engine = Engine.from_pretrained("default", device="cpu")
    try:
        with serve_in_thread(create_app(engine, model_name="default")) as url, httpx2.Client(base_url=url) as http:
            print(f"hostile requests, ms to the 400, median (best) of {REQUESTS}")
            for name, body in _bodies().items():
                headers = {"content-type": "application/json"}
                median, best = refusal_ms(lambda: http.post("/v1/chat/completions", content=body, headers=headers))
                print(f"{name:<22} {len(body) / 1e6:>6.2f} MB {median:>9.1f} ({best:.1f})", flush=True)
                if name in TARGETED:
                    print(f"  target median < {TARGET_MS:.0f} ms: {'met' if median < TARGET_MS else 'NOT met'}")
            assert http.post("/v1/chat/completions", json=CHAT).status_code == 200
    finally:
        engine.close()


if __name__ == "__main__":
    main()
