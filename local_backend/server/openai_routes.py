"""OpenAI wire format: `POST /v1/chat/completions`, `POST /v1/completions`, `GET /v1/models`.

JSON or SSE (`data: {chunk}` lines ending with `data: [DONE]`). With
`stream_options.include_usage` every chunk has `usage: null` and one last chunk with no choices
carries the usage. `usage.prompt_tokens_details.cached_tokens` counts prefix-cache hits. The whole
body, each finishing chunk and the usage chunk carry llama.cpp-style `timings` (of the first
choice). With `n > 1` the prompt is counted once and `completion_tokens` sums every choice's.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from local_backend.outputs import Completion, StreamDelta
from local_backend.server import fields
from local_backend.server._constants import MODEL_OWNER, OPENAI_CHAT_ROLES, OPENAI_MAX_TEMPERATURE, SSE_DONE
from local_backend.server.choices import choice_count, per_choice, start_choices
from local_backend.server.errors import ApiError, Flavor
from local_backend.server.generation import Backend
from local_backend.server.logprobs import Decode, LogprobsRecorder, chat_logprobs, completion_logprobs, requested_top
from local_backend.server.streaming import respond, sse
from local_backend.server.usage import Usage, timings
from local_backend.server.validation import chat_turns, optional, read_json, sampling_params, stop_strings


class OpenAIFormat:
    """Chat Completions (`chat=True`) or legacy Completions, whole or as chunks, of one or more choices."""

    flavor = Flavor.OPENAI

    def __init__(
        self,
        model: str,
        *,
        chat: bool,
        include_usage: bool,
        echo: str = "",
        n: int = 1,
        recorders: Sequence[LogprobsRecorder] = (),
        decode: Decode = str,
    ):
        self._model = model
        self._chat, self._include_usage = chat, include_usage
        self._echo = echo  # legacy `echo`: the prompt's text before the answer's
        self._n = n
        self._recorders, self._decode = recorders, decode  # one recorder per choice, when logprobs are asked for
        self._offsets = [len(echo)] * n  # legacy `text_offset` of each choice's next token
        self._id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self._created = int(time.time())

    def whole(self, completions: Sequence[Completion]) -> dict[str, Any]:
        body = self._envelope(chunk=False)
        choices = []
        for index, completion in enumerate(completions):
            logprobs = self._logprobs(index, completion.token_ids)
            choice: dict[str, Any] = {"index": index, "logprobs": logprobs, "finish_reason": completion.finish_reason}
            if self._chat:
                choice["message"] = {"role": "assistant", "content": completion.text, "refusal": None}
            else:
                choice["text"] = self._echo + completion.text
            choices.append(choice)
        return {**body, "choices": choices, "usage": self._usage(completions), "timings": timings(completions[0])}

    def opening(self, usage: Usage) -> list[bytes]:
        if self._chat:
            return [self._chunk(i, {"role": "assistant", "content": ""}, None) for i in range(self._n)]
        return [self._chunk(i, self._echo, None) for i in range(self._n)] if self._echo else []

    def delta(self, index: int, delta: StreamDelta) -> list[bytes]:
        logprobs = self._logprobs(index, delta.token_ids) if delta.token_ids else None
        if not delta.text and logprobs is None:
            return []
        return [self._chunk(index, {"content": delta.text} if self._chat else delta.text, None, logprobs=logprobs)]

    def finished(self, index: int, completion: Completion) -> list[bytes]:
        return [self._chunk(index, {} if self._chat else "", completion.finish_reason, {"timings": timings(completion)})]

    def closing(self, completions: Sequence[Completion]) -> list[bytes]:
        if not self._include_usage:
            return [SSE_DONE]
        last = {**self._envelope(chunk=True), "choices": [], "usage": self._usage(completions),
                "timings": timings(completions[0])}  # fmt: skip
        return [sse(last), SSE_DONE]

    def failure(self, body: dict[str, Any]) -> list[bytes]:
        return [sse(body), SSE_DONE]

    def _envelope(self, chunk: bool) -> dict[str, Any]:
        kind = ("chat.completion" if self._chat else "text_completion") + (".chunk" if chunk and self._chat else "")
        return {"id": self._id, "object": kind, "created": self._created, "model": self._model, "system_fingerprint": None}

    def _logprobs(self, index: int, tokens: Sequence[int]) -> dict[str, Any] | None:
        if not self._recorders:
            return None
        entries = self._recorders[index].take(tokens)
        if self._chat:
            return chat_logprobs(entries, self._decode)
        logprobs = completion_logprobs(entries, self._decode, self._offsets[index])
        self._offsets[index] += sum(map(len, logprobs["tokens"]))
        return logprobs

    def _chunk(
        self,
        index: int,
        delta: dict[str, Any] | str,
        finish_reason: str | None,
        extra: dict[str, Any] | None = None,
        logprobs: dict[str, Any] | None = None,
    ) -> bytes:
        choice: dict[str, Any] = {"index": index, "logprobs": logprobs, "finish_reason": finish_reason}
        choice["delta" if self._chat else "text"] = delta
        body = {**self._envelope(chunk=True), "choices": [choice], **(extra or {})}
        if self._include_usage:
            body["usage"] = None
        return sse(body)

    @staticmethod
    def _usage(completions: Sequence[Completion]) -> dict[str, Any]:
        usage = Usage.of(completions[0])
        output = sum(len(c.token_ids) for c in completions)
        return {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": output,
            "total_tokens": usage.prompt_tokens + output,
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
        n = choice_count(optional(body, "n", int, 1))
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
        echo = optional(body, "echo", bool, False) and not chat
        top = requested_top(body, chat)
        if echo and top is not None:
            raise ApiError("logprobs with echo needs the prompt's logprobs, which this backend does not compute",
                           param="logprobs")  # fmt: skip
        recorders = [LogprobsRecorder(top) for _ in range(n)] if top is not None else []
        choices = per_choice(params, n)
        if recorders:
            choices = [dataclasses.replace(p, logits_processor=r) for p, r in zip(choices, recorders)]
        fmt = OpenAIFormat(
            backend.check_model(optional(body, "model", str)),
            chat=chat,
            include_usage=bool(options.get("include_usage")),
            echo=engine.tokenizer.decode(ids) if echo else "",
            n=n,
            recorders=recorders,
            decode=lambda token: engine.tokenizer.decode([token]),
        )
        generations = await start_choices(backend, request, ids, choices)
        return await respond(request, generations, fmt, optional(body, "stream", bool, False))

    return [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
    ]
