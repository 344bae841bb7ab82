"""The server under hostile input: each case is a 400 in its API's error form (never a 500), refused
before the costly work, and the next ordinary request is answered at once.

Each case is one that a probe found answered with a 500, with a 200, after seconds of work, or that
left the server unable to answer anyone (issue 33)."""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from local_backend.server import create_app, requests, serve_in_thread
from local_backend.server._constants import MAX_LOGGED_FRAMES, MAX_SCHEMA_DEPTH, MAX_TOOLS
from local_backend.server.http_protocol import BoundedHttp, WireLimits
from tests.local_backend.serving import Served, ServedEngines

CLIENT_TIMEOUT_SECONDS = 30.0
MAX_MODEL_LEN = 64
CHAT = "/v1/chat/completions"
ROUTES = {
    CHAT: {"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]},
    "/v1/completions": {"model": "tiny", "max_tokens": 2, "prompt": "hi"},
    "/v1/responses": {"model": "tiny", "max_output_tokens": 2, "input": "hi"},
    "/v1/messages": {"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]},
}
"""An ordinary body for each route."""
SCHEMA_FIELDS = {
    CHAT: ("response_format", lambda s: {"type": "json_schema", "json_schema": {"name": "x", "schema": s}}),
    "/v1/responses": ("text", lambda s: {"format": {"type": "json_schema", "name": "x", "schema": s}}),
    "/v1/messages": ("output_config", lambda s: {"format": {"type": "json_schema", "schema": s}}),
}
"""Where each route takes a JSON schema for its answer, and how."""
TEXT_FIELDS = {CHAT: "messages", "/v1/completions": "prompt", "/v1/responses": "input", "/v1/messages": "messages"}


@pytest.fixture(scope="module")
def served(serve: ServedEngines, llama_dir: Path) -> Served:
    return serve(llama_dir, max_model_len=MAX_MODEL_LEN, kv_cache_memory=2**20)


@pytest.fixture(scope="module")
def http(served: Served) -> Iterator[httpx2.Client]:
    with httpx2.Client(base_url=served.url, timeout=CLIENT_TIMEOUT_SECONDS) as client:
        yield client


def _post(http: httpx2.Client, path: str, body: dict[str, Any] | str) -> httpx2.Response:
    payload = body if isinstance(body, str) else json.dumps(body)
    return http.post(path, content=payload.encode(), headers={"content-type": "application/json"})


def _refused(response: httpx2.Response, path: str) -> str:
    """The error message of a 400 in the route's API's own form."""
    assert response.status_code == 400, response.text
    body = response.json()
    if path.startswith("/v1/messages"):
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
    else:
        assert body["error"]["type"] == "invalid_request_error", body
    message: str = body["error"]["message"]
    return message


def _still_serving(http: httpx2.Client) -> None:
    """An ordinary request, right after a hostile one, is answered."""
    response = _post(http, CHAT, ROUTES[CHAT])
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["finish_reason"] in ("stop", "length")


def _nested_schema(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


@pytest.mark.parametrize("path", ROUTES)
def test_json_nested_a_thousand_deep_is_a_400_in_the_routes_error_form(http, path):
    field = TEXT_FIELDS[path]
    body = json.dumps(ROUTES[path])[:-1] + f', "{field}x": ' + "[" * 1000 + "]" * 1000 + "}"
    assert "nests arrays and objects deeper than" in _refused(_post(http, path, body), path)
    _still_serving(http)


@pytest.mark.parametrize("path", SCHEMA_FIELDS)
def test_a_schema_nested_300_levels_is_a_400_and_the_server_keeps_answering(http, path):
    field, wrap = SCHEMA_FIELDS[path]
    _refused(_post(http, path, {**ROUTES[path], field: wrap(_nested_schema(300))}), path)
    _still_serving(http)


@pytest.mark.parametrize("path", SCHEMA_FIELDS)
def test_a_schema_deeper_than_the_schema_bound_is_a_400_naming_its_field(http, path):
    field, wrap = SCHEMA_FIELDS[path]
    levels = MAX_SCHEMA_DEPTH // 2 + 1  # two levels of JSON per level of objects: past the bound, inside the body's
    message = _refused(_post(http, path, {**ROUTES[path], field: wrap(_nested_schema(levels))}), path)
    assert f"nests deeper than {MAX_SCHEMA_DEPTH} levels" in message and message.startswith(field)
    _still_serving(http)


def test_a_failure_is_logged_in_a_bounded_record_and_the_server_keeps_answering(http, monkeypatch, caplog):
    """A deep recursion's traceback (1,000 frames, ~150 KB) once filled the stderr pipe of a server
    whose parent did not read it, and the event loop blocked writing it: no request was answered again."""

    def recurse(value: Any, param: str) -> Any:
        return recurse(value, param)

    monkeypatch.setattr(requests, "response_schema", recurse)
    body = {**ROUTES[CHAT], "response_format": {"type": "json_object"}}
    uvicorn_log = logging.getLogger("uvicorn.error")  # it does not propagate: listen to it too
    uvicorn_log.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.ERROR):
            response = _post(http, CHAT, body)
    finally:
        uvicorn_log.removeHandler(caplog.handler)
    assert response.status_code == 500 and response.json()["error"]["type"] == "server_error"
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    text = "\n".join(r.getMessage() for r in errors)
    assert "RecursionError" in text and text.count("line ") <= MAX_LOGGED_FRAMES
    assert all(r.exc_info is None for r in errors)  # no logger formats the whole traceback after it
    monkeypatch.undo()
    _still_serving(http)


@pytest.mark.parametrize("path", ROUTES)
def test_a_lone_surrogate_is_a_400_naming_the_field(http, path):
    field = TEXT_FIELDS[path]
    text = '"bad \\udfff text"'
    body = json.dumps(ROUTES[path]).replace('"hi"', text)
    message = _refused(_post(http, path, body), path)
    assert message.startswith(field) and "lone surrogate" in message and "U+DFFF" in message
    _still_serving(http)


@pytest.mark.parametrize("path", [CHAT, "/v1/messages"])
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("repetition_penalty", "Infinity"),
        ("repetition_penalty", "1e308"),
        ("top_k", str(10**30)),
        ("temperature", "NaN"),
        ("top_p", "-Infinity"),
    ],
)
def test_non_finite_and_out_of_range_numbers_are_400s_naming_the_field(http, path, field, value):
    body = json.dumps(ROUTES[path])[:-1] + f', "{field}": {value}}}'
    response = _post(http, path, body)
    assert field in _refused(response, path)
    if path == CHAT:
        assert response.json()["error"]["param"] == field
    _still_serving(http)


