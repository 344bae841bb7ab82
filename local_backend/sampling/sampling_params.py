"""Per-request decoding parameters, validated where they are made."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from local_backend._constants import DRY_DEFAULT_BREAKERS, SAMPLING_EPS, SEED_RANGE

if TYPE_CHECKING:
    import torch


class LogitsProcessor(Protocol):
    """A request's own step on its raw next-token logits (a grammar's mask, a logprobs recorder).

    Called once per sampled token, on the engine's thread, with the output so far and the row of
    logits (`[vocab]`, before penalties and temperature); returns the row to sample from (it may
    change it in place). It must not raise: an error fails the whole batch's step.
    """

    def __call__(self, output_token_ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor: ...


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How one request decodes; the defaults are greedy-free plain sampling with no penalties.

    - `temperature=0` is greedy (argmax after penalties); `top_k=None`, `top_p=1`, `min_p=0` disable
      their filters. `seed` makes the draws of this request repeat whatever shares its batch.
    - Penalties follow vLLM: `repetition_penalty` r over prompt and output tokens divides a positive
      logit by r and multiplies a negative one by r; over output tokens only,
      logit −= frequency_penalty × count + presence_penalty × [count > 0].
    - DRY follows llama.cpp: a token that would extend a repeat of n ≥ `dry_allowed_length` tokens
      loses `dry_multiplier` × `dry_base`^(n − `dry_allowed_length`); repeats never cross a token
      whose text contains a `dry_sequence_breakers` string; the last `dry_penalty_last_n` tokens
      are searched (None: the whole sequence). `dry_multiplier=0` (the default) turns it off.
    - `stop` strings end the text before them and are never partly streamed; `stop_token_ids` and
      (unless `ignore_eos`) the checkpoint's EOS ids end with `finish_reason="stop"`.
    - `logits_processor` runs first, on the raw logits (see `LogitsProcessor`).
    """

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = None
    min_p: float = 0.0
    seed: int | None = None
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int | None = None
    dry_sequence_breakers: tuple[str, ...] = DRY_DEFAULT_BREAKERS
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    logits_processor: LogitsProcessor | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop", _as_tuple(self.stop))
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        object.__setattr__(self, "dry_sequence_breakers", _as_tuple(self.dry_sequence_breakers))
        top_k, last_n, seed = self.top_k, self.dry_penalty_last_n, self.seed
        low, high = SEED_RANGE
        checks = [
            ("max_tokens", self.max_tokens >= 1, "must be >= 1"),
            ("temperature", self.temperature >= 0, "must be >= 0"),
            ("top_p", 0 < self.top_p <= 1, "must be in (0, 1]"),
            ("top_k", top_k is None or top_k >= 1, "must be >= 1 or None"),
            ("min_p", 0 <= self.min_p <= 1, "must be in [0, 1]"),
            ("seed", seed is None or low <= seed <= high, f"must be in [{low}, {high}] or None"),
            ("repetition_penalty", self.repetition_penalty >= SAMPLING_EPS, f"must be >= {SAMPLING_EPS}"),
            ("frequency_penalty", -2 <= self.frequency_penalty <= 2, "must be in [-2, 2]"),
            ("presence_penalty", -2 <= self.presence_penalty <= 2, "must be in [-2, 2]"),
            ("dry_multiplier", self.dry_multiplier >= 0, "must be >= 0"),
            ("dry_base", self.dry_base >= 1, "must be >= 1"),
            ("dry_allowed_length", self.dry_allowed_length >= 1, "must be >= 1"),
            ("dry_penalty_last_n", last_n is None or last_n >= 0, "must be >= 0 or None"),
            ("stop", all(isinstance(s, str) and s for s in self.stop), "must be non-empty strings"),
            (
                "stop_token_ids",
                all(isinstance(i, int) and i >= 0 for i in self.stop_token_ids),
                "must be token ids >= 0",
            ),
        ]
        for name, ok, rule in checks:
            if not ok:
                raise ValueError(f"SamplingParams.{name}={getattr(self, name)!r} {rule}")

    @property
    def greedy(self) -> bool:
        return self.temperature < SAMPLING_EPS

    @property
    def has_penalties(self) -> bool:
        return self.repetition_penalty != 1 or self.frequency_penalty != 0 or self.presence_penalty != 0


def _as_tuple(value: str | Iterable[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)
