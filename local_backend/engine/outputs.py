"""What the engine hands back: finished completions, stream deltas, pool statistics and step outputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FinishReason = Literal["stop", "length", "abort", "error"]
"""`stop`: EOS, a stop token or a stop string; `length`: max_tokens or max_model_len; `abort`: the
caller stopped it or the engine closed; `error`: the step that ran it failed (`Completion.error`)."""


@dataclass(frozen=True, slots=True)
class Timings:
    """Seconds spent waiting for a slot, computing the prompt, and decoding after the first token."""

    queue_s: float
    prefill_s: float
    decode_s: float


@dataclass(frozen=True, slots=True)
class Completion:
    """One finished request and how its prompt met the prefix cache.

    `cached_tokens` prompt tokens came from the prefix cache; `cache_written_tokens` prompt tokens
    are in full blocks this request added to it (a block another request named first is not
    counted), so cached_tokens + cache_written_tokens <= len(prompt_token_ids). `stop_string` is
    the stop string that ended the text, if one did; `error` says what failed when
    `finish_reason == "error"`. Under speculative decoding, `draft_tokens` drafts were proposed for
    it and `accepted_draft_tokens` of them kept (both 0 when it never speculated).
    """

    request_id: str
    prompt_token_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    text: str
    finish_reason: FinishReason
    cached_tokens: int
    cache_written_tokens: int
    stop_string: str | None
    timings: Timings
    error: str | None = None
    draft_tokens: int = 0
    accepted_draft_tokens: int = 0


@dataclass(frozen=True, slots=True)
class StreamDelta:
    """New text (and the tokens that made it) since the previous delta of a stream.

    The last delta of a request carries its `completion` (finish reason, usage, timings). The
    prompt's prefix-cache split (`cached_tokens`, `cache_written_tokens`, as in `Completion`) is
    final from the first delta on, since the whole prompt is computed before the first token.
    """

    text: str
    token_ids: tuple[int, ...]
    cached_tokens: int
    cache_written_tokens: int
    completion: Completion | None = None


@dataclass(frozen=True, slots=True)
class EngineStats:
    """A snapshot for `/metrics`: the block pool, the queues and cumulative token counts.

    kv_cache_bytes = num_blocks × block_size × kv_bytes_per_token. The `spec_decode_` counters are
    vLLM's: steps that verified drafts, drafts proposed, drafts accepted.
    """

    num_blocks: int
    max_num_seqs: int
    blocks_used: int
    blocks_free: int
    blocks_cached: int
    block_size: int
    kv_bytes_per_token: int
    kv_cache_bytes: int
    num_running: int
    num_waiting: int
    num_preemptions: int
    prompt_tokens: int
    prefix_cache_hit_tokens: int
    generation_tokens: int
    spec_decode_drafts: int = 0
    spec_decode_draft_tokens: int = 0
    spec_decode_accepted_tokens: int = 0
    dtype: str = "float32"
    """The dtype the model computes in, and why (`dtype_choice`): `--dtype auto`'s rule or "asked for"."""
    dtype_reason: str = ""
    quantization: str = "none"
    """The `quantization` asked for, and the block types kept (`CausalLM.quantized_types`, comma-separated; empty:
    every weight in `dtype`)."""
    quantized_types: str = ""


@dataclass(frozen=True, slots=True)
class StepOutput:
    """What one engine step did (vLLM's `EngineCoreOutputs`), handed out rather than read from the core.

    `new_token_ids` maps each request that sampled to its new tokens (one, or under speculation
    its accepted drafts and the token after them); `finished` lists, in order, the
    requests that ended since the previous step's output (in the step, or aborted between steps)
    with their finish reason; `stats` is the engine's snapshot after the step.
    """

    new_token_ids: dict[str, tuple[int, ...]]
    finished: tuple[tuple[str, FinishReason], ...]
    stats: EngineStats
