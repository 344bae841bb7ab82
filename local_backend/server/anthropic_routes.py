"""Anthropic wire format: `POST /v1/messages`, JSON or the full SSE event sequence, and
`POST /v1/messages/count_tokens` (the prompt tokens the same body's message would report).

Stream: `message_start`, `content_block_start`, `ping`, one `content_block_delta` per text delta,
`content_block_stop`, `message_delta` (stop reason, cumulative usage, `timings`), `message_stop`
(`timings` again: the final event). `message_start` is sent with the first delta, when the prompt
is computed, so its usage already has the exact cache split, which `message_delta` repeats:

    input_tokens (uncached) + cache_read_input_tokens + cache_creation_input_tokens = prompt tokens

`system` may be a string or text blocks; `cache_control` marks are accepted and ignored (the
engine caches every full block of every prompt automatically).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from local_backend.outputs import Completion, StreamDelta
from local_backend.server import fields
from local_backend.server._constants import ANTHROPIC_MAX_TEMPERATURE, ANTHROPIC_ROLES
from local_backend.server.errors import Flavor
from local_backend.server.generation import Backend
from local_backend.server.streaming import respond, sse
from local_backend.server.usage import Usage, timings
from local_backend.server.validation import (
    chat_turns,
    optional,
    read_json,
    required,
    sampling_params,
    stop_strings,
    text_of,
)


class AnthropicFormat:
    """A `Message`, whole or as its stream events."""

    flavor = Flavor.ANTHROPIC

    def __init__(self, model: str):
        self._model = model
        self._id = "msg_" + uuid.uuid4().hex

    def whole(self, completions: Sequence[Completion]) -> dict[str, Any]:
        [completion] = completions
        body = self._message([{"type": "text", "text": completion.text}], _usage(Usage.of(completion)))
        return {**body, **_stop(completion), "timings": timings(completion)}

    def opening(self, usage: Usage) -> list[bytes]:
        start = self._message([], _usage(usage)) | {"stop_reason": None, "stop_sequence": None}
        block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
        return [
            sse({"type": "message_start", "message": start}, "message_start"),
            sse(block, "content_block_start"),
            sse({"type": "ping"}, "ping"),
        ]

    def delta(self, index: int, delta: StreamDelta) -> list[bytes]:
        if not delta.text:
            return []
        event = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": delta.text}}
        return [sse(event, "content_block_delta")]

    def finished(self, index: int, completion: Completion) -> list[bytes]:
        return [sse({"type": "content_block_stop", "index": 0}, "content_block_stop")]

    def closing(self, completions: Sequence[Completion]) -> list[bytes]:
        [completion] = completions
        extra = {"timings": timings(completion)}
        delta = {"type": "message_delta", "delta": _stop(completion), "usage": _usage(Usage.of(completion)), **extra}
        return [sse(delta, "message_delta"), sse({"type": "message_stop", **extra}, "message_stop")]

    def failure(self, body: dict[str, Any]) -> list[bytes]:
        return [sse(body, "error")]

    def _message(self, content: list[dict[str, Any]], usage: dict[str, Any]) -> dict[str, Any]:
        return {"id": self._id, "type": "message", "role": "assistant", "model": self._model,
                "content": content, "usage": usage}  # fmt: skip


def _usage(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.uncached,
        "cache_creation_input_tokens": usage.cache_write,
        "cache_read_input_tokens": usage.cache_read,
        "output_tokens": usage.output_tokens,
    }


def _stop(completion: Completion) -> dict[str, Any]:
    """`stop_reason`: `max_tokens`, `stop_sequence` (with the one that matched) or `end_turn`."""
    if completion.finish_reason == "length":
        return {"stop_reason": "max_tokens", "stop_sequence": None}
    matched = completion.stop_string
    return {"stop_reason": "stop_sequence" if matched else "end_turn", "stop_sequence": matched}


def routes(backend: Backend) -> list[Route]:
    engine = backend.engine

    def prompt(body: dict[str, Any]) -> tuple[str, list[int]]:
        """The reported model name and the prompt's token ids (the same for a message and its count)."""
        model = backend.check_model(required(body, "model", str))
        turns = chat_turns(body.get("messages"), ANTHROPIC_ROLES)
        system = body.get("system")
        if system:
            turns.insert(0, {"role": "system", "content": text_of(system, "system")})
        return model, backend.prompt_ids(turns)

    async def messages(request: Request) -> Response:
        body = await read_json(request)
        fields.check(body, fields.MESSAGES, "POST /v1/messages")
        model, ids = prompt(body)
        max_tokens = required(body, "max_tokens", int)
        stops = stop_strings(body, "stop_sequences")
        params = sampling_params(
            body,
            prompt_tokens=len(ids),
            max_model_len=engine.max_model_len,
            max_tokens=max_tokens,
            max_tokens_param="max_tokens",
            stop=stops,
            max_temperature=ANTHROPIC_MAX_TEMPERATURE,
        )
        generation = backend.start(request, ids, params)
        fmt = AnthropicFormat(model)
        return await respond(request, [generation], fmt, optional(body, "stream", bool, False))

    async def count_tokens(request: Request) -> Response:
        """`input_tokens`: exactly the prompt tokens `POST /v1/messages` computes and reports for the same body."""
        body = await read_json(request)
        fields.check(body, fields.COUNT_TOKENS, "POST /v1/messages/count_tokens")
        _, ids = prompt(body)
        return JSONResponse({"input_tokens": len(ids)})

    return [
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
    ]