def test_ten_thousand_tools_are_refused_by_their_count(http):
    tools = [
        {"type": "function", "function": {"name": f"f{i}", "parameters": {"type": "object"}}} for i in range(10_000)
    ]
    message = _refused(_post(http, CHAT, {**ROUTES[CHAT], "tools": tools}), CHAT)
    assert f"at most {MAX_TOOLS}" in message and message.startswith("tools")
    _still_serving(http)


@pytest.mark.parametrize("path", SCHEMA_FIELDS)
def test_a_ten_thousand_property_schema_is_refused_before_it_compiles(http, path):
    field, wrap = SCHEMA_FIELDS[path]
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(10_000)}}
    message = _refused(_post(http, path, {**ROUTES[path], field: wrap(schema)}), path)
    assert "properties" in message and message.startswith(field)
    _still_serving(http)


@pytest.mark.parametrize("path", ROUTES)
def test_a_prompt_whose_bytes_cannot_fit_the_context_is_refused_before_it_is_tokenized(http, path):
    body = json.dumps(ROUTES[path]).replace('"hi"', json.dumps("word " * 20_000))
    response = _post(http, path, body)
    assert "the prompt's text is 100000 bytes" in _refused(response, path)
    _still_serving(http)


def _closed_by_peer(sock: socket.socket, trickle: bytes) -> bool:
    """Send `trickle` (nothing when empty) every tenth of a second until the server closes the
    connection (True), or until the client's deadline (False)."""
    sock.settimeout(0.1)
    deadline = time.monotonic() + CLIENT_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        try:
            sock.sendall(trickle)
            if sock.recv(1) == b"":
                return True
        except TimeoutError:
            continue
        except OSError:  # reset, or a broken pipe: closed
            return True
    return False


def test_a_connection_whose_headers_trickle_is_closed_at_the_header_deadline(served):
    quick = BoundedHttp.with_limits(WireLimits(header_timeout=0.5))
    with serve_in_thread(create_app(served.engine, model_name="tiny"), http=quick) as url:
        address = url.removeprefix("http://").split(":")
        with (
            socket.create_connection((address[0], int(address[1]))) as slow,
            socket.create_connection((address[0], int(address[1]))) as idle,
        ):
            slow.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            assert _closed_by_peer(slow, b"X-Slow: 1\r\n")
            assert _closed_by_peer(idle, b"")  # one that never sent a byte, too
        with httpx2.Client(base_url=url) as http:
            assert http.get("/health").status_code == 200  # a prompt client is served


def test_the_openapi_document_lists_every_route_and_needs_no_key(http):
    document = http.get("/openapi.json").json()
    assert {path for path in document["paths"]} >= {*ROUTES, "/v1/models", "/v1/messages/count_tokens"}
    chat = document["paths"][CHAT]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert chat["additionalProperties"] is False and "messages" in chat["required"]


def test_count_tokens_still_counts_a_prompt_longer_than_the_context(http):
    body = {"model": "tiny", "messages": [{"role": "user", "content": "word " * 2_000}]}
    response = _post(http, "/v1/messages/count_tokens", body)
    assert response.status_code == 200 and response.json()["input_tokens"] > MAX_MODEL_LEN
