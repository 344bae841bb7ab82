"""Nothing a request does blocks the event loop (issue 42 item 3): the heavy requests a probe found
holding it for seconds are refused by their size before any work, and a flood of heavy counts from
three clients leaves `/health` and an ordinary chat request answering."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from local_backend.server._constants import MAX_COUNTED_BYTES, MAX_JSON_CONTAINERS, MAX_MESSAGES
from tests.local_backend.server.test_server_hostile import (
    CHAT,
    CLIENT_TIMEOUT_SECONDS,
    MAX_MODEL_LEN,
    ROUTES,
    _post,
    _refused,
)
from tests.local_backend.serving import Served, ServedEngines

COUNT = "/v1/messages/count_tokens"
FLOOD_CLIENTS = 3
FLOOD_TEXTS = ("word " * (MAX_COUNTED_BYTES // 6), "word " * 780_000)
"""Just under the counted bound (the heaviest count the server accepts), and the probe's 3.9 MB."""
ANSWER_TIMEOUT_SECONDS = 10.0
"""The probe's client timeout, at which every chat request during its flood gave up."""


@pytest.fixture(scope="module")
def served(serve: ServedEngines, llama_dir: Path) -> Served:
    return serve(llama_dir, max_model_len=MAX_MODEL_LEN, kv_cache_memory=2**20)


@pytest.fixture(scope="module")
def http(served: Served) -> Iterator[httpx2.Client]:
    with httpx2.Client(base_url=served.url, timeout=CLIENT_TIMEOUT_SECONDS) as client:
        yield client


def _same_server_answers(http: httpx2.Client) -> None:
    pid = os.getpid()
    assert _post(http, CHAT, ROUTES[CHAT]).status_code == 200
    assert os.getpid() == pid


def _count(text: str) -> dict[str, object]:
    return {"model": "tiny", "messages": [{"role": "user", "content": text}]}


def test_a_count_of_3_9_mb_of_text_is_refused_by_its_size(http):
    message = _refused(_post(http, COUNT, _count("word " * 780_000)), COUNT)
    assert f"over {MAX_COUNTED_BYTES} bytes" in message
    _same_server_answers(http)


def test_a_count_of_128_tools_of_30_kb_is_refused_by_its_size(http):
    tools = [{"name": f"t{i}", "description": "x" * 30_000, "input_schema": {"type": "object"}} for i in range(128)]
    assert f"over {MAX_COUNTED_BYTES} bytes" in _refused(_post(http, COUNT, {**_count("hi"), "tools": tools}), COUNT)
    _same_server_answers(http)


@pytest.mark.parametrize("path", [CHAT, "/v1/messages", COUNT, "/v1/responses"])
@pytest.mark.parametrize(
    ("messages", "refusal"),
    [
        (100_000, f"at most {MAX_JSON_CONTAINERS} are allowed"),
        (MAX_MESSAGES + 1, f"at most {MAX_MESSAGES} are allowed"),
    ],
)
def test_a_hundred_thousand_empty_messages_are_refused_by_their_count_before_they_are_parsed(
    http, path, messages, refusal
):
    listed = [{"role": "user", "content": ""}] * messages
    body = {**ROUTES.get(path, _count("")), ("input" if path == "/v1/responses" else "messages"): listed}
    assert refusal in _refused(_post(http, path, body), path)
    _same_server_answers(http)


def test_a_count_flood_from_three_clients_leaves_health_and_chat_answering(served):
    started = threading.Barrier(FLOOD_CLIENTS + 1)
    stop = threading.Event()
    counted: list[int] = []

    def flood() -> None:
        with httpx2.Client(base_url=served.url, timeout=CLIENT_TIMEOUT_SECONDS) as client:
            assert _post(client, COUNT, _count(FLOOD_TEXTS[0])).status_code == 200
            started.wait()
            while not stop.is_set():
                for text in FLOOD_TEXTS:
                    counted.append(_post(client, COUNT, _count(text)).status_code)

    clients = [threading.Thread(target=flood) for _ in range(FLOOD_CLIENTS)]
    for client in clients:
        client.start()
    try:
        started.wait(timeout=CLIENT_TIMEOUT_SECONDS)  # every client has had a heavy count answered: the flood is on
        with httpx2.Client(base_url=served.url, timeout=ANSWER_TIMEOUT_SECONDS) as http:
            assert http.get("/health").json() == {"status": "ok"}
            chat = _post(http, CHAT, ROUTES[CHAT])
            assert chat.status_code == 200 and chat.json()["choices"][0]["message"]["role"] == "assistant"
            assert http.get("/health").status_code == 200
    finally:
        stop.set()
        for client in clients:
            client.join()
    assert counted and set(counted) <= {
        200,
        400,
        429,
    }  # answered, too large to count, or refused while the queue is full
