"""Schemas and grammars bounded by what they cost to compile (issue 42 item 1): a `$ref` chain of
3,000 definitions or a GBNF grammar of 5,000 chained rules killed the whole process inside llguidance
(a stack overflow); now each is a 400 naming its field, the server answers the next request, and the
worst cases at the bounds compile and are served."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from local_backend.server._constants import MAX_GRAMMAR_NESTING, MAX_GRAMMAR_RULES, MAX_SCHEMA_DEPTH, MAX_SCHEMA_NODES
from tests.local_backend.server.test_server_hostile import (
    CHAT,
    CLIENT_TIMEOUT_SECONDS,
    MAX_MODEL_LEN,
    ROUTES,
    SCHEMA_FIELDS,
    _post,
    _refused,
)
from tests.local_backend.serving import Served, ServedEngines

COMPLETIONS = "/v1/completions"
TOOL_SCHEMA = {
    CHAT: lambda s: [{"type": "function", "function": {"name": "f", "parameters": s}}],
    "/v1/messages": lambda s: [{"name": "f", "input_schema": s}],
    "/v1/responses": lambda s: [{"type": "function", "name": "f", "parameters": s}],
}


@pytest.fixture(scope="module")
def served(serve: ServedEngines, llama_dir: Path) -> Served:
    return serve(llama_dir, max_model_len=MAX_MODEL_LEN, kv_cache_memory=2**20)


@pytest.fixture(scope="module")
def http(served: Served) -> Iterator[httpx2.Client]:
    with httpx2.Client(base_url=served.url, timeout=CLIENT_TIMEOUT_SECONDS) as client:
        yield client


def _same_server_answers(http: httpx2.Client) -> None:
    pid = os.getpid()
    response = _post(http, CHAT, ROUTES[CHAT])
    assert response.status_code == 200, response.text
    assert os.getpid() == pid


def ref_chain(links: int, objects: bool = False) -> dict[str, Any]:
    """A schema whose root refers to d0, d0 to d1, ... d<links> a string (each link an object when `objects`)."""

    def link(i: int) -> dict[str, Any]:
        ref = {"$ref": f"#/$defs/d{i + 1}"}
        return {"type": "object", "properties": {"a": ref}, "required": ["a"]} if objects else ref

    defs = {f"d{i}": link(i) for i in range(links)}
    defs[f"d{links}"] = {"type": "string", "maxLength": 3}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


def gbnf_chain(rules: int) -> str:
    return "root ::= r0\n" + "".join(f'r{i} ::= "a" r{i + 1}\n' for i in range(rules - 2)) + f'r{rules - 2} ::= "b"\n'


@pytest.mark.parametrize("path", SCHEMA_FIELDS)
@pytest.mark.parametrize("objects", [False, True], ids=["bare refs", "object links"])
def test_a_3000_link_ref_chain_is_a_400_naming_its_field(http, path, objects):
    field, wrap = SCHEMA_FIELDS[path]
    message = _refused(_post(http, path, {**ROUTES[path], field: wrap(ref_chain(3000, objects))}), path)
    assert message.startswith(field) and f"deeper than {MAX_SCHEMA_DEPTH}" in message
    _same_server_answers(http)


@pytest.mark.parametrize("path", TOOL_SCHEMA)
def test_a_tools_3000_link_ref_chain_is_a_400_naming_the_tool(http, path):
    body = {**ROUTES[path], "tools": TOOL_SCHEMA[path](ref_chain(3000, objects=True))}
    assert _refused(_post(http, path, body), path).startswith("tools[0]")
    _same_server_answers(http)


def test_llama_cpps_json_schema_with_a_ref_chain_is_a_400(http):
    body = {**ROUTES[COMPLETIONS], "json_schema": ref_chain(3000)}
    assert _refused(_post(http, COMPLETIONS, body), COMPLETIONS).startswith("json_schema")
    _same_server_answers(http)


def test_definitions_that_expand_exponentially_are_a_400(http):
    defs = {f"d{i}": {"type": "array", "prefixItems": [{"$ref": f"#/$defs/d{i + 1}"}] * 2} for i in range(18)}
    defs["d18"] = {"type": "string"}
    field, wrap = SCHEMA_FIELDS[CHAT]
    message = _refused(_post(http, CHAT, {**ROUTES[CHAT], field: wrap({"$defs": defs, "$ref": "#/$defs/d0"})}), CHAT)
    assert f"more than {MAX_SCHEMA_NODES} values" in message
    _same_server_answers(http)


@pytest.mark.parametrize("path", SCHEMA_FIELDS)
def test_a_ref_chain_within_the_bound_and_a_recursive_schema_are_served(http, path):
    field, wrap = SCHEMA_FIELDS[path]
    chain = ref_chain((MAX_SCHEMA_DEPTH - 4) // 3, objects=True)  # a link is 3 levels (object, properties, $ref)
    tree = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"kids": {"type": "array", "maxItems": 1, "items": {"$ref": "#/$defs/node"}}},
            }
        },
        "$ref": "#/$defs/node",
    }
    for schema in (chain, tree):
        response = _post(http, path, {**ROUTES[path], field: wrap(schema)})
        assert response.status_code == 200, response.text


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
@pytest.mark.parametrize("rules", [5000, MAX_GRAMMAR_RULES + 1])
def test_a_grammar_of_chained_rules_past_the_bound_is_a_400_naming_it(http, path, rules):
    message = _refused(_post(http, path, {**ROUTES[path], "grammar": gbnf_chain(rules)}), path)
    assert message.startswith("grammar") and "at most" in message
    _same_server_answers(http)


@pytest.mark.parametrize(
    "grammar",
    ["root ::= " + "(" * 1000 + '"a"' + ")" * 1000 + "\n", 'root ::= "' + "a" * 40_000 + '"\n'],
    ids=["nested", "large"],
)
def test_a_grammar_nested_or_large_past_its_bounds_is_a_400(http, grammar):
    assert _refused(_post(http, CHAT, {**ROUTES[CHAT], "grammar": grammar}), CHAT).startswith("grammar")
    _same_server_answers(http)


def test_grammars_at_the_bounds_compile_and_are_served(http):
    nested = "root ::= " + "(" * MAX_GRAMMAR_NESTING + '"a"' + ")" * MAX_GRAMMAR_NESTING + "\n"
    quoted = 'root ::= "((((" [(] "a"\n'  # parentheses in literals and classes are text, not nesting
    for grammar in (gbnf_chain(MAX_GRAMMAR_RULES), nested, quoted):
        response = _post(http, CHAT, {**ROUTES[CHAT], "grammar": grammar})
        assert response.status_code == 200, response.text
    assert json.loads(json.dumps(ROUTES[CHAT]))  # the ordinary body is untouched
