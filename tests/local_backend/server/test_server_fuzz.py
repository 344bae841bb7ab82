"""Property-based fuzzing of every POST endpoint's JSON body: valid-ish and garbage bodies alike get an
answer below 500 (the server documents no 5xx for a bad request), in time, and leave no block in use.

The engine's context is tiny (`max_model_len`), so no generated answer can run long; the client
timeout turns a hang into a failure.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.local_backend.serving import SERVER_ERROR_TYPES, wait_idle

PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/messages")
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
numbers = st.integers(-3, 3) | st.floats(-3, 3) | st.sampled_from([2**64, -(2**63) - 1, 10**30])
roles = st.sampled_from(["system", "developer", "user", "assistant", "tool", "wizard", ""])
parts = st.lists(
    st.fixed_dictionaries({"type": st.sampled_from(["text", "image", "tool_use"]), "text": st.text(max_size=20)})
    | json_values,
    max_size=3,
)
messages = st.lists(
    st.fixed_dictionaries({"role": roles, "content": st.text(max_size=40) | parts | json_values}) | json_values,
    max_size=4,
)
knobs: dict[str, st.SearchStrategy[Any]] = {
    "model": st.just("tiny") | json_values,
    "messages": messages | json_values,
    "system": st.text(max_size=40) | parts | json_values,
    "prompt": st.text(max_size=40) | st.lists(st.integers(-2, 400), max_size=8) | json_values,
    "max_tokens": st.integers(-2, 8) | json_values,
    "max_completion_tokens": st.integers(-2, 8) | st.none(),
    "temperature": numbers | json_values,
    "top_p": numbers,
    "top_k": st.integers(-2, 1000) | numbers,
    "min_p": numbers,
    "seed": st.integers() | numbers,
    "frequency_penalty": numbers,
    "presence_penalty": numbers,
    "repetition_penalty": numbers,
    "ignore_eos": st.booleans() | json_values,
    "stop": st.text(max_size=4) | st.lists(st.text(max_size=4), max_size=20) | json_values,
    "stop_sequences": st.lists(st.text(max_size=4), max_size=20) | json_values,
    "stream": st.booleans() | json_values,
    "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}) | json_values,
    "n": st.integers(-1, 3) | json_values,
    "tools": st.lists(json_values, max_size=2),
    "logprobs": st.booleans() | json_values,
    "metadata": json_values,
}
knob_values = st.sampled_from(sorted(knobs)).flatmap(lambda name: knobs[name].map(lambda value: (name, value)))


@st.composite
def nearly_valid(draw: st.DrawFn, path: str) -> dict[str, Any]:
    """A body the endpoint would serve, then up to three fields replaced or added at random."""
    text = draw(st.text(min_size=1, max_size=40))
    prompt = {"prompt": text} if path == "/v1/completions" else {"messages": [{"role": "user", "content": text}]}
    body = {"model": "tiny", "max_tokens": draw(st.integers(1, 8)), **prompt}
    return body | dict(draw(st.lists(knob_values, max_size=3)))


any_object = st.fixed_dictionaries({}, optional=knobs) | st.dictionaries(
    st.sampled_from(sorted(knobs)) | st.text(max_size=10), json_values, max_size=6
)


def _check(fuzz_http: httpx2.Client, path: str, payload: bytes) -> None:
    response = fuzz_http.post(path, content=payload, headers={"content-type": "application/json"})
    assert response.status_code < 500, response.text
    assert not any(kind in response.text for kind in SERVER_ERROR_TYPES), response.text


@FUZZ
@given(data=st.data())
@pytest.mark.parametrize("path", PATHS)
def test_a_nearly_valid_body_is_served_or_refused_below_500(fuzz_http, path, data):
    _check(fuzz_http, path, json.dumps(data.draw(nearly_valid(path))).encode())


@FUZZ
@given(path=st.sampled_from(PATHS), body=any_object)
def test_any_json_object_gets_an_answer_below_500(fuzz_http, path, body):
    _check(fuzz_http, path, json.dumps(body).encode())


@FUZZ
@given(path=st.sampled_from(PATHS), payload=st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()))
def test_any_bytes_get_an_answer_below_500(fuzz_http, path, payload):
    _check(fuzz_http, path, payload)


def test_after_the_fuzzing_no_request_runs_and_no_block_is_in_use(fuzz_served, fuzz_http):
    stats = wait_idle(fuzz_served.engine)
    assert stats.num_running == stats.num_waiting == stats.blocks_used == 0
    assert fuzz_http.get("/health").status_code == 200
