"""`GET /openapi.json`: an OpenAPI 3.1 document of the routes this server serves, as vLLM publishes one.

Request bodies come from the same tables that decide what each endpoint accepts (`fields`): every
field the endpoint knows is a property (`additionalProperties: false`, since any other is a 400),
typed by `FIELD_SCHEMAS` (a field it does not list may be any JSON value), with the fields the
endpoint cannot do without as `required`. Every operation answers 200 or the API's own error body
(OpenAI's, or Anthropic's under `/v1/messages`), never a 5xx for a bad request: the test suite
fuzzes the server from this document (`tests/local_backend/server/test_server_openapi_fuzz.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from starlette.routing import BaseRoute, Route

from local_backend.server import fields
from local_backend.server.errors import Flavor
from local_backend.server.fields import SAMPLING_KNOBS

_JSON_TYPES: Final = {float: "number", int: "integer", bool: "boolean", str: "string"}
_STRINGS: Final = {"type": "array", "items": {"type": "string"}}
_TEXT_PART: Final = {
    "type": "object",
    "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
    "required": ["type", "text"],
}
_TEXT: Final = {"anyOf": [{"type": "string"}, {"type": "array", "items": _TEXT_PART}]}
_OBJECT: Final = {"type": "object"}

FIELD_SCHEMAS: Final[Mapping[str, Any]] = {
    **{name: {"type": _JSON_TYPES[kind]} for name, kind in SAMPLING_KNOBS.items()},
    "model": {"type": "string"},
    "messages": {
        "type": "array",
        "minItems": 1,
        "items": {
            "type": "object",
            "required": ["role", "content"],
            "properties": {"role": {"enum": ["system", "developer", "user", "assistant", "tool"]}, "content": _TEXT},
        },
    },
    "system": _TEXT,
    "instructions": {"type": "string"},
    "prompt": {"anyOf": [{"type": "string", "minLength": 1}, {"type": "array", "items": {"type": "integer"}}]},
    "input": {"anyOf": [{"type": "string", "minLength": 1}, {"type": "array", "items": _OBJECT}]},
    "max_tokens": {"type": "integer"},
    "max_completion_tokens": {"type": "integer"},
    "max_output_tokens": {"type": "integer"},
    "n": {"type": "integer"},
    "stop": {"anyOf": [{"type": "string"}, _STRINGS]},
    "stop_sequences": _STRINGS,
    "stream": {"type": "boolean"},
    "stream_options": _OBJECT,
    "echo": {"type": "boolean"},
    "logprobs": {"anyOf": [{"type": "boolean"}, {"type": "integer"}]},
    "top_logprobs": {"type": "integer"},
    "logit_bias": {"type": "object", "additionalProperties": {"type": "number"}},
    "tools": {"type": "array", "items": _OBJECT},
    "tool_choice": {"anyOf": [{"type": "string"}, _OBJECT]},
    "parallel_tool_calls": {"type": "boolean"},
    "response_format": _OBJECT,
    "text": _OBJECT,
    "output_config": _OBJECT,
    "metadata": _OBJECT,
    "json_schema": _OBJECT,
    "grammar": {"type": "string"},
    "add_generation_prompt": {"type": "boolean"},
    "continue_final_message": {"type": "boolean"},
    "chat_template_kwargs": _OBJECT,
}
"""The JSON schema of each request field by name (the same name means the same thing on every endpoint)."""

BODIES: Final[Mapping[str, tuple[fields.Table, tuple[str, ...]]]] = {
    "/v1/chat/completions": (fields.CHAT, ("messages",)),
    "/v1/completions": (fields.COMPLETIONS, ("prompt",)),
    "/v1/responses": (fields.RESPONSES, ("input",)),
    "/v1/messages": (fields.MESSAGES, ("model", "max_tokens", "messages")),
    "/v1/messages/count_tokens": (fields.COUNT_TOKENS, ("model", "messages")),
}
"""Each POST route's field table and the fields it requires."""

_OPENAI_ERROR: Final = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type"],
            "properties": {"message": {"type": "string"}, "type": {"type": "string"}, "param": {}, "code": {}},
        }
    },
}
_ANTHROPIC_ERROR: Final = {
    "type": "object",
    "required": ["type", "error"],
    "properties": {
        "type": {"const": "error"},
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
        },
    },
}


def document(routes: Sequence[BaseRoute], title: str) -> dict[str, Any]:
    """The OpenAPI document of `routes` (the API routes of one app)."""
    paths: dict[str, Any] = {}
    for route in routes:
        if not isinstance(route, Route):
            continue
        for method in sorted((route.methods or set()) - {"HEAD"}):
            paths.setdefault(route.path, {})[method.lower()] = _operation(route.path, method)
    return {
        "openapi": "3.1.0",
        "info": {"title": f"kvwise local backend ({title})", "version": "1"},
        "paths": paths,
    }


def _operation(path: str, method: str) -> dict[str, Any]:
    error = _ANTHROPIC_ERROR if Flavor.of_path(path) is Flavor.ANTHROPIC else _OPENAI_ERROR
    operation: dict[str, Any] = {
        "operationId": f"{method.lower()}{path.replace('/', '_')}",
        "responses": {
            "200": {
                "description": "the answer (`text/event-stream` when `stream` is true)",
                "content": {"application/json": {"schema": _OBJECT}},
            },
            "4XX": {
                "description": "refused, with the API's own error body",
                "content": {"application/json": {"schema": error}},
            },
        },
    }
    if path in BODIES:
        table, required = BODIES[path]
        properties = {name: FIELD_SCHEMAS.get(name, {}) for name in table}
        body = {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    return operation
