"""Bad requests, keys, a full queue and clients that hang up: the APIs' own error bodies, and the
server keeps serving and frees every KV block."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from local_backend import Engine
from local_backend.__main__ import main
from local_backend.server._constants import MAX_CHOICES
from tests.local_backend.serving import Served, ServedEngines, wait_idle

KEY = "test-key"
IDLE_DEADLINE_SECONDS = 30.0
CLIENT_TIMEOUT_SECONDS = 60.0  # given, so anthropic does not refuse a huge non-streamed max_tokens itself
LONG = {"max_tokens": 400, "extra_body": {"ignore_eos": True}}
OK = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def served(serve: ServedEngines, llama_dir: Path) -> Served:
    return serve(llama_dir, max_model_len=512, kv_cache_memory=2**21)


@pytest.fixture(scope="module")
def guarded(serve: ServedEngines, llama_dir: Path) -> Served:
    """An API key, one running request and no queue: the second concurrent request is refused."""
    return serve(llama_dir, {"api_key": KEY, "max_queue": 0}, max_model_len=512, kv_cache_memory=2**21, max_num_seqs=1)


def _openai(url: str, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=CLIENT_TIMEOUT_SECONDS)


def _anthropic(url: str, key: str = KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=key, max_retries=0, timeout=CLIENT_TIMEOUT_SECONDS)


def _send(flavor: str, url: str, key: str = KEY, **request: Any) -> tuple[int, dict[str, Any]]:
    """Status and JSON body of one chat / messages call made with the real client."""
    try:
        if flavor == "openai":
            with _openai(url, key) as client:
                client.chat.completions.create(model="tiny", **request)
        else:
            with _anthropic(url, key) as client:
                client.messages.create(model="tiny", **request)
    except (openai.APIStatusError, anthropic.APIStatusError) as exc:
        return exc.status_code, exc.response.json()
    return 200, {}


def _error_type(flavor: str, body: dict[str, Any]) -> str:
    """The error's type, after checking the body has that API's shape."""
    if flavor == "openai":
        assert set(body["error"]) == {"message", "type", "param", "code"} and body["error"]["message"]
    else:
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"} and body["error"]["message"]
    return body["error"]["type"]


def _wait_idle(engine: Engine) -> None:
    """Poll until no request runs or waits and no block is in use (fails after a generous deadline)."""
    stats = wait_idle(engine)
    if not stats.num_running == stats.num_waiting == stats.blocks_used == 0:
        pytest.fail(f"the engine is not idle: {stats}")


BAD_REQUESTS = {
    "negative max_tokens": ({"messages": OK["messages"], "max_tokens": -1}, "max_tokens"),
    "huge max_tokens": ({"messages": OK["messages"], "max_tokens": 10**9}, "max_tokens"),
    "empty messages": ({"messages": [], "max_tokens": 2}, "messages"),
    "unknown role": ({"messages": [{"role": "wizard", "content": "hi"}], "max_tokens": 2}, "messages[0].role"),
    "prompt over the context": (
        {"messages": [{"role": "user", "content": "word " * 1000}], "max_tokens": 2},
        "messages",
    ),
    "non-text content": (
        {"messages": [{"role": "user", "content": [{"type": "image"}]}], "max_tokens": 2},
        "messages[0].content",
    ),
}


@pytest.mark.parametrize("flavor", ["openai", "anthropic"])
@pytest.mark.parametrize("case", BAD_REQUESTS, ids=list(BAD_REQUESTS))
def test_bad_request_gets_400_in_the_api_shape_and_the_server_keeps_serving(served, flavor, case):
    request, param = BAD_REQUESTS[case]
    status, body = _send(flavor, served.url, **request)
    assert status == 400 and _error_type(flavor, body) == "invalid_request_error"
    if flavor == "openai":
        assert body["error"]["param"] == param
    assert _send(flavor, served.url, **OK) == (200, {})


def test_prompt_over_the_context_says_so_in_openai_code(served):
    _, body = _send("openai", served.url, **BAD_REQUESTS["prompt over the context"][0])
    assert body["error"]["code"] == "context_length_exceeded"


@pytest.mark.parametrize(
    ("path", "flavor"),
    [("/v1/chat/completions", "openai"), ("/v1/completions", "openai"), ("/v1/messages", "anthropic")],
)
@pytest.mark.parametrize(
    "payload", [b"{not json", b"[1, 2]", b"\xff\xfe"], ids=["malformed", "not an object", "not utf-8"]
)
def test_invalid_json_gets_400(served, path, flavor, payload):
    with httpx2.Client() as http:
        response = http.post(f"{served.url}{path}", content=payload, headers={"content-type": "application/json"})
    assert response.status_code == 400 and _error_type(flavor, response.json()) == "invalid_request_error"


@pytest.mark.parametrize("n", [0, MAX_CHOICES + 1])
def test_n_outside_one_to_the_limit_is_refused_with_a_clear_400(served, n):
    status, body = _send("openai", served.url, n=n, **OK)
    assert status == 400 and body["error"]["param"] == "n" and f"n={n}" in body["error"]["message"]


@pytest.mark.parametrize("flavor", ["openai", "anthropic"])
def test_ten_megabyte_body_gets_413_and_the_server_keeps_serving(served, flavor):
    huge = {"messages": [{"role": "user", "content": "x" * 10_000_000}], "max_tokens": 2}
    status, body = _send(flavor, served.url, **huge)
    assert status == 413
    assert _error_type(flavor, body) == ("invalid_request_error" if flavor == "openai" else "request_too_large")
    assert _send(flavor, served.url, **OK) == (200, {})


@pytest.mark.parametrize(("path", "flavor"), [("/v1/nothing", "openai"), ("/v1/messages/nothing", "anthropic")])
def test_unknown_path_gets_404_in_the_api_shape(served, path, flavor):
    with httpx2.Client() as http:
        response = http.get(f"{served.url}{path}")
    assert response.status_code == 404
    assert _error_type(flavor, response.json()) == (
        "invalid_request_error" if flavor == "openai" else "not_found_error"
    )


@pytest.mark.parametrize("flavor", ["openai", "anthropic"])
def test_wrong_api_key_gets_401_and_the_right_one_is_served(guarded, flavor):
    status, body = _send(flavor, guarded.url, key="wrong", **OK)
    assert status == 401
    assert _error_type(flavor, body) == ("invalid_request_error" if flavor == "openai" else "authentication_error")
    assert _send(flavor, guarded.url, **OK) == (200, {})


def test_health_needs_no_key_and_either_header_works_on_every_route(guarded):
    with httpx2.Client(base_url=guarded.url) as http:
        assert http.get("/health").status_code == 200
        assert http.get("/metrics").status_code == 401
        assert http.get("/metrics", headers={"x-api-key": KEY}).status_code == 200
        assert http.get("/v1/models", headers={"authorization": f"Bearer {KEY}"}).status_code == 200
        body = {"model": "tiny", **OK}
        assert http.post("/v1/messages", json=body, headers={"authorization": f"Bearer {KEY}"}).status_code == 200


def test_full_queue_gets_429_from_openai_routes_and_529_from_anthropic_at_once(guarded):
    with _openai(guarded.url) as client:
        stream = client.chat.completions.create(model="tiny", messages=OK["messages"], stream=True, **LONG)
        next(iter(stream))  # admitted and running: the one slot is taken
        try:
            # No step runs while the two are refused, so the stream cannot finish first and free its
            # slot (on a fast CPU it could); admission refuses before the engine is reached.
            with guarded.engine._step_lock:
                assert guarded.engine.stats().num_running == 1
                status, body = _send("openai", guarded.url, **OK)
                assert status == 429 and _error_type("openai", body) == "rate_limit_error"
                status, body = _send("anthropic", guarded.url, **OK)
                assert status == 529 and _error_type("anthropic", body) == "overloaded_error"
        finally:
            stream.close()
    _wait_idle(guarded.engine)
    assert _send("openai", guarded.url, **OK) == (200, {})


def test_a_request_refused_for_its_stream_field_leaves_its_slot_free(guarded):
    """`stream` was once read after the choices had taken their slots, so a bad one kept its slot
    forever: with one slot and no queue, every later request was refused as if the server were full."""
    bad = {"model": "tiny", **OK, "stream": "yes"}
    with httpx2.Client(base_url=guarded.url, headers={"authorization": f"Bearer {KEY}"}) as http:
        for path in ("/v1/chat/completions", "/v1/messages", "/v1/chat/completions"):
            response = http.post(path, json=bad)
            assert response.status_code == 400 and "stream must be a boolean" in response.text
    assert _send("openai", guarded.url, **OK) == (200, {})


def _hang_up_openai(url: str) -> None:
    with _openai(url) as client:
        stream = client.chat.completions.create(model="tiny", messages=OK["messages"], stream=True, **LONG)
        for _, _chunk in zip(range(3), stream):
            pass
        stream.close()


def _hang_up_anthropic(url: str) -> None:
    with _anthropic(url) as client, client.messages.stream(model="tiny", messages=OK["messages"], **LONG) as stream:
        for _, _text in zip(range(3), stream.text_stream):
            pass


@pytest.mark.parametrize("hang_up", [_hang_up_openai, _hang_up_anthropic], ids=["openai", "anthropic"])
def test_client_hanging_up_mid_stream_aborts_and_frees_its_blocks(served, hang_up):
    before = served.engine.stats().generation_tokens
    hang_up(served.url)
    _wait_idle(served.engine)
    assert served.engine.stats().generation_tokens - before < LONG["max_tokens"]
    with httpx2.Client() as http:
        metrics = http.get(f"{served.url}/metrics").text
    assert 'kvwise_kv_blocks{state="used"} 0' in metrics and "kvwise_requests_in_flight 0" in metrics


def test_client_hanging_up_before_a_whole_answer_aborts_it(served):
    """Non-streamed: the server watches for the hang-up while the engine works."""
    body = json.dumps({"model": "tiny", "max_tokens": 480, "ignore_eos": True, "messages": OK["messages"]}).encode()
    host, port = served.url.removeprefix("http://").split(":")
    before = served.engine.stats().generation_tokens
    with socket.create_connection((host, int(port))) as sock:
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        sock.sendall(head.encode() + body)
        deadline = time.monotonic() + IDLE_DEADLINE_SECONDS
        while served.engine.stats().generation_tokens == before and time.monotonic() < deadline:
            time.sleep(0.001)  # wait until it is decoding, then hang up
    _wait_idle(served.engine)
    assert 0 < served.engine.stats().generation_tokens - before < 480


@pytest.mark.parametrize(
    ("args", "warned"), [(["--host", "0.0.0.0"], True), (["--host", "0.0.0.0", "--api-key", "k"], False), ([], False)]
)
def test_cli_warns_when_bound_beyond_loopback_without_a_key_and_refuses_a_missing_model(caplog, capsys, args, warned):
    assert main(["serve", "--model", "/no/such/checkpoint", *args]) == 2  # fails before binding anything
    assert ("without --api-key" in caplog.text) is warned
    assert "/no/such/checkpoint does not exist" in capsys.readouterr().err
