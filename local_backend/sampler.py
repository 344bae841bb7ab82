"""Next tokens from logits: penalties, DRY, temperature, top-k/top-p/min-p, greedy or seeded draws.

The order is vLLM's: penalties on the raw logits, then (llama.cpp) DRY, then temperature, then the
filters, then a draw. Greedy rows (`temperature == 0`) take the argmax after penalties and DRY. A
draw is argmax(p / e) with e ~ Exp(1), i.e. an exact sample of p; a seeded request draws e from its
own generator, so its tokens do not depend on what else is in the batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from collections.abc import Sequence as Seq

import torch

from local_backend._constants import DRY_MAX_EXPONENT_LOG
from local_backend.sampling_params import SamplingParams
from local_backend.sequence import Sequence


def token_counts(rows: Seq[Seq[int]], vocab_size: int, device: torch.device) -> torch.Tensor:
    """`[len(rows), vocab_size]` counts of each token id per row."""
    width = max((len(r) for r in rows), default=0)
    padded = torch.full((len(rows), width), vocab_size, dtype=torch.long)
    for i, row in enumerate(rows):
        padded[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    counts = torch.zeros(len(rows), vocab_size + 1, dtype=torch.long)
    counts.scatter_add_(1, padded, torch.ones_like(padded))
    return counts[:, :vocab_size].to(device)


def apply_penalties(
    logits: torch.Tensor,
    prompt_counts: torch.Tensor,
    output_counts: torch.Tensor,
    repetition: torch.Tensor,
    frequency: torch.Tensor,
    presence: torch.Tensor,
) -> torch.Tensor:
    """vLLM penalties; `repetition`, `frequency`, `presence` are per row.

    seen = token in prompt or output: logit / r if logit > 0 else logit × r;
    then logit − frequency × output count − presence × [output count > 0].
    """
    in_output = output_counts > 0
    seen = in_output | (prompt_counts > 0)
    rep = torch.where(seen, repetition[:, None].to(logits.dtype), 1.0)
    logits = torch.where(logits > 0, logits / rep, logits * rep)
    return logits - frequency[:, None] * output_counts - presence[:, None] * in_output


def dry_penalties(
    tokens: Seq[int], params: SamplingParams, breakers: frozenset[int]
) -> dict[int, float]:
    """llama.cpp DRY: the penalty of each token that would extend a repeat of the context's end.

    For every earlier position, n = how many tokens before it match the context's last tokens
    (Z-algorithm on the reversed context, capped at the distance to the last breaker); the token
    that followed it gets multiplier × base^(n − allowed_length) when n ≥ allowed_length.
    """
    last_n = len(tokens) if params.dry_penalty_last_n is None else params.dry_penalty_last_n
    context = list(tokens[len(tokens) - min(last_n, len(tokens)) :])
    size = len(context)
    if size <= params.dry_allowed_length:
        return {}
    limit = next((i for i, t in enumerate(reversed(context)) if t in breakers), size)
    if limit < params.dry_allowed_length:
        return {}
    matches = _z_function(context[::-1])
    longest: dict[int, int] = {}
    for k in range(1, size):
        n = min(matches[k], limit)
        if n >= params.dry_allowed_length:
            token = context[size - k]
            longest[token] = max(longest.get(token, 0), n)
    max_exp = DRY_MAX_EXPONENT_LOG / math.log(params.dry_base) if params.dry_base > 1 else math.inf
    return {
        token: params.dry_multiplier
        * params.dry_base ** min(n - params.dry_allowed_length, max_exp)
        for token, n in longest.items()
        if token not in breakers
    }


def _z_function(s: list[int]) -> list[int]:
    """z[k] = length of the longest common prefix of s and s[k:] (z[0] = 0)."""
    z = [0] * len(s)
    left = right = 0
    for k in range(1, len(s)):
        if k < right:
            z[k] = min(right - k, z[k - left])
        while k + z[k] < len(s) and s[z[k]] == s[k + z[k]]:
            z[k] += 1
        if k + z[k] > right:
            left, right = k, k + z[k]
    return z


def filter_logits(
    logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor
) -> torch.Tensor:
    """Mask to −inf what the per-row filters drop.

    top-k keeps the k largest; top-p keeps the fewest most likely tokens whose probabilities sum
    to at least p; min-p keeps tokens with p ≥ min_p × max p.
    """
    ordered, order = logits.sort(dim=-1, descending=True)
    kth = ordered.gather(1, (top_k - 1).clamp(max=logits.shape[-1] - 1)[:, None])
    drop = ordered < kth
    probs = ordered.masked_fill(drop, -math.inf).softmax(dim=-1)
    drop |= (probs.cumsum(dim=-1) - probs >= top_p[:, None]) & (top_p[:, None] < 1)
    drop |= probs < min_p[:, None] * probs[:, :1]
    drop[:, 0] = False
    return logits.masked_fill(torch.zeros_like(drop).scatter_(1, order, drop), -math.inf)


class Sampler:
    """Turns one step's logits (one row per sampling sequence) into token ids.

    `breakers(strings)` maps DRY breaker strings to token ids (the engine resolves and caches them).
    """

    def __init__(self, vocab_size: int, breakers: Callable[[tuple[str, ...]], frozenset[int]]):
        self.vocab_size = vocab_size
        self.breakers = breakers

    def __call__(self, logits: torch.Tensor, seqs: Seq[Sequence]) -> list[int]:
        logits = logits.float()
        params = [s.params for s in seqs]
        if any(p.has_penalties for p in params):
            logits = self._penalise(logits, seqs)
        for i, seq in enumerate(seqs):
            if seq.params.dry_multiplier > 0:
                breakers = self.breakers(seq.params.dry_sequence_breakers)
                for token, penalty in dry_penalties(seq.token_ids, seq.params, breakers).items():
                    logits[i, token] -= penalty
        if all(p.greedy for p in params):
            return logits.argmax(dim=-1).tolist()
        return self._draw(logits, seqs)

    def _penalise(self, logits: torch.Tensor, seqs: Seq[Sequence]) -> torch.Tensor:
        device = logits.device
        per_row = _column(seqs, logits.device)
        return apply_penalties(
            logits,
            token_counts([s.prompt_token_ids for s in seqs], self.vocab_size, device),
            token_counts([s.output_token_ids for s in seqs], self.vocab_size, device),
            per_row(lambda p: p.repetition_penalty),
            per_row(lambda p: p.frequency_penalty),
            per_row(lambda p: p.presence_penalty),
        )

    def _draw(self, logits: torch.Tensor, seqs: Seq[Sequence]) -> list[int]:
        per_row = _column(seqs, logits.device)
        greedy = logits.argmax(dim=-1)
        temperature = per_row(lambda p: p.temperature if p.temperature > 0 else 1.0)
        logits = logits / temperature[:, None]
        if any(p.top_k or p.top_p < 1 or p.min_p > 0 for p in (s.params for s in seqs)):
            logits = filter_logits(
                logits,
                per_row(lambda p: min(p.top_k or self.vocab_size, self.vocab_size), torch.long),
                per_row(lambda p: p.top_p),
                per_row(lambda p: p.min_p),
            )
        probs = logits.softmax(dim=-1)
        noise = torch.empty_like(probs).exponential_()
        for i, seq in enumerate(seqs):
            if seq.params.seed is not None:
                if seq.generator is None:
                    seq.generator = torch.Generator(device=probs.device)
                    seq.generator.manual_seed(seq.params.seed)
                noise[i].exponential_(generator=seq.generator)
        drawn = (probs / noise).argmax(dim=-1)
        is_greedy = torch.tensor([s.params.greedy for s in seqs], device=logits.device)
        return torch.where(is_greedy, greedy, drawn).tolist()


def _column(
    seqs: Iterable[Sequence], device: torch.device
) -> Callable[..., torch.Tensor]:
    """A helper that gathers one parameter of every row into a tensor."""
    rows = [s.params for s in seqs]

    def per_row(get: Callable[[SamplingParams], float], dtype: torch.dtype = torch.float) -> torch.Tensor:
        return torch.tensor([get(p) for p in rows], dtype=dtype, device=device)

    return per_row
