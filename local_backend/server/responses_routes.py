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
from collections.abc import Mapping, Sequence
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from local_backend.engine.outputs import Completion, StreamDelta
from local_backend.server.errors import Flavor
from local_backend.server.generating_route import Plan, serve_generation
from local_backend.server.generation import Backend
from local_backend.server.requests import parse_responses
from local_backend.server.streaming import sse
from local_backend.server.tools import ArgumentsPiece, Event, TextPiece, ToolCallParser, ToolCallStart, prompt_ids
from local_backend.server.usage import RequestUsage, timings

DEFAULT_TEMPERATURE: Final = 1.0
"""OpenAI's default `temperature`, which a `Response` reports when the request gave none."""
DEFAULT_TOP_P: Final = 1.0


class ResponsesFormat:
    """A `Response`, whole or as its stream events (one output message of one text part)."""

    flavor = Flavor.OPENAI

    def __init__(self, model: str, body: Mapping[str, Any], parse_tools: bool = False):
        self._model, self._body = model, body
        self._parser = ToolCallParser("call_") if parse_tools else None
        self._call_items: list[str] = []  # the output item id of each call
        self._fed = False  # whether the parser has read the answer (streamed) yet
        self._id = "resp_" + uuid.uuid4().hex
        self._item_id = "msg_" + uuid.uuid4().hex
        self._created = int(time.time())
        self._sequence = 0

    def whole(self, completions: Sequence[Completion]) -> dict[str, Any]:
        [completion] = completions
        self._content(completion)
        return {**self._response(completion), "timings": timings(completion)}

    def opening(self, usage: RequestUsage) -> list[bytes]:
        return [
            self._event("response.created", response=self._response(None)),
            self._event("response.in_progress", response=self._response(None)),
            self._event("response.output_item.added", output_index=0, item=self._item(None)),
            self._event("response.content_part.added", **self._at_part(), part=_part("")),
        ]

    def delta(self, index: int, delta: StreamDelta) -> list[bytes]:
        if self._parser is not None:
            self._fed = True
            return self._events(self._parser.feed(delta.text))
        return self._text(delta.text) if delta.text else []

    def finished(self, index: int, completion: Completion) -> list[bytes]:
        return self._events(self._parser.finish()) if self._parser is not None else []

    def closing(self, completions: Sequence[Completion]) -> list[bytes]:
        [completion] = completions
        final = "response.incomplete" if _incomplete(completion) else "response.completed"
        text = self._content(completion)
        return [
            self._event("response.output_text.done", **self._at_part(), text=text, logprobs=[]),
            self._event("response.content_part.done", **self._at_part(), part=_part(text)),
            self._event("response.output_item.done", output_index=0, item=self._item(completion)),
            self._event(final, response={**self._response(completion), "timings": timings(completion)}),
        ]

    def _text(self, text: str) -> list[bytes]:
        return [self._event("response.output_text.delta", **self._at_part(), delta=text, logprobs=[])]

    def _events(self, events: Sequence[Event]) -> list[bytes]:
        """Text into the message (output 0); call i is output i + 1, its arguments streamed as deltas."""
        assert self._parser is not None
        chunks = []
        for event in events:
            if isinstance(event, TextPiece):
                chunks += self._text(event.text)
                continue
            at = {"output_index": event.index + 1}
            if isinstance(event, ToolCallStart):
                self._call_items.append("fc_" + uuid.uuid4().hex)
                item = self._call_item(event.index, "", "in_progress")
                chunks.append(self._event("response.output_item.added", **at, item=item))
            elif isinstance(event, ArgumentsPiece):
                chunks.append(
                    self._event(
                        "response.function_call_arguments.delta",
                        **at,
                        item_id=self._call_items[event.index],
                        delta=event.text,
                    )
                )
            else:
                call = self._parser.calls[event.index]
                chunks.append(
                    self._event(
                        "response.function_call_arguments.done",
                        **at,
                        name=call.name,
                        item_id=self._call_items[event.index],
                        arguments=call.arguments,
                    )
                )
                item = self._call_item(event.index, call.arguments, "completed")
                chunks.append(self._event("response.output_item.done", **at, item=item))
        return chunks

    def _call_item(self, index: int, arguments: str, status: str) -> dict[str, Any]:
        assert self._parser is not None
        call = self._parser.calls[index]
        return {
            "type": "function_call",
            "id": self._call_items[index],
            "call_id": call.id,
            "name": call.name,
            "arguments": arguments,
            "status": status,
        }

    def _content(self, completion: Completion) -> str:
        """The message's text: the whole answer, or with tools what lies outside the calls."""
        if self._parser is None:
            return completion.text
        if not self._fed:  # a whole answer: parse it now
            self._fed = True
            self._parser.feed(completion.text)
            self._parser.finish()
            self._call_items = ["fc_" + uuid.uuid4().hex for _ in self._parser.calls]
        return self._parser.content

    def failure(self, body: dict[str, Any]) -> list[bytes]:
        error = body["error"]
        return [self._event("error", code=error["code"], message=error["message"], param=error["param"])]

    def _event(self, kind: str, **data: Any) -> bytes:
        self._sequence += 1
        return sse({"type": kind, "sequence_number": self._sequence - 1, **data}, kind)

    def _at_part(self) -> dict[str, Any]:
        return {"item_id": self._item_id, "output_index": 0, "content_index": 0}

    def _item(self, completion: Completion | None) -> dict[str, Any]:
        content = [] if completion is None else [_part(self._content(completion))]
        return {
            "id": self._item_id,
            "type": "message",
            "role": "assistant",
            "status": _status(completion),
            "content": content,
        }

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
            "output": [] if completion is None else [self._item(completion), *self._calls_out()],
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": None,
            "temperature": body.get("temperature", DEFAULT_TEMPERATURE),
            "text": body.get("text") or {"format": {"type": "text"}},
            "tool_choice": body.get("tool_choice", "auto" if body.get("tools") else "none"),
            "tools": body.get("tools") or [],
            "top_p": body.get("top_p", DEFAULT_TOP_P),
            "truncation": "disabled",
            "usage": None if completion is None else _usage(RequestUsage.of(completion)),
            "metadata": body.get("metadata") or {},
            "store": False,
        }

    def _calls_out(self) -> list[dict[str, Any]]:
        if self._parser is None:
            return []
        return [self._call_item(i, call.arguments, "completed") for i, call in enumerate(self._parser.calls)]


def _part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _incomplete(completion: Completion) -> bool:
    return completion.finish_reason == "length"


def _status(completion: Completion | None) -> str:
    if completion is None:
        return "in_progress"
    return "incomplete" if _incomplete(completion) else "completed"


def _usage(usage: RequestUsage) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cache_read},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.prompt_tokens + usage.output_tokens,
    }


async def responses(request: Request) -> Response:
    return await serve_generation(request, _plan)


def _plan(backend: Backend, body: dict[str, Any]) -> Plan:
    """The request checked, its prompt rendered and tokenized (on an offload thread)."""
    engine = backend.engine
    response = parse_responses(body)
    model = backend.check_model(response.model)
    shown = response.tool_choice.shown(response.tools)
    ids = prompt_ids(engine.tokenizer, response.messages, shown, engine.max_model_len)
    parse_tools = response.tool_choice.mode != "none"
    return Plan(
        ids,
        response.sampling,
        response.constraint,
        response.stream,
        lambda: ResponsesFormat(model, response.body, parse_tools=parse_tools),
    )


ROUTES: Final = (Route("/v1/responses", responses, methods=["POST"]),)
