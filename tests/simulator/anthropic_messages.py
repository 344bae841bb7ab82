"""`POST /v1/messages` in the wire format of anthropic 2.x (`Message` and the raw stream events).

Stream (each with its `event:` line, which the client needs): `message_start` (usage with the input
side and `output_tokens: 1`), `content_block_start` (empty text block), `ping`, one
`content_block_delta` (`text_delta`) per token, `content_block_stop`, `message_delta`
(`stop_reason`, `stop_sequence`, cumulative usage), `message_stop`. Usage: `input_tokens` (only the
tokens after the last cached position), `cache_read_input_tokens`, `cache_creation_input_tokens`
(with the `cache_creation` 5m/1h split), `output_tokens`.

Checks like the real API: `max_tokens` is required (0 pre-warms the cache and decodes nothing) and,
with `thinking.type="enabled"`, greater than `thinking.budget_tokens` (itself at least 1024); at
most 4 `cache_control` breakpoints (tools, system blocks, message content blocks, plus the
top-level `cache_control`, which marks the last block), every 1h one before any 5m one;
`thinking` and `redacted_thinking` blocks carry only their own fields (they go back as the API
sent them: no `cache_control`). `diagnostics` is checked and answered (`Message.diagnostics`, in
the complete message and in `message_start`'s) as `diagnostics.Diagnoser` says.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from . import diagnostics
from .constants import ANTHROPIC_MAX_BREAKPOINTS, MIN_THINKING_BUDGET
from .decode import DecodeParams, Finish
from .errors import Flavour, SimulatedError
from .tokens import RenderedBlock, RenderedPrompt, content_blocks, marker_ttl, message_blocks, tool_blocks
from .wire import Job, ServedJob, SseEvent, new_id, required, stop_list, token_cap

_TEXT_PARTS = frozenset({"text"})
_THINKING_FIELDS = {"thinking": {"type", "thinking", "signature"}, "redacted_thinking": {"type", "data"}}
_STOP_REASON = {Finish.END: "end_turn", Finish.STOP: "stop_sequence", Finish.LENGTH: "max_tokens"}


class MessagesApi:
    path = "/v1/messages"
    flavour = Flavour.ANTHROPIC

    def __init__(self) -> None:
        self.diagnoser = diagnostics.Diagnoser()

    def parse(self, body: dict[str, Any]) -> Job:
        model = required(body, "model", str)
        diagnostics.check(body)
        messages = required(body, "messages", list)
        cap = token_cap(body, "max_tokens", minimum=0)
        if cap is None:
            raise SimulatedError(400, "max_tokens: Field required", param="max_tokens")
        _check_thinking(body.get("thinking"), cap)
        _check_thinking_blocks(messages)
        blocks = tool_blocks(body.get("tools"))
        if body.get("system") is not None:
            blocks += [RenderedBlock("<|system|>\n", boundary=False), *content_blocks(body["system"], _TEXT_PARTS)]
        for message in messages:
            blocks += message_blocks(message, _TEXT_PARTS)
        blocks = _with_top_level_marker(blocks, marker_ttl(body))
        found = sum(block.is_breakpoint for block in blocks)
        ttls = [block.ttl for block in blocks if block.ttl is not None]
        if "5m" in ttls and "1h" in ttls[ttls.index("5m") :]:
            raise SimulatedError(400, "A cache_control block with ttl='1h' must not come after one with ttl='5m'.")
        if found > ANTHROPIC_MAX_BREAKPOINTS:
            limit = ANTHROPIC_MAX_BREAKPOINTS
            raise SimulatedError(400, f"A maximum of {limit} blocks with cache_control may be provided. Found {found}.")
        params = DecodeParams(cap, stop_list(body, "stop_sequences", None))
        return Job(model, RenderedPrompt.from_blocks(blocks), params, bool(body.get("stream")), body)

    def encoder(self, outcome: ServedJob) -> MessagesEncoder:
        return MessagesEncoder(outcome)


def _check_thinking(thinking: object, max_tokens: int) -> None:
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
        return
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or budget < MIN_THINKING_BUDGET:
        raise SimulatedError(
            400, f"thinking.enabled.budget_tokens: Input should be greater than or equal to {MIN_THINKING_BUDGET}"
        )
    if max_tokens <= budget:
        raise SimulatedError(400, "`max_tokens` must be greater than `thinking.budget_tokens`.")


def _check_thinking_blocks(messages: list[Any]) -> None:
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        for j, part in enumerate(content if isinstance(content, list) else ()):
            kind = part.get("type") if isinstance(part, dict) else None
            extra = sorted(set(part) - _THINKING_FIELDS[kind]) if kind in _THINKING_FIELDS else []
            if extra:
                raise SimulatedError(400, f"messages.{i}.content.{j}.{kind}.{extra[0]}: Extra inputs are not permitted")


def _with_top_level_marker(blocks: list[RenderedBlock], ttl: str | None) -> list[RenderedBlock]:
    """The request's top-level `cache_control` puts a breakpoint on its last content block."""
    last = max((i for i, block in enumerate(blocks) if block.boundary), default=None)
    if ttl is None or last is None or blocks[last].is_breakpoint:
        return blocks
    return [*blocks[:last], replace(blocks[last], ttl=ttl), *blocks[last + 1 :]]


