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

import json
import uuid
from collections.abc import Sequence
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from local_backend.engine.outputs import Completion, StreamDelta
from local_backend.server.bounds import read_json
from local_backend.server.errors import Flavor
from local_backend.server.generating_route import Plan, serve_generation
from local_backend.server.generation import Backend
from local_backend.server.requests import AnthropicPrompt, parse_count_tokens, parse_message
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


class AnthropicFormat:
    """A `Message`, whole or as its stream events; with tools, `tool_use` blocks after the text block."""

    flavor = Flavor.ANTHROPIC

    def __init__(self, model: str, parse_tools: bool = False):
        self._model = model
        self._id = "msg_" + uuid.uuid4().hex
        self._parser = ToolCallParser("toolu_") if parse_tools else None
        self._block = 0  # the index of the streamed content block last opened (block 0: the text before any call)
        self._text_open = True  # whether that block is a text block still open

    def whole(self, completions: Sequence[Completion]) -> dict[str, Any]:
        [completion] = completions
        content: list[dict[str, Any]] = [{"type": "text", "text": completion.text}]
        stop = _stop(completion)
        if self._parser is not None:
            events = [*self._parser.feed(completion.text), *self._parser.finish()]
            content = _blocks(events, self._parser.calls) or content
            stop = _stop(completion, tool_use=bool(self._parser.calls))
        body = self._message(content, _usage(RequestUsage.of(completion)))
        return {**body, **stop, "timings": timings(completion)}

    def opening(self, usage: RequestUsage) -> list[bytes]:
        start = self._message([], _usage(usage)) | {"stop_reason": None, "stop_sequence": None}
        block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
        return [
            sse({"type": "message_start", "message": start}, "message_start"),
            sse(block, "content_block_start"),
            sse({"type": "ping"}, "ping"),
        ]

    def delta(self, index: int, delta: StreamDelta) -> list[bytes]:
        if self._parser is None:
            return _text_delta(delta.text) if delta.text else []
        return self._events(self._parser.feed(delta.text))

    def finished(self, index: int, completion: Completion) -> list[bytes]:
        chunks = self._events(self._parser.finish()) if self._parser is not None else []
        if self._text_open:
            chunks.append(sse({"type": "content_block_stop", "index": self._block}, "content_block_stop"))
        return chunks

    def closing(self, completions: Sequence[Completion]) -> list[bytes]:
        [completion] = completions
        extra = {"timings": timings(completion)}
        stop = _stop(completion, tool_use=self._parser is not None and bool(self._parser.calls))
        delta = {"type": "message_delta", "delta": stop, "usage": _usage(RequestUsage.of(completion)), **extra}
        return [sse(delta, "message_delta"), sse({"type": "message_stop", **extra}, "message_stop")]

    def failure(self, body: dict[str, Any]) -> list[bytes]:
        return [sse(body, "error")]

    def _events(self, events: Sequence[Event]) -> list[bytes]:
        """Content blocks in the answer's order: text before the first call into block 0, each call a
        `tool_use` block (start, `input_json_delta`s, stop), text after a call a new text block."""
        chunks = []
        for event in events:
            if isinstance(event, TextPiece):
                if not self._text_open:
                    self._block, self._text_open = self._block + 1, True
                    block = {
                        "type": "content_block_start",
                        "index": self._block,
                        "content_block": {"type": "text", "text": ""},
                    }
                    chunks.append(sse(block, "content_block_start"))
                chunks += _text_delta(event.text, self._block)
            elif isinstance(event, ToolCallStart):
                if self._text_open:
                    chunks.append(sse({"type": "content_block_stop", "index": self._block}, "content_block_stop"))
                self._block, self._text_open = self._block + 1, False
                block = {"type": "tool_use", "id": event.call_id, "name": event.name, "input": {}}
                chunks.append(
                    sse(
                        {"type": "content_block_start", "index": self._block, "content_block": block},
                        "content_block_start",
                    )
                )
            elif isinstance(event, ArgumentsPiece):
                piece = {"type": "input_json_delta", "partial_json": event.text}
                chunks.append(
                    sse({"type": "content_block_delta", "index": self._block, "delta": piece}, "content_block_delta")
                )
            else:
                chunks.append(sse({"type": "content_block_stop", "index": self._block}, "content_block_stop"))
        return chunks

    def _message(self, content: list[dict[str, Any]], usage: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": self._id,
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": content,
            "usage": usage,
        }


def _text_delta(text: str, index: int = 0) -> list[bytes]:
    event = {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}}
    return [sse(event, "content_block_delta")]


def _blocks(events: Sequence[Event], calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    """A whole answer's content blocks in order (text, `tool_use`, text after it, ...), from the parser's events."""
    content: list[dict[str, Any]] = []
    for event in events:
        if isinstance(event, TextPiece):
            if content and content[-1]["type"] == "text":
                content[-1]["text"] += event.text
            else:
                content.append({"type": "text", "text": event.text})
        elif isinstance(event, ToolCallStart):
            call = calls[event.index]
            content.append(_tool_use(call.id, call.name, call.arguments))
    return content


def _tool_use(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except ValueError:  # a call cut short by max_tokens: its input is what could be read, none
        value = {}
    return {"type": "tool_use", "id": call_id, "name": name, "input": value if isinstance(value, dict) else {}}


def _usage(usage: RequestUsage) -> dict[str, Any]:
    return {
        "input_tokens": usage.uncached,
        "cache_creation_input_tokens": usage.cache_write,
        "cache_read_input_tokens": usage.cache_read,
        "output_tokens": usage.output_tokens,
    }


def _stop(completion: Completion, tool_use: bool = False) -> dict[str, Any]:
    """`stop_reason`: `max_tokens`, `tool_use`, `stop_sequence` (with the one that matched) or `end_turn`."""
    if completion.finish_reason == "length":
        return {"stop_reason": "max_tokens", "stop_sequence": None}
    if tool_use:
        return {"stop_reason": "tool_use", "stop_sequence": None}
    matched = completion.stop_string
    return {"stop_reason": "stop_sequence" if matched else "end_turn", "stop_sequence": matched}


async def messages(request: Request) -> Response:
    return await serve_generation(request, _message_plan)


def _message_plan(backend: Backend, body: dict[str, Any]) -> Plan:
    message = parse_message(body)
    model, ids = _prompt(backend, message.prompt, backend.engine.max_model_len)
    parse_tools = message.prompt.tool_choice.mode != "none"
    return Plan(
        ids,
        message.sampling,
        message.constraint,
        message.stream,
        lambda: AnthropicFormat(model, parse_tools=parse_tools),
    )


async def count_tokens(request: Request) -> Response:
    """`input_tokens`: exactly the prompt tokens `POST /v1/messages` computes and reports for the same body."""
    backend = Backend.of(request)
    body = await read_json(request, backend.offload)
    _, ids = await backend.offload.run(lambda: _prompt(backend, parse_count_tokens(body), None))
    return JSONResponse({"input_tokens": len(ids)})


def _prompt(backend: Backend, prompt: AnthropicPrompt, limit: int | None) -> tuple[str, list[int]]:
    """The reported model name and the prompt's token ids (the same for a message and its count).

    `limit`: the context a message must fit (refused early past it); a count has none (its text is
    bounded by `MAX_COUNTED_BYTES` instead)."""
    model = backend.check_model(prompt.model)
    shown = prompt.tool_choice.shown(prompt.tools)
    return model, prompt_ids(backend.engine.tokenizer, prompt.messages, shown, limit)


ROUTES: Final = (
    Route("/v1/messages", messages, methods=["POST"]),
    Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
)
