"""Replies that are not plain text: a tool call, and thinking before the answer.

`ProviderSimulator.tool_call = "get_weather"` makes the reply (`sim.reply`, JSON text) the arguments
of one call of that tool, streamed token by token as each API streams arguments:
- Chat: a `tool_calls` delta with the call's id and name (arguments ""), then one `arguments` delta
  per token; finish reason `tool_calls`;
- Messages: a `tool_use` block (`input: {}`), then one `input_json_delta` per token; stop reason
  `tool_use`;
- Responses: `response.output_item.added` with a `function_call` item, one
  `response.function_call_arguments.delta` per token, `...arguments.done`, `output_item.done`.

`ProviderSimulator.thinking = "..."` streams those tokens before the reply: on Messages a `thinking`
block (index 0: `thinking_delta`s, then a `signature_delta`) before the answer's block (index 1);
on Chat `reasoning_content` deltas (as vLLM and DeepSeek send them). Responses ignores it.

The thinking tokens come first in the stream's token count, so `cut_stream_after(n)` can cut inside
them; `output_tokens` counts the reply's tokens only.
"""

from __future__ import annotations

import json
from typing import Any

from .anthropic_messages import MessagesEncoder
from .openai_chat import ChatEncoder
from .openai_responses import ResponsesEncoder
from .tokens import tokenize
from .wire import Encoder, ServedJob, SseEvent, new_id

SIGNATURE = "c2ltdWxhdGVkLXNpZ25hdHVyZQ=="
"""The `signature` of every simulated thinking block."""


def shaped_encoder(base: Encoder, outcome: ServedJob, tool: str | None, thinking: str) -> Encoder:
    """`base` (the API's own encoder) or, for a tool call or thinking, its shaped twin."""
    if tool is None and not thinking:
        return base
    if isinstance(base, ChatEncoder):
        return ShapedChatEncoder(outcome, tool, thinking)
    if isinstance(base, MessagesEncoder):
        return ShapedMessagesEncoder(outcome, tool, thinking)
    if isinstance(base, ResponsesEncoder) and tool is not None:
        return ToolCallResponsesEncoder(outcome, tool)
    return base


def thinking_tokens(thinking: str) -> tuple[str, ...]:
    return tuple(tokenize(thinking))


def stream_tokens(encoder: Encoder, thinking: str, reply: tuple[str, ...]) -> tuple[str, ...]:
    """The tokens a stream sends, one `encoder.token` call each: the thinking first where it is streamed."""
    if isinstance(encoder, (ShapedChatEncoder, ShapedMessagesEncoder)) and thinking:
        return (*thinking_tokens(thinking), *reply)
    return reply


class ShapedChatEncoder(ChatEncoder):
    def __init__(self, outcome: ServedJob, tool: str | None, thinking: str) -> None:
        super().__init__(outcome)
        self._tool = tool
        self._thinking_left = len(thinking_tokens(thinking))
        self._call_id = new_id("call_")
        self._call_started = False

    def _finish_reason(self) -> str:
        return "tool_calls" if self._tool is not None else super()._finish_reason()

    def _call(self, arguments: str) -> dict[str, Any]:
        return {"id": self._call_id, "type": "function", "function": {"name": self._tool, "arguments": arguments}}

    def complete(self) -> dict[str, Any]:
        body = super().complete()
        if self._tool is not None:
            choice = body["choices"][0]
            choice["message"].update(content=None, tool_calls=[self._call(self._outcome.decoded.text)])
        return body

    def token(self, text: str) -> list[SseEvent]:
        if self._thinking_left:
            self._thinking_left -= 1
            return [self._chunk({"reasoning_content": text})]
        if self._tool is None:
            return super().token(text)
        events = []
        if not self._call_started:
            self._call_started = True
            events.append(self._chunk({"tool_calls": [{"index": 0, **self._call("")}]}))
        events.append(self._chunk({"tool_calls": [{"index": 0, "function": {"arguments": text}}]}))
        return events


