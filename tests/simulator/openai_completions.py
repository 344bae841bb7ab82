"""`POST /v1/completions` (legacy text completions) in the wire format of openai 3.x (`Completion`).

A string `prompt` (a list of prompts or token ids is refused with a 400: the simulator serves one
prompt). Cap: `max_tokens`, 16 when absent, as the API defaults. Stream: one `text_completion`
chunk per token, a chunk with `finish_reason`, then with `stream_options.include_usage` a chunk with
`choices: []` and the usage (every other chunk then carries `usage: null`), then `data: [DONE]`.
"""

from __future__ import annotations

from typing import Any

from .constants import CHAT_MAX_STOP_SEQUENCES, LEGACY_DEFAULT_MAX_TOKENS
from .decode import DecodeParams, Finish
from .errors import Flavour, SimulatedError
from .openai_chat import SYSTEM_FINGERPRINT, chat_usage
from .tokens import RenderedBlock, RenderedPrompt
from .wire import Job, ServedJob, SseEvent, new_id, now, required, stop_list, token_cap

_FINISH = {Finish.END: "stop", Finish.STOP: "stop", Finish.LENGTH: "length"}


class CompletionsApi:
    path = "/v1/completions"
    flavour = Flavour.OPENAI

    def parse(self, body: dict[str, Any]) -> Job:
        model = required(body, "model", str)
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise SimulatedError(
                400, f"prompt: the simulator serves one string prompt, got {type(prompt).__name__}", param="prompt"
            )
        cap = token_cap(body, "max_tokens") or LEGACY_DEFAULT_MAX_TOKENS
        stops = stop_list(body, "stop", CHAT_MAX_STOP_SEQUENCES)
        return Job(
            model,
            RenderedPrompt.from_blocks([RenderedBlock(prompt)]),
            DecodeParams(cap, stops),
            bool(body.get("stream")),
            body,
        )

    def encoder(self, outcome: ServedJob) -> CompletionsEncoder:
        return CompletionsEncoder(outcome)


class CompletionsEncoder:
    def __init__(self, outcome: ServedJob) -> None:
        self._outcome = outcome
        self._id = new_id("cmpl-")
        self._created = now()
        self._include_usage = bool((outcome.job.body.get("stream_options") or {}).get("include_usage"))

    def _envelope(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self._id,
            "object": "text_completion",
            "created": self._created,
            "model": self._outcome.job.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": choices,
        }

    def _chunk(self, text: str, finish_reason: str | None = None) -> SseEvent:
        chunk = self._envelope([{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}])
        if self._include_usage:
            chunk["usage"] = None
        return SseEvent.of(chunk)

    def complete(self) -> dict[str, Any]:
        decoded = self._outcome.decoded
        choice = {"index": 0, "text": decoded.text, "logprobs": None, "finish_reason": _FINISH[decoded.finish]}
        return {**self._envelope([choice]), "usage": chat_usage(self._outcome)}

    def opening(self) -> list[SseEvent]:
        return []

    def token(self, text: str) -> list[SseEvent]:
        return [self._chunk(text)]

    def closing(self) -> list[SseEvent]:
        events = [self._chunk("", _FINISH[self._outcome.decoded.finish])]
        if self._include_usage:
            events.append(SseEvent.of({**self._envelope([]), "usage": chat_usage(self._outcome)}))
        return [*events, SseEvent("[DONE]")]
