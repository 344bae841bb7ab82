"""OpenAI wire format: `POST /v1/chat/completions`, `POST /v1/completions`, `GET /v1/models`.

JSON or SSE (`data: {chunk}` lines ending with `data: [DONE]`). With
`stream_options.include_usage` every chunk has `usage: null` and one last chunk with no choices
carries the usage. `usage.prompt_tokens_details.cached_tokens` counts prefix-cache hits. The whole
body, the finishing chunk and the usage chunk carry llama.cpp-style `timings`. Only `n=1`.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from local_backend.outputs import Completion
from local_backend.server import fields
from local_backend.server._constants import (
    MODEL_OWNER,
    OPENAI_CHAT_ROLES,
    OPENAI_MAX_TEMPERATURE,
    SSE_DONE,
)
from local_backend.server.errors import ApiError, Flavor
from local_backend.server.generation import Backend
from local_backend.server.streaming import respond, sse
from local_backend.server.usage import Usage, timings
from local_backend.server.validation import (
    chat_turns,
    optional,
    read_json,
    sampling_params,
    stop_strings,
)


class OpenAIFormat:
    """Chat Completions (`chat=True`) or legacy Completions, whole or as chunks."""

    flavor = Flavor.OPENAI

    def __init__(self, model: str, *, chat: bool, include_usage: bool, echo: str = ""):
        self._model = model
        self._chat, self._include_usage = chat, include_usage
        self._echo = echo  # legacy `echo`: the prompt's text before the answer's
        self._id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self._created = int(time.time())

    def whole(self, completion: Completion) -> dict[str, Any]:
        body = self._envelope(chunk=False)
        if self._chat:
            message = {"role": "assistant", "content": completion.text, "refusal": None}
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": completion.finish_reason}
        else:
            text = self._echo + completion.text
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": completion.finish_reason}
        return {**body, "choices": [choice], "usage": self._usage(completion), "timings": timings(completion)}

    def opening(self, usage: Usage) -> list[bytes]:
        if self._chat:
            return [self._chunk({"role": "assistant", "content": ""}, None)]
        return [self._chunk(self._echo, None)] if self._echo else []

    def text(self, text: str) -> list[bytes]:
        return [self._chunk({"content": text} if self._chat else text, None)]

    def closing(self, completion: Completion) -> list[bytes]:
        extra = {"timings": timings(completion)}
        chunks = [self._chunk({} if self._chat else "", completion.finish_reason, extra)]
        if self._include_usage:
            last = {**self._envelope(chunk=True), "choices": [], "usage": self._usage(completion), **extra}
            chunks.append(sse(last))
        return [*chunks, SSE_DONE]

    def failure(self, body: dict[str, Any]) -> list[bytes]:
        return [sse(body), SSE_DONE]

    def _envelope(self, chunk: bool) -> dict[str, Any]:
        kind = ("chat.completion" if self._chat else "text_completion") + (".chunk" if chunk and self._chat else "")
        return {"id": self._id, "object": kind, "created": self._created, "model": self._model, "system_fingerprint": None}

    def _chunk(self, delta: dict[str, Any] | str, finish_reason: str | None, extra: dict[str, Any] | None = None) -> bytes:
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish_reason}
        choice["delta" if self._chat else "text"] = delta
        body = {**self._envelope(chunk=True), "choices": [choice], **(extra or {})}
        if self._include_usage:
            body["usage"] = None
        return sse(body)

    def _usage(self, completion: Completion) -> dict[str, Any]:
        usage = Usage.of(completion)
        return {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.prompt_tokens + usage.output_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cache_read},
        }


def routes(backend: Backend) -> list[Route]:
    engine = backend.engine

    async def chat_completions(request: Request) -> Response:
        body = await read_json(request)
        fields.check(body, fields.CHAT, "POST /v1/chat/completions")
        turns = chat_turns(body.get("messages"), OPENAI_CHAT_ROLES)
        for turn in turns:
            if turn["role"] == "developer":
                turn["role"] = "system"
        return await _generate(request, body, backend.prompt_ids(turns), chat=True)

    async def completions(request: Request) -> Response:
        body = await read_json(request)
        fields.check(body, fields.COMPLETIONS, "POST /v1/completions")
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # a batch of one
        if isinstance(prompt, str) and prompt:
            ids = engine.tokenizer.encode(prompt)
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            ids = list(prompt)
        else:
            raise ApiError("prompt must be a non-empty string or a list of token ids (one prompt per request)", param="prompt")
        return await _generate(request, body, ids, chat=False)

    async def models(request: Request) -> Response:
        listed = [{"id": name, "object": "model", "created": 0, "owned_by": MODEL_OWNER,
                   "max_model_len": engine.max_model_len} for name in backend.model_names]  # fmt: skip
        return JSONResponse({"object": "list", "data": listed})

    async def _generate(request: Request, body: dict[str, Any], ids: list[int], *, chat: bool) -> Response:
        n = optional(body, "n", int, 1)
        if n != 1:
            raise ApiError(f"n={n} is not supported: the local backend returns one choice per request (n=1)", param="n")
        name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
        params = sampling_params(
            body,
            prompt_tokens=len(ids),
            max_model_len=engine.max_model_len,
            max_tokens=optional(body, name, int),
            max_tokens_param=name,
            stop=stop_strings(body, "stop"),
            max_temperature=OPENAI_MAX_TEMPERATURE,
        )
        options = optional(body, "stream_options", dict, {})
        fmt = OpenAIFormat(
            backend.check_model(optional(body, "model", str)),
            chat=chat,
            include_usage=bool(options.get("include_usage")),
            echo=engine.tokenizer.decode(ids) if not chat and optional(body, "echo", bool, False) else "",
        )
        generation = backend.start(request, ids, params)
        return await respond(request, generation, fmt, optional(body, "stream", bool, False))

    return [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
    ]