class MessagesEncoder:
    def __init__(self, outcome: ServedJob) -> None:
        self._outcome = outcome
        self._id = new_id("msg_")
        self._block = 0  # index of the content block being streamed
        self.diagnostics: dict[str, Any] | None = None  # the answer's, set by the server before encoding

    @property
    def message_id(self) -> str:
        return self._id

    def _stop_reason(self) -> str:
        return _STOP_REASON[self._outcome.decoded.finish]

    def _usage(self, output_tokens: int) -> dict[str, Any]:
        cache = self._outcome.cache
        return {
            "input_tokens": cache.uncached_tail,
            "cache_creation_input_tokens": cache.written,
            "cache_read_input_tokens": cache.read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": cache.written - cache.written_1h,
                "ephemeral_1h_input_tokens": cache.written_1h,
            },
            "output_tokens": output_tokens,
            "service_tier": "standard",
        }

    def _message(self, done: bool) -> dict[str, Any]:
        decoded = self._outcome.decoded
        return {
            "id": self._id,
            "type": "message",
            "role": "assistant",
            "model": self._outcome.job.model,
            "content": [{"type": "text", "text": decoded.text}] if done else [],
            "stop_reason": self._stop_reason() if done else None,
            "stop_sequence": decoded.stop_sequence if done else None,
            "usage": self._usage(self._outcome.output_tokens if done else 1),
            **({"diagnostics": self.diagnostics} if self.diagnostics is not None else {}),
        }

    def complete(self) -> dict[str, Any]:
        return self._message(done=True)

    def opening(self) -> list[SseEvent]:
        return [
            SseEvent.of({"type": "message_start", "message": self._message(done=False)}, "message_start"),
            SseEvent.of(
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                "content_block_start",
            ),
            SseEvent.of({"type": "ping"}, "ping"),
        ]

    def token(self, text: str) -> list[SseEvent]:
        delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}
        return [SseEvent.of(delta, "content_block_delta")]

    def closing(self) -> list[SseEvent]:
        decoded = self._outcome.decoded
        # message_delta's usage (MessageDeltaUsage) is cumulative but has no cache_creation split or tier
        full = self._usage(self._outcome.output_tokens)
        usage = {key: value for key, value in full.items() if key not in ("cache_creation", "service_tier")}
        delta = {"stop_reason": self._stop_reason(), "stop_sequence": decoded.stop_sequence}
        return [
            SseEvent.of({"type": "content_block_stop", "index": self._block}, "content_block_stop"),
            SseEvent.of({"type": "message_delta", "delta": delta, "usage": usage}, "message_delta"),
            SseEvent.of({"type": "message_stop"}, "message_stop"),
        ]
