"""Every field typed before use (issue 42): a wrong type, an odd key or a body in another encoding is a
400 in the route's error form, never a 500, and the next ordinary request is answered by the same server.

Each case is one a probe found answered with a 500 (a non-string role, non-list `tool_calls`,
`tool_choice` shapes, `logit_bias` keys `"²"` and 5,000 digits, a lone surrogate in a key, UTF-16 and
UTF-32 bodies), or silently accepted (unknown `stream_options` keys), or refused though documented
(a seed of 2^64 - 1)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from local_backend._constants import SEED_RANGE
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
MESSAGES = "/v1/messages"
RESPONSES = "/v1/responses"
BODIES = {**ROUTES, COUNT: {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}}
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
TOOLS = {
    CHAT: [TOOL],
    RESPONSES: [{"type": "function", "name": "f"}],
    MESSAGES: [{"name": "f", "input_schema": {"type": "object"}}],
}


@pytest.fixture(scope="module")
def served(serve: ServedEngines, llama_dir: Path) -> Served:
    return serve(llama_dir, max_model_len=MAX_MODEL_LEN, kv_cache_memory=2**20)


@pytest.fixture(scope="module")
def http(served: Served) -> Iterator[httpx2.Client]:
    with httpx2.Client(base_url=served.url, timeout=CLIENT_TIMEOUT_SECONDS) as client:
        yield client


def _same_server_answers(http: httpx2.Client) -> None:
    """An ordinary request after a hostile one is answered, by this very process."""
    pid = os.getpid()
    response = _post(http, CHAT, ROUTES[CHAT])
    assert response.status_code == 200, response.text
    assert os.getpid() == pid


def _with_role(path: str, role: Any) -> dict[str, Any]:
    if path == RESPONSES:
        return {**BODIES[path], "input": [{"role": role, "content": "hi"}]}
    return {**BODIES[path], "messages": [{"role": role, "content": "hi"}]}


@pytest.mark.parametrize("path", [CHAT, MESSAGES, COUNT, RESPONSES])
@pytest.mark.parametrize("role", [{}, [], [None], 7])
def test_a_role_that_is_not_a_string_is_a_400_naming_it(http, path, role):
    message = _refused(_post(http, path, _with_role(path, role)), path)
    assert "role" in message
    _same_server_answers(http)


@pytest.mark.parametrize("calls", [5, {"a": 1}, "calls", True])
def test_tool_calls_that_are_not_a_list_are_a_400_naming_them(http, calls):
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": calls},
        {"role": "user", "content": "and?"},
    ]
    message = _refused(_post(http, CHAT, {**BODIES[CHAT], "messages": messages}), CHAT)
    assert "tool_calls" in message
    _same_server_answers(http)


@pytest.mark.parametrize("path", [CHAT, RESPONSES, MESSAGES])
@pytest.mark.parametrize("choice", [{"type": "function", "function": "f"}, [1], {"type": [1]}, {"type": {}}, 3])
def test_a_tool_choice_of_another_shape_is_a_400_naming_it(http, path, choice):
    body = {**BODIES[path], "tools": TOOLS[path], "tool_choice": choice}
    assert "tool_choice" in _refused(_post(http, path, body), path)
    _same_server_answers(http)


@pytest.mark.parametrize("key", ["²", "٣", "9" * 5000, "-1", " 1", "1.0", ""])
def test_a_logit_bias_key_that_is_not_ascii_digits_is_a_400(http, key):
    body = {**BODIES[CHAT], "logit_bias": {key: 1}}
    assert "logit_bias key" in _refused(_post(http, CHAT, body), CHAT)
    _same_server_answers(http)


@pytest.mark.parametrize("path", list(BODIES))
def test_a_lone_surrogate_in_a_key_is_a_400_whose_message_can_be_sent(http, path):
    body = json.dumps(BODIES[path])[:-1] + ', "bad\\udfffkey": 1}'
    message = _refused(_post(http, path, body), path)
    assert "lone surrogate" in message and "\\udfff" in message
    _same_server_answers(http)


@pytest.mark.parametrize("path", list(BODIES))
@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32", "utf-32-be"])
def test_a_body_in_another_encoding_than_utf8_is_a_400(http, path, encoding):
    response = http.post(
        path, content=json.dumps(BODIES[path]).encode(encoding), headers={"content-type": "application/json"}
    )
    assert "UTF-8" in _refused(response, path) or "not valid JSON" in _refused(response, path)
    _same_server_answers(http)


@pytest.mark.parametrize("path", [CHAT, RESPONSES])
@pytest.mark.parametrize("hostile", ['"' + "\\udfff" + '"', "[" * 960 + "]" * 960])
def test_utf16_cannot_carry_what_the_utf8_scans_refuse(http, path, hostile):
    """Nesting 960 deep or a lone surrogate in `metadata`, sent as UTF-16: once 500s or accepted."""
    text = json.dumps(BODIES[path])[:-1] + f', "metadata": {{"k": {hostile}}}}}'
    response = http.post(path, content=text.encode("utf-16"), headers={"content-type": "application/json"})
    _refused(response, path)
    _same_server_answers(http)


def test_an_unknown_stream_options_key_is_a_400_naming_it(http):
    body = {**BODIES[CHAT], "stream": True, "stream_options": {"include_usage": True, "continuous_usage": True}}
    message = _refused(_post(http, CHAT, body), CHAT)
    assert "continuous_usage" in message
    body["stream_options"] = {"include_usage": True, "include_obfuscation": False}
    assert _post(http, CHAT, body).status_code == 200


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
def test_a_seed_up_to_two_to_the_64_minus_one_is_accepted(http, path):
    assert SEED_RANGE[1] == 2**64 - 1
    response = _post(http, path, {**BODIES[path], "seed": 2**64 - 1, "temperature": 1.0})
    assert response.status_code == 200, response.text
    assert "seed" in _refused(_post(http, path, {**BODIES[path], "seed": 2**64}), path)
