"""OpenAI Responses wire format: `POST /v1/responses`, a `Response` or its stream events.

Input: a string (one user turn) or a list of items, each a message (`{"role", "content"}`, with or
without `"type": "message"`; content a string or `input_text` / `output_text` parts);
`instructions` is the system turn before them. Stream: `response.created`,
`response.in_progress`, `response.output_item.added`, `response.content_part.added`, one
`response.output_text.delta` per text delta, `response.output_text.done`,
`response.content_part.done`, `response.output_item.done`, then `response.completed` (or
`response.incomplete` with `incomplete_details.reason = "max_output_tokens"` when the cap or the
context cut the answer); every event has a rising `sequence_number` and no `[DONE]` follows.
Nothing is stored (`store: true` and `previous_response_id` are refused).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from local_backend.outputs import Completion, StreamDelta
from local_backend.server import fields
from local_backend.server._constants import OPENAI_CHAT_ROLES, OPENAI_MAX_TEMPERATURE
from local_backend.server.errors import ApiError, Flavor
from local_backend.server.generation import Backend
from local_backend.server.streaming import respond, sse
from local_backend.server.usage import Usage, timings
from local_backend.server.validation import chat_turns, optional, read_json, sampling_params

_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})


def input_turns(body: dict[str, Any]) -> list[dict[str, str]]:
    """`instructions` then `input` as checked chat turns (`developer` rendered as `system`)."""
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise ApiError("input must be a non-empty string or a non-empty list of input items", param="input")
    messages = []
    for i, item in enumerate(items):
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind != "message":
            raise ApiError(f"input[{i}] of type {kind!r} is not supported: give messages", param=f"input[{i}]")
        content = item.get("content")
        if isinstance(content, list):
            content = [{**part, "type": "text"} if isinstance(part, dict) and part.get("type") in _TEXT_PARTS else part
                       for part in content]  # fmt: skip
        messages.append({"role": item.get("role"), "content": content})
    turns = chat_turns(messages, OPENAI_CHAT_ROLES, param="input")
    instructions = optional(body, "instructions", str)
    if instructions:
        turns.insert(0, {"role": "system", "content": instructions})
    for turn in turns:
        if turn["role"] == "developer":
            turn["role"] = "system"
    return turns


class ResponsesFormat:
    """A `Response`, whole or as its stream events (one output message of one text part)."""

    flavor = Flavor.OPENAI

    def __init__(self, model: str, body: dict[str, Any]):
        self._model, self._body = model, body
        self._id = "resp_" + uuid.uuid4().hex
        self._item_id = "msg_" + uuid.uuid4().hex
        self._created = int(time.time())
        self._sequence = 0

    def whole(self, completions: Sequence[Completion]) -> dict[str, Any]:
        [completion] = completions
        return {**self._response(completion), "timings": timings(completion)}

    def opening(self, usage: Usage) -> list[bytes]:
        return [
            self._event("response.created", response=self._response(None)),
            self._event("response.in_progress", response=self._response(None)),
            self._event("response.output_item.added", output_index=0, item=self._item(None)),
            self._event("response.content_part.added", **self._at_part(), part=_part("")),
        ]

    def delta(self, index: int, delta: StreamDelta) -> list[bytes]:
        if not delta.text:
            return []
        return [self._event("response.output_text.delta", **self._at_part(), delta=delta.text, logprobs=[])]

    def finished(self, index: int, completion: Completion) -> list[bytes]:
        return []

    def closing(self, completions: Sequence[Completion]) -> list[bytes]:
        [completion] = completions
        final = "response.incomplete" if _incomplete(completion) else "response.completed"
        return [
            self._event("response.output_text.done", **self._at_part(), text=completion.text, logprobs=[]),
            self._event("response.content_part.done", **self._at_part(), part=_part(completion.text)),
            self._event("response.output_item.done", output_index=0, item=self._item(completion)),
            self._event(final, response={**self._response(completion), "timings": timings(completion)}),
        ]

    def failure(self, body: dict[str, Any]) -> list[bytes]:
        error = body["error"]
        return [self._event("error", code=error["code"], message=error["message"], param=error["param"])]

    def _event(self, kind: str, **data: Any) -> bytes:
        self._sequence += 1
        return sse({"type": kind, "sequence_number": self._sequence - 1, **data}, kind)

    def _at_part(self) -> dict[str, Any]:
        return {"item_id": self._item_id, "output_index": 0, "content_index": 0}

    def _item(self, completion: Completion | None) -> dict[str, Any]:
        content = [] if completion is None else [_part(completion.text)]
        return {"id": self._item_id, "type": "message", "role": "assistant", "status": _status(completion),
                "content": content}  # fmt: skip

    def _response(self, completion: Completion | None) -> dict[str, Any]:
        body = self._body
        incomplete = completion is not None and _incomplete(completion)
        return {
            "id": self._id,
            "object": "response",
            "created_at": self._created,
            "status": _status(completion),
            "completed_at": int(time.time()) if completion is not None and not incomplete else None,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": self._model,
            "output": [] if completion is None else [self._item(completion)],
            "parallel_tool_calls": False,
            "previous_response_id": None,
            "temperature": body.get("temperature", 1.0),
            "text": {"format": {"type": "text"}},
            "tool_choice": "none",
            "tools": [],
            "top_p": body.get("top_p", 1.0),
            "truncation": "disabled",
            "usage": None if completion is None else _usage(Usage.of(completion)),
            "metadata": body.get("metadata") or {},
            "store": False,
        }


def _part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _incomplete(completion: Completion) -> bool:
    return completion.finish_reason == "length"


def _status(completion: Completion | None) -> str:
    if completion is None:
        return "in_progress"
    return "incomplete" if _incomplete(completion) else "completed"


def _usage(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cache_read},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.prompt_tokens + usage.output_tokens,
    }


def routes(backend: Backend) -> list[Route]:
    engine = backend.engine

    async def responses(request: Request) -> Response:
        body = await read_json(request)
        fields.check(body, fields.RESPONSES, "POST /v1/responses")
        model = backend.check_model(optional(body, "model", str))
        optional(body, "metadata", dict)
        ids = backend.prompt_ids(input_turns(body))
        params = sampling_params(
            body,
            prompt_tokens=len(ids),
            max_model_len=engine.max_model_len,
            max_tokens=optional(body, "max_output_tokens", int),
            max_tokens_param="max_output_tokens",
            stop=(),
            max_temperature=OPENAI_MAX_TEMPERATURE,
        )
        generation = backend.start(request, ids, params)
        return await respond(request, [generation], ResponsesFormat(model, body), optional(body, "stream", bool, False))

    return [Route("/v1/responses", responses, methods=["POST"])]
