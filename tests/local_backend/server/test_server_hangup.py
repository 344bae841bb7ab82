"""A client that hangs up during a non-streamed generation (issue 42 item 6): once a 44-line "Exception
in ASGI application" traceback each (a cancelled gather is not `cancelled()`, so the quiet path was
never taken); now a counted metric and one debug line, and its KV blocks are freed."""

from __future__ import annotations

import json
import logging
import socket
import time
from pathlib import Path

import httpx2
import pytest

from tests.local_backend.serving import IDLE_DEADLINE_SECONDS, Served, ServedEngines, wait_idle

HANGUPS = "kvwise_client_hangups_total"
BODY = json.dumps(
    {"model": "tiny", "max_tokens": 200, "ignore_eos": True, "messages": [{"role": "user", "content": "hi"}]}
).encode()


@pytest.fixture(scope="module")
def served(serve: ServedEngines, llama_dir: Path) -> Served:
    return serve(llama_dir, max_model_len=256, kv_cache_memory=2**20)


def _hangups(url: str) -> float:
    with httpx2.Client(base_url=url) as http:
        [line] = [line for line in http.get("/metrics").text.splitlines() if line.startswith(HANGUPS + " ")]
    return float(line.split()[1])


def _hang_up_while_generating(served: Served) -> None:
    host, port = served.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
        )
        deadline = time.monotonic() + IDLE_DEADLINE_SECONDS
        while served.engine.stats().num_running == 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert served.engine.stats().num_running == 1  # generating: now hang up


def test_a_hang_up_during_a_whole_answer_is_counted_and_logged_once_at_debug(served, caplog):
    before = _hangups(served.url)
    uvicorn_log = logging.getLogger("uvicorn.error")  # it does not propagate: listen to it too
    uvicorn_log.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.DEBUG):
            _hang_up_while_generating(served)
            stats = wait_idle(served.engine)
    finally:
        uvicorn_log.removeHandler(caplog.handler)
    assert stats.num_running == stats.blocks_used == 0
    assert _hangups(served.url) == before + 1
    ours = [r for r in caplog.records if r.name.startswith(("local_backend", "uvicorn", "starlette"))]
    assert [r.levelno for r in ours if "hung up" in r.getMessage()] == [logging.DEBUG]
    assert not [r for r in ours if r.levelno >= logging.WARNING], [r.getMessage()[:200] for r in ours]
