"""OpenAI wire format: `POST /v1/chat/completions`, `POST /v1/completions`, `GET /v1/models`.

JSON or SSE (`data: {chunk}` lines ending with `data: [DONE]`). With
`stream_options.include_usage` every chunk has `usage: null` and one last chunk with no choices
carries the usage. `usage.prompt_tokens_details.cached_tokens` counts prefix-cache hits. The whole
body, each finishing chunk and the usage chunk carry llama.cpp-style `timings` (of the first
choice). With `n > 1` the prompt is counted once and `completion_tokens` sums every choice's.
Chat also serves `tools` (calls parsed from the model's `<tool_call>` blocks, see `tools`; streamed
as `tool_calls` argument deltas; `finish_reason` `tool_calls`), `response_format` and
`tool_choice` (constrained decoding, see `constrained`: a call names an offered tool) and vLLM's
template extras; both serve `logprobs`, `logit_bias` and llama.cpp's `json_schema` and `grammar`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from local_backend.engine.engine import Engine
from local_backend.engine.outputs import Completion, StreamDelta
from local_backend.server.bounds import check_prompt_size
from local_backend.server.constrained import Constraint
from local_backend.server.errors import Flavor
from local_backend.server.generating_route import Plan, serve_generation
from local_backend.server.generation import Backend
from local_backend.server.logprobs import Decode, LogprobsRecorder, chat_logprobs, completion_logprobs
from local_backend.server.requests import OpenAIOptions, parse_chat, parse_completion
from local_backend.server.streaming import sse
from local_backend.server.tools import (
    ArgumentsPiece,
    Event,
    TextPiece,
    ToolCall,
    ToolCallParser,
    ToolCallStart,
    prompt_ids,
)
from local_backend.server.usage import RequestUsage, timings

MODEL_OWNER: Final = "kvwise"
"""`owned_by` of the one model `GET /v1/models` lists."""

SSE_DONE: Final = b"data: [DONE]\n\n"
"""OpenAI's end-of-stream sentinel."""


def _call_json(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


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
        parse_tools: bool = False,
        parallel_tool_calls: bool = True,
    ):
        self._model = model
        self._chat, self._include_usage = chat, include_usage
        self._echo = echo  # legacy `echo`: the prompt's text before the answer's
        self._n = n
        self._recorders, self._decode = recorders, decode  # one recorder per choice, when logprobs are asked for
        self._offsets = [len(echo)] * n  # legacy `text_offset` of each choice's next token
        self._parsers = [ToolCallParser("call_") for _ in range(n)] if parse_tools else []
        self._parallel = parallel_tool_calls  # False: only the first call of an answer is kept
        self._id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self._created = int(time.time())

    def whole(self, completions: Sequence[Completion]) -> dict[str, Any]:
        body = self._envelope(chunk=False)
        choices = []
        for index, completion in enumerate(completions):
            logprobs = self._logprobs(index, completion.token_ids)
            choice: dict[str, Any] = {"index": index, "logprobs": logprobs, "finish_reason": completion.finish_reason}
            if self._parsers:
                parser = self._parsers[index]
                parser.feed(completion.text)
                parser.finish()
                calls = [_call_json(c) for c in parser.calls[: None if self._parallel else 1]]
                message = {"role": "assistant", "content": parser.content or None, "refusal": None}
                choice["message"] = {**message, "tool_calls": calls} if calls else message
                choice["finish_reason"] = "tool_calls" if calls else completion.finish_reason
            elif self._chat:
                choice["message"] = {"role": "assistant", "content": completion.text, "refusal": None}
            else:
                choice["text"] = self._echo + completion.text
            choices.append(choice)
        return {**body, "choices": choices, "usage": self._usage(completions), "timings": timings(completions[0])}

    def opening(self, usage: RequestUsage) -> list[bytes]:
        if self._chat:
            return [self._chunk(i, {"role": "assistant", "content": ""}, None) for i in range(self._n)]
        return [self._chunk(i, self._echo, None) for i in range(self._n)] if self._echo else []

    def delta(self, index: int, delta: StreamDelta) -> list[bytes]:
        logprobs = self._logprobs(index, delta.token_ids) if delta.token_ids else None
        pieces: list[dict[str, Any] | str]
        if self._parsers:
            pieces = [*self._tool_pieces(self._parsers[index].feed(delta.text))]
        else:
            pieces = [{"content": delta.text} if self._chat else delta.text] if delta.text else []
        if logprobs is not None and not pieces:
            pieces = [{"content": ""} if self._chat else ""]
        return [
            self._chunk(index, piece, None, logprobs=logprobs if i == 0 else None) for i, piece in enumerate(pieces)
        ]

    def finished(self, index: int, completion: Completion) -> list[bytes]:
        reason: str = completion.finish_reason
        chunks = []
        if self._parsers:
            parser = self._parsers[index]
            chunks = [self._chunk(index, piece, None) for piece in self._tool_pieces(parser.finish())]
            reason = "tool_calls" if parser.calls else reason
        return [*chunks, self._chunk(index, {} if self._chat else "", reason, {"timings": timings(completion)})]

    def _tool_pieces(self, events: Sequence[Event]) -> list[dict[str, Any]]:
        """Chat deltas of parser events: content, a call's id and name, its arguments' pieces."""
        pieces: list[dict[str, Any]] = []
        for event in events:
            if isinstance(event, TextPiece):
                pieces.append({"content": event.text})
            elif isinstance(event, (ToolCallStart, ArgumentsPiece)) and (self._parallel or event.index == 0):
                if isinstance(event, ToolCallStart):
                    call = {
                        "index": event.index,
                        "id": event.call_id,
                        "type": "function",
                        "function": {"name": event.name, "arguments": ""},
                    }
                else:
                    call = {"index": event.index, "function": {"arguments": event.text}}
                pieces.append({"tool_calls": [call]})
        return pieces

    def closing(self, completions: Sequence[Completion]) -> list[bytes]:
        if not self._include_usage:
            return [SSE_DONE]
        last = {
            **self._envelope(chunk=True),
            "choices": [],
            "usage": self._usage(completions),
            "timings": timings(completions[0]),
        }
        return [sse(last), SSE_DONE]

    def failure(self, body: dict[str, Any]) -> list[bytes]:
        return [sse(body), SSE_DONE]

    def _envelope(self, chunk: bool) -> dict[str, Any]:
        kind = ("chat.completion" if self._chat else "text_completion") + (".chunk" if chunk and self._chat else "")
        return {
            "id": self._id,
            "object": kind,
            "created": self._created,
            "model": self._model,
            "system_fingerprint": None,
        }

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
        usage = RequestUsage.of(completions[0])
        output = sum(len(c.token_ids) for c in completions)
        return {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": output,
            "total_tokens": usage.prompt_tokens + output,
            "prompt_tokens_details": {"cached_tokens": usage.cache_read},
        }


