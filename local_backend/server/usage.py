"""Token accounting and llama.cpp-style `timings` of one finished request, for both wire formats.

    prompt_tokens = cache_read + cache_write + uncached
    cache_read    = prompt tokens whose KV came from the prefix cache (`cached_tokens`)
    cache_write   = prompt tokens in full blocks this request added to it (`cache_written_tokens`)

Both counts are exact and known from a stream's first delta on (the prompt is computed before the
first token), so Anthropic's `message_start` already carries the final split. A block that two
concurrent requests compute is written by the one that names it first; the other counts it as
uncached.
"""

from __future__ import annotations

from dataclasses import dataclass

from local_backend.engine.outputs import Completion, StreamDelta

_MS_PER_S = 1000.0


@dataclass(frozen=True, slots=True)
class RequestUsage:
    prompt_tokens: int
    output_tokens: int
    cache_read: int
    cache_write: int

    @classmethod
    def of(cls, completion: Completion) -> RequestUsage:
        return cls(
            prompt_tokens=len(completion.prompt_token_ids),
            output_tokens=len(completion.token_ids),
            cache_read=completion.cached_tokens,
            cache_write=completion.cache_written_tokens,
        )

    @classmethod
    def at_start(cls, prompt_tokens: int, first: StreamDelta) -> RequestUsage:
        """The usage a stream can report at its first delta: no output yet, the prompt's final split."""
        return cls(prompt_tokens, 0, first.cached_tokens, first.cache_written_tokens)

    @property
    def uncached(self) -> int:
        """Prompt tokens neither read from nor written to the cache (Anthropic's `input_tokens`)."""
        return self.prompt_tokens - self.cache_read - self.cache_write


def timings(completion: Completion) -> dict[str, float]:
    """llama.cpp's `timings`: prompt_n excludes the cached tokens (cache_n); rates are tokens per second.

    prompt_ms runs from scheduling to the first sampled token; predicted_ms from there to the end.
    Where speculation ran, llama.cpp's draft_n (drafts proposed) and draft_n_accepted (kept), and
    draft_acceptance_rate = draft_n_accepted ÷ draft_n.
    """
    t = completion.timings
    prompt_n = len(completion.prompt_token_ids) - completion.cached_tokens
    predicted_n = len(completion.token_ids)
    prompt_ms, predicted_ms = t.prefill_s * _MS_PER_S, t.decode_s * _MS_PER_S
    return {
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_second": _rate(prompt_n, prompt_ms),
        "predicted_n": predicted_n,
        "predicted_ms": predicted_ms,
        "predicted_per_second": _rate(predicted_n, predicted_ms),
        "cache_n": completion.cached_tokens,
        "queue_ms": t.queue_s * _MS_PER_S,
    } | _drafts(completion)


def _drafts(completion: Completion) -> dict[str, float]:
    if not completion.draft_tokens:
        return {}
    accepted = completion.accepted_draft_tokens
    return {
        "draft_n": completion.draft_tokens,
        "draft_n_accepted": accepted,
        "draft_acceptance_rate": accepted / completion.draft_tokens,
    }


def _rate(tokens: int, ms: float) -> float:
    return tokens * _MS_PER_S / ms if ms > 0 else 0.0
