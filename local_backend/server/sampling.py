"""A request's sampling fields, checked once, into the engine's `SamplingParams`, one per choice.

    body ──Sampling.parse──▶ Sampling ──.params(prompt_tokens, max_model_len)──▶ SamplingParams ──per_choice──▶ [n]

`Sampling.parse` (inside each endpoint's parser, `requests`) checks what the body alone decides:
the knobs' types (`fields.SAMPLING_KNOBS`), the temperature's range on that API, vLLM's range of
`repetition_penalty`. `params` checks what needs the prompt: a prompt of `max_model_len` tokens or
more is refused (no room to generate); `max_tokens` above `max_model_len` is refused (it could never
be met); a smaller one that does not fit after the prompt is honoured up to the context's end, with
finish reason `length` (llama.cpp's rule). Omitted, it is the room left: max_model_len − prompt_tokens.

`n > 1` is one engine request per choice, all on the same prompt (the later ones read the first's
prefix-cache blocks once they are written). A seeded request gives choice i the seed `seed + i`
(vLLM's rule), so its n choices differ from each other and each repeats on the next call; a greedy
one gives n equal choices, as it should.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from local_backend._constants import SEED_RANGE
from local_backend.sampling.sampling_params import LogitsProcessor, SamplingParams
from local_backend.server._constants import MAX_JSON_INTEGER, REPETITION_PENALTY_RANGE
from local_backend.server.constrained import Grammar
from local_backend.server.errors import ApiError
from local_backend.server.fields import SAMPLING_KNOBS, optional


@dataclass(frozen=True, slots=True)
class Sampling:
    """What a generating request asks of the sampler: its cap, its stops and the knobs it gave."""

    max_tokens: int | None
    max_tokens_param: str
    """The field `max_tokens` came from (`max_tokens`, `max_completion_tokens`, `max_output_tokens`)."""
    stop: tuple[str, ...]
    knobs: Mapping[str, Any] = field(default_factory=dict)
    """The `fields.SAMPLING_KNOBS` the request gave, by name; one left out takes the engine's default."""

    @classmethod
    def parse(
        cls,
        body: Mapping[str, Any],
        *,
        max_tokens: int | None,
        max_tokens_param: str,
        stop: tuple[str, ...],
        max_temperature: float,
    ) -> Sampling:
        """The knobs of `body` checked, with the cap and stops its endpoint read under its own names."""
        knobs = {
            name: optional(body, name, kind, largest=SEED_RANGE[1] if name == "seed" else MAX_JSON_INTEGER)
            for name, kind in SAMPLING_KNOBS.items()
        }
        temperature = knobs["temperature"]
        if temperature is not None and not 0 <= temperature <= max_temperature:
            raise ApiError(f"temperature={temperature} must be between 0 and {max_temperature}", param="temperature")
        low, high = REPETITION_PENALTY_RANGE
        penalty = knobs["repetition_penalty"]
        if penalty is not None and not low < penalty <= high:
            raise ApiError(
                f"repetition_penalty={penalty} must be in ({low}, {high}] (vLLM's range)", param="repetition_penalty"
            )
        return cls(max_tokens, max_tokens_param, stop, {name: v for name, v in knobs.items() if v is not None})

    def params(
        self, prompt_tokens: int, max_model_len: int, defaults: Mapping[str, Any] | None = None
    ) -> SamplingParams:
        """The engine's params for a prompt of `prompt_tokens`, after checking both fit the context;
        `defaults` (the engine's `sampling_defaults`, from `--generation-config`) fill what the request left out."""
        defaults = defaults or {}
        if prompt_tokens >= max_model_len:
            raise ApiError(
                f"the prompt has {prompt_tokens} tokens but this model's context is {max_model_len} tokens, "
                "leaving no room to generate: shorten the prompt",
                param="messages",
                code="context_length_exceeded",
            )
        max_tokens = self.max_tokens
        if max_tokens is None:
            max_tokens = min(max_model_len - prompt_tokens, defaults.get("max_tokens", max_model_len))
        elif not 1 <= max_tokens <= max_model_len:
            raise ApiError(
                f"{self.max_tokens_param}={max_tokens} must be between 1 and the model's context of "
                f"{max_model_len} tokens",
                param=self.max_tokens_param,
            )
        given = {name: value for name, value in defaults.items() if name != "max_tokens"}
        given.update(self.knobs)
        try:
            return SamplingParams(max_tokens=max_tokens, stop=self.stop, **given)
        except ValueError as exc:
            message = str(exc).replace("SamplingParams.", "")
            raise ApiError(message, param=message.split("=")[0]) from None


def per_choice(
    params: SamplingParams,
    n: int = 1,
    *,
    recorders: Sequence[LogitsProcessor] = (),
    bias: LogitsProcessor | None = None,
    grammar: Grammar | None = None,
) -> list[SamplingParams]:
    """The params of each of `n` choices: the seed moves by the choice's index, and each choice's
    logits processors run in order: its logprobs recorder (one per choice, to see the unmasked
    logits), the bias, its own copy of the grammar's matcher."""
    if params.seed is not None and n > 1 and params.seed + n - 1 > SEED_RANGE[1]:
        raise ApiError(
            f"seed={params.seed} leaves no room for n={n} seeds (seed + n - 1 <= {SEED_RANGE[1]})", param="seed"
        )
    return [
        dataclasses.replace(
            params,
            seed=params.seed + i if params.seed is not None and n > 1 else params.seed,
            logits_processor=chained(
                recorders[i] if recorders else None, bias, grammar.processor() if grammar is not None else None
            ),
        )
        for i in range(n)
    ]


class ProcessorChain:
    """Several logits processors in order."""

    def __init__(self, processors: Sequence[LogitsProcessor]):
        self._processors = processors

    def __call__(self, output_token_ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        for processor in self._processors:
            logits = processor(output_token_ids, logits)
        return logits


def chained(*processors: LogitsProcessor | None) -> LogitsProcessor | None:
    """The processors given, run in order (None: none given)."""
    present = [p for p in processors if p is not None]
    return None if not present else present[0] if len(present) == 1 else ProcessorChain(present)
