"""`POST /v1/responses` in the wire format of openai 3.x (`Response` and its stream events).

Stream: `response.created`, `response.in_progress`, `response.output_item.added`,
`response.content_part.added`, one `response.output_text.delta` per token,
`response.output_text.done`, `response.content_part.done`, `response.output_item.done`, then
`response.completed` (or `response.incomplete` with `incomplete_details.reason =
"max_output_tokens"` when the cap cut the reply); every event has a rising `sequence_number`, and no
`[DONE]` follows. Usage: `input_tokens` (cached included), `input_tokens_details.cached_tokens` /
`cache_write_tokens`, `output_tokens`, `output_tokens_details.reasoning_tokens`.
"""

from __future__ import annotations

from typing import Any

from .decode import DecodeParams, Finish
from .errors import Flavour, SimulatedError
from .tokens import RenderedBlock, RenderedPrompt, content_blocks, message_blocks, tool_blocks
from .wire import Job, ServedJob, SseEvent, new_id, now, required, token_cap

_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})


class ResponsesApi:
    path = "/v1/responses"
    flavour = Flavour.OPENAI

    def parse(self, body: dict[str, Any]) -> Job:
        model = required(body, "model", str)
        items = body.get("input") or []  # optional: a `previous_response_id` or `prompt` call may send none
        if not isinstance(items, (str, list)):
            raise SimulatedError(400, f"input: expected str or list, got {type(items).__name__}", param="input")
        blocks = tool_blocks(body.get("tools"))
        instructions = body.get("instructions")
        if isinstance(instructions, list):
            for item in instructions:
                blocks += message_blocks(item, _TEXT_PARTS)
        elif instructions is not None:
            blocks += [RenderedBlock("<|instructions|>\n", boundary=False), *content_blocks(instructions, _TEXT_PARTS)]
        for item in [{"role": "user", "content": items}] if isinstance(items, str) else items:
            blocks += message_blocks(item, _TEXT_PARTS)
        params = DecodeParams(token_cap(body, "max_output_tokens"))
        return Job(model, RenderedPrompt.from_blocks(blocks), params, bool(body.get("stream")), body)

    def encoder(self, outcome: ServedJob) -> ResponsesEncoder:
        return ResponsesEncoder(outcome)


class ResponsesEncoder:
    def __init__(self, outcome: ServedJob) -> None:
        self._outcome = outcome
        self._id = new_id("resp_")
        self._item_id = new_id("msg_")
        self._created = now()
        self._sequence = 0
        self._incomplete = outcome.decoded.finish is Finish.LENGTH

    def _part(self, text: str) -> dict[str, Any]:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    def _item(self, done: bool) -> dict[str, Any]:
        status = ("incomplete" if self._incomplete else "completed") if done else "in_progress"
        content = [self._part(self._outcome.decoded.text)] if done else []
        return {"id": self._item_id, "type": "message", "role": "assistant", "status": status, "content": content}

    def _usage(self) -> dict[str, Any]:
        outcome = self._outcome
        return {
            "input_tokens": outcome.prompt_tokens,
            "input_tokens_details": {"cached_tokens": outcome.cache.read, "cache_write_tokens": outcome.cache.written},
            "output_tokens": outcome.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": outcome.prompt_tokens + outcome.output_tokens,
        }

    def _response(self, done: bool) -> dict[str, Any]:
        body = self._outcome.job.body
        status = ("incomplete" if self._incomplete else "completed") if done else "in_progress"
        return {
            "id": self._id,
            "object": "response",
            "created_at": self._created,
            "status": status,
            "completed_at": now() if done and not self._incomplete else None,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if done and self._incomplete else None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": self._outcome.job.model,
            "output": [self._item(done=True)] if done else [],
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": body.get("previous_response_id"),
            "prompt_cache_key": body.get("prompt_cache_key"),
            "temperature": body.get("temperature", 1.0),
            "text": {"format": {"type": "text"}},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools", []),
            "top_p": body.get("top_p", 1.0),
            "truncation": "disabled",
            "usage": self._usage() if done else None,
            "metadata": body.get("metadata", {}),
        }

    def complete(self) -> dict[str, Any]:
        return self._response(done=True)

    def _event(self, kind: str, **fields: Any) -> SseEvent:
        self._sequence += 1
        return SseEvent.of({"type": kind, "sequence_number": self._sequence - 1, **fields}, kind)

    def _at_part(self) -> dict[str, Any]:
        return {"item_id": self._item_id, "output_index": 0, "content_index": 0}

    def opening(self) -> list[SseEvent]:
        return [
            self._event("response.created", response=self._response(done=False)),
            self._event("response.in_progress", response=self._response(done=False)),
            self._event("response.output_item.added", output_index=0, item=self._item(done=False)),
            self._event("response.content_part.added", **self._at_part(), part=self._part("")),
        ]

    def token(self, text: str) -> list[SseEvent]:
        return [self._event("response.output_text.delta", **self._at_part(), delta=text, logprobs=[])]

    def closing(self) -> list[SseEvent]:
        text = self._outcome.decoded.text
        final = "response.incomplete" if self._incomplete else "response.completed"
        return [
            self._event("response.output_text.done", **self._at_part(), text=text, logprobs=[]),
            self._event("response.content_part.done", **self._at_part(), part=self._part(text)),
            self._event("response.output_item.done", output_index=0, item=self._item(done=True)),
            self._event(final, response=self._response(done=True)),
        ]
