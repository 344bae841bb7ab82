"""Schemathesis against the server's own `/openapi.json`: bodies generated from each route's schema,
some with one value made hostile (a string with a lone surrogate, or arrays nested hundreds to
thousands deep), some with hostile fields merged in (`$ref` chains up to 3,000 links in every place
a schema goes, wrong-typed roles, odd tool calls and choices, odd `logit_bias` keys), some sent in
UTF-16, UTF-32 or Latin-1; each answered below 500 and with no server error inside a stream either.

The engine's context is tiny, so no generated answer runs long; a bounded number of cases per route
keeps the file to well under a minute on two cores.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.schemas import APIOperation

from tests.local_backend.serving import SERVER_ERROR_TYPES, wait_idle

CASES_PER_ROUTE = 40
DEEP = "kvwise-fuzz-deep-nesting"
"""A placeholder string the serialised body's arrays, nested `depth` deep, replace."""
FUZZ = settings(max_examples=CASES_PER_ROUTE, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def operations(fuzz_http: httpx2.Client) -> dict[str, APIOperation]:
    """The server's operations, as schemathesis reads them from the document it serves."""
    schema = schemathesis.openapi.from_dict(fuzz_http.get("/openapi.json").json())
    found = [result.ok() for result in schema.get_all_operations()]
    return {f"{op.method.upper()} {op.path}": op for op in found}


ROUTES = [
    "POST /v1/chat/completions",
    "POST /v1/completions",
    "POST /v1/responses",
    "POST /v1/messages",
    "POST /v1/messages/count_tokens",
    "GET /v1/models",
]

surrogate_text = st.tuples(st.text(max_size=5), st.characters(categories=["Cs"]), st.text(max_size=5)).map("".join)


def _places(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every value in a generated body (its root excluded)."""
    if path:
        yield path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        yield from _places(item, (*path, key))


def _replaced(body: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(body, dict):
        return {**body, head: _replaced(body.get(head), rest, new)}
    return [_replaced(item, rest, new) if i == head else item for i, item in enumerate(body)]


def _ref_chain(links: int) -> dict[str, Any]:
    defs: dict[str, Any] = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(links)}
    defs[f"d{links}"] = {"type": "string"}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


ref_chains = (
    st.integers(50, 3000)
    .map(_ref_chain)
    .flatmap(
        lambda s: st.sampled_from(
            [
                {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": s}}},
                {"output_config": {"format": {"type": "json_schema", "schema": s}}},
                {"text": {"format": {"type": "json_schema", "name": "x", "schema": s}}},
                {"json_schema": s},
                {"tools": [{"type": "function", "function": {"name": "f", "parameters": s}}]},
            ]
        )
    )
)
odd_values = st.sampled_from([{}, [], [None], 7, None, True, "x", {"type": [1]}, [1]])
wrong_roles = odd_values.map(
    lambda role: {"messages": [{"role": role, "content": "hi"}], "input": [{"role": role, "content": "hi"}]}
)
odd_tools = st.one_of(
    odd_values.map(lambda choice: {"tool_choice": choice}),
    st.sampled_from([{"type": "function", "function": "f"}, {"type": "tool"}, {"type": "function", "name": 3}]).map(
        lambda choice: {"tool_choice": choice, "tools": [{"type": "function", "function": {"name": "f"}}]}
    ),
    odd_values.map(
        lambda calls: {
            "messages": [{"role": "assistant", "content": "", "tool_calls": calls}, {"role": "user", "content": "hi"}]
        }
    ),
)
odd_bias = st.sampled_from(["²", "٣", "9" * 5000, "-1", "1e3", "", " 7", "0x1"]).map(
    lambda key: {"logit_bias": {key: 1}}
)
ENCODINGS = ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "latin-1"]


@st.composite
def hostile(draw: st.DrawFn, body: Any) -> bytes:
    """`body` as JSON bytes, with one of its values (or a new top-level field) made hostile, fields of
    the wrong type or shape merged in, or the whole body in another encoding than UTF-8; or as it is."""
    kind = draw(st.sampled_from(["as generated", "surrogate", "deep", "fields", "encoding"]))
    if kind in ("surrogate", "deep"):
        places = list(_places(body)) if isinstance(body, (dict, list)) else []
        path = draw(st.sampled_from(places)) if places and draw(st.booleans()) else ("messages",)
        body = _replaced(
            body if isinstance(body, dict) else {}, path, draw(surrogate_text) if kind == "surrogate" else DEEP
        )
    elif kind == "fields":
        body = {
            **(body if isinstance(body, dict) else {}),
            **draw(st.one_of(ref_chains, wrong_roles, odd_tools, odd_bias)),
        }
    payload = json.dumps(body, ensure_ascii=kind != "encoding")
    if kind == "deep":
        depth = draw(st.integers(100, 3000))
        payload = payload.replace(json.dumps(DEEP), "[" * depth + "]" * depth)
    if kind == "encoding":
        return payload.encode(draw(st.sampled_from(ENCODINGS)), errors="replace")
    return payload.encode()


@FUZZ
@given(data=st.data())
@pytest.mark.parametrize("route", ROUTES)
def test_every_route_of_the_openapi_document_answers_generated_and_hostile_bodies_below_500(
    fuzz_http, operations, route, data
):
    operation = operations[route]
    case = data.draw(operation.as_strategy())
    headers = {"content-type": "application/json"}
    if operation.method.upper() == "GET":
        response = fuzz_http.get(case.formatted_path)
    else:
        response = fuzz_http.post(case.formatted_path, content=data.draw(hostile(case.body)), headers=headers)
    assert response.status_code < 500, response.text
    assert not any(kind in response.text for kind in SERVER_ERROR_TYPES), response.text


def test_after_the_fuzzing_no_request_runs_and_the_server_answers(fuzz_served, fuzz_http):
    stats = wait_idle(fuzz_served.engine)
    assert stats.num_running == stats.num_waiting == stats.blocks_used == 0
    chat = {"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    assert fuzz_http.post("/v1/chat/completions", json=chat).status_code == 200