async def chat_completions(request: Request) -> Response:
    return await serve_generation(request, _chat_plan)


def _chat_plan(backend: Backend, body: dict[str, Any]) -> Plan:
    """The request checked, its prompt rendered and tokenized (on an offload thread)."""
    engine = backend.engine
    chat = parse_chat(body, engine.config.vocab_size)
    model = backend.check_model(chat.options.model)
    ids = prompt_ids(
        engine.tokenizer, chat.messages, chat.tool_choice.shown(chat.tools), engine.max_model_len, chat.template
    )
    return _plan(
        engine,
        model,
        chat.options,
        ids,
        chat=True,
        constraint=chat.constraint,
        parse_tools=chat.tool_choice.mode != "none",
        parallel_tool_calls=chat.parallel_tool_calls,
    )


async def completions(request: Request) -> Response:
    return await serve_generation(request, _completion_plan)


def _completion_plan(backend: Backend, body: dict[str, Any]) -> Plan:
    engine = backend.engine
    completion = parse_completion(body, engine.config.vocab_size)
    model = backend.check_model(completion.options.model)
    prompt = completion.prompt
    if isinstance(prompt, str):
        check_prompt_size([prompt], engine.tokenizer.max_bytes_per_token, engine.max_model_len, "prompt")
    ids = engine.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
    return _plan(
        engine, model, completion.options, ids, chat=False, echo=completion.echo, constraint=completion.constraint
    )


async def models(request: Request) -> Response:
    backend = Backend.of(request)
    listed = [
        {
            "id": name,
            "object": "model",
            "created": 0,
            "owned_by": MODEL_OWNER,
            "max_model_len": backend.engine.max_model_len,
        }
        for name in backend.model_names
    ]
    return JSONResponse({"object": "list", "data": listed})


def _plan(
    engine: Engine,
    model: str,
    options: OpenAIOptions,
    ids: list[int],
    *,
    chat: bool,
    echo: bool = False,
    constraint: Constraint | None = None,
    parse_tools: bool = False,
    parallel_tool_calls: bool = True,
) -> Plan:
    """Chat's or Completions' choices of one prompt, whole or streamed."""
    top = options.top_logprobs
    recorders = [LogprobsRecorder(top) for _ in range(options.n)] if top is not None else []

    def wire() -> OpenAIFormat:
        return OpenAIFormat(
            model,
            chat=chat,
            include_usage=options.include_usage,
            echo=engine.tokenizer.decode(ids) if echo else "",
            n=options.n,
            recorders=recorders,
            decode=lambda token: engine.tokenizer.decode([token]),
            parse_tools=parse_tools,
            parallel_tool_calls=parallel_tool_calls,
        )

    return Plan(
        ids,
        options.sampling,
        constraint,
        options.stream,
        wire,
        n=options.n,
        recorders=recorders,
        bias=options.logit_bias,
    )


ROUTES: Final = (
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/v1/completions", completions, methods=["POST"]),
    Route("/v1/models", models, methods=["GET"]),
)