class ShapedMessagesEncoder(MessagesEncoder):
    def __init__(self, outcome: ServedJob, tool: str | None, thinking: str) -> None:
        super().__init__(outcome)
        self._tool = tool
        self._thinking = thinking
        self._thinking_left = len(thinking_tokens(thinking))
        self._tool_id = new_id("toolu_")

    def _stop_reason(self) -> str:
        return "tool_use" if self._tool is not None else super()._stop_reason()

    def _answer_block(self, done: bool) -> dict[str, Any]:
        text = self._outcome.decoded.text
        if self._tool is not None:
            return {
                "type": "tool_use",
                "id": self._tool_id,
                "name": self._tool,
                "input": json.loads(text) if done else {},
            }
        return {"type": "text", "text": text if done else ""}

    def _thinking_block(self, done: bool) -> dict[str, Any]:
        return {"type": "thinking", "thinking": self._thinking if done else "", "signature": SIGNATURE if done else ""}

    def complete(self) -> dict[str, Any]:
        body = super().complete()
        body["content"] = [*([self._thinking_block(True)] if self._thinking else []), self._answer_block(True)]
        return body

    def _start(self, index: int, block: dict[str, Any]) -> SseEvent:
        return SseEvent.of(
            {"type": "content_block_start", "index": index, "content_block": block}, "content_block_start"
        )

    def _delta(self, delta: dict[str, Any]) -> SseEvent:
        return SseEvent.of({"type": "content_block_delta", "index": self._block, "delta": delta}, "content_block_delta")

    def opening(self) -> list[SseEvent]:
        start, _, ping = super().opening()
        first = self._thinking_block(False) if self._thinking else self._answer_block(False)
        return [start, self._start(0, first), ping]

    def token(self, text: str) -> list[SseEvent]:
        if self._thinking_left:
            self._thinking_left -= 1
            return [self._delta({"type": "thinking_delta", "thinking": text})]
        events = []
        if self._thinking and self._block == 0:  # the thinking block ends, the answer's begins
            events.append(self._delta({"type": "signature_delta", "signature": SIGNATURE}))
            events.append(SseEvent.of({"type": "content_block_stop", "index": 0}, "content_block_stop"))
            self._block = 1
            events.append(self._start(1, self._answer_block(False)))
        if self._tool is not None:
            events.append(self._delta({"type": "input_json_delta", "partial_json": text}))
        else:
            events.append(self._delta({"type": "text_delta", "text": text}))
        return events


class ToolCallResponsesEncoder(ResponsesEncoder):
    def __init__(self, outcome: ServedJob, tool: str) -> None:
        super().__init__(outcome)
        self._tool = tool
        self._call_id = new_id("call_")

    def _item(self, done: bool) -> dict[str, Any]:
        status = "completed" if done else "in_progress"
        arguments = self._outcome.decoded.text if done else ""
        return {
            "id": self._item_id,
            "type": "function_call",
            "call_id": self._call_id,
            "name": self._tool,
            "arguments": arguments,
            "status": status,
        }

    def opening(self) -> list[SseEvent]:
        return [
            self._event("response.created", response=self._response(done=False)),
            self._event("response.in_progress", response=self._response(done=False)),
            self._event("response.output_item.added", output_index=0, item=self._item(done=False)),
        ]

    def token(self, text: str) -> list[SseEvent]:
        return [
            self._event("response.function_call_arguments.delta", item_id=self._item_id, output_index=0, delta=text)
        ]

    def closing(self) -> list[SseEvent]:
        final = "response.incomplete" if self._incomplete else "response.completed"
        arguments = self._outcome.decoded.text
        return [
            self._event(
                "response.function_call_arguments.done",
                item_id=self._item_id,
                output_index=0,
                arguments=arguments,
                name=self._tool,
            ),
            self._event("response.output_item.done", output_index=0, item=self._item(done=True)),
            self._event(final, response=self._response(done=True)),
        ]
