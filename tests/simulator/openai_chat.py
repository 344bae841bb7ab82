"""`POST /v1/chat/completions` in the wire format of openai 3.x (`ChatCompletion`, `ChatCompletionChunk`).

Stream: a role chunk, one chunk per token, a chunk with `finish_reason` and an empty delta, then,
with `stream_options.include_usage`, a chunk with `choices: []` and the usage (every other chunk then
carries `usage: null`; with vLLM's `stream_options.continuous_usage_stats` as well, every chunk
carries the usage so far instead), then `data: [DONE]`. Usage: `prompt_tokens` (cached included),
`prompt_tokens_details.cached_tokens` / `cache_write_tokens`, `completion_tokens`.
"""

from __future__ import annotations

from typing import Any

from .constants import CHAT_MAX_STOP_SEQUENCES
from .decode import DecodeParams, Finish
from .errors import Flavour
from .tokens import RenderedPrompt, message_blocks, tool_blocks
from .wire import Job, ServedJob, SseEvent, new_id, now, required, stop_list, token_cap

_TEXT_PARTS = frozenset({"text"})
_FINISH = {Finish.END: "stop", Finish.STOP: "stop", Finish.LENGTH: "length"}
SYSTEM_FINGERPRINT = "fp_simulator"


class ChatCompletionsApi:
    path = "/v1/chat/completions"
    flavour = Flavour.OPENAI

    def parse(self, body: dict[str, Any]) -> Job:
        model = required(body, "model", str)
        messages = required(body, "messages", list)
        blocks = tool_blocks(body.get("tools"))
        for message in messages:
            blocks += message_blocks(message, _TEXT_PARTS)
        cap = token_cap(body, "max_completion_tokens", "max_tokens")
        stops = stop_list(body, "stop", CHAT_MAX_STOP_SEQUENCES)
        return Job(model, RenderedPrompt.from_blocks(blocks), DecodeParams(cap, stops), bool(body.get("stream")), body)

    def encoder(self, outcome: ServedJob) -> ChatEncoder:
        return ChatEncoder(outcome)


def chat_usage(outcome: ServedJob, completion_tokens: int | None = None) -> dict[str, Any]:
    """The answer's usage; `completion_tokens` (default: all) counts the tokens sent so far."""
    completion = outcome.output_tokens if completion_tokens is None else completion_tokens
    return {
        "prompt_tokens": outcome.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": outcome.prompt_tokens + completion,
        "prompt_tokens_details": {
            "cached_tokens": outcome.cache.read,
            "cache_write_tokens": outcome.cache.written,
            "audio_tokens": 0,
        },
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


class ChatEncoder:
    def __init__(self, outcome: ServedJob) -> None:
        self._outcome = outcome
        self._id = new_id("chatcmpl-")
        self._created = now()
        options = outcome.job.body.get("stream_options") or {}
        self._include_usage = bool(options.get("include_usage"))
        self._continuous_usage = self._include_usage and bool(options.get("continuous_usage_stats"))
        self._sent = 0  # chunks of output so far (for continuous usage)

    def _envelope(self, obj: str) -> dict[str, Any]:
        return {
            "id": self._id,
            "object": obj,
            "created": self._created,
            "model": self._outcome.job.model,
            "service_tier": "default",
            "system_fingerprint": SYSTEM_FINGERPRINT,
        }

    def _finish_reason(self) -> str:
        return _FINISH[self._outcome.decoded.finish]

    def complete(self) -> dict[str, Any]:
        decoded = self._outcome.decoded
        message: dict[str, Any] = {"role": "assistant", "content": decoded.text, "refusal": None, "annotations": []}
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": self._finish_reason()}
        return {**self._envelope("chat.completion"), "choices": [choice], "usage": chat_usage(self._outcome)}

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> SseEvent:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        chunk = {**self._envelope("chat.completion.chunk"), "choices": [choice]}
        if delta and "role" not in delta:
            self._sent += 1
        if self._include_usage:
            chunk["usage"] = chat_usage(self._outcome, self._sent) if self._continuous_usage else None
        return SseEvent.of(chunk)

    def opening(self) -> list[SseEvent]:
        return [self._chunk({"role": "assistant", "content": "", "refusal": None})]

    def token(self, text: str) -> list[SseEvent]:
        return [self._chunk({"content": text})]

    def closing(self) -> list[SseEvent]:
        events = [self._chunk({}, self._finish_reason())]
        if self._include_usage:
            usage_chunk = {**self._envelope("chat.completion.chunk"), "choices": [], "usage": chat_usage(self._outcome)}
            events.append(SseEvent.of(usage_chunk))
        return [*events, SseEvent("[DONE]")]
