"""vLLM's penalties and llama.cpp's DRY: what a request's own tokens do to its next logits.

Penalties touch only a request's seen tokens (prompt ∪ output), kept incrementally per request in a
`PenaltyState` (host buffers, copied to the device once per step), so a step costs O(distinct seen
tokens), never a rebuild from its token list; DRY looks for repeats of the context's end with the
Z-algorithm.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence as Seq

from local_backend._constants import DRY_MAX_EXPONENT_LOG
from local_backend.sampling.sampling_params import SamplingParams


class PenaltyState:
    """One request's distinct seen tokens (prompt ∪ output), their output counts and offsets, in host buffers.

    `ids[i]` is a distinct id, `counts[i]` how often it appears in the output (0 for a prompt-only
    id) and `offsets[i]` = frequency × count + presence × [count > 0], what vLLM's two additive
    penalties take off its logit. All are `array`s, so `update` counts the tokens appended since
    the last call in O(new tokens) with no tensor write per token (each scalar tensor write pays
    torch's dispatch, which at large batches outweighs the penalties themselves), and a step
    gathers every row's entries with one copy per buffer (`Sampler._penalise`).
    """

    __slots__ = ("ids", "counts", "offsets", "_index", "_counted", "_frequency", "_presence")

    def __init__(self, prompt_token_ids: Seq[int], params: SamplingParams):
        prompt = sorted(set(prompt_token_ids))
        self.ids = array("q", prompt)
        self.counts = array("f", bytes(4 * len(prompt)))
        self.offsets = array("f", bytes(4 * len(prompt)))
        self._index = {token: i for i, token in enumerate(prompt)}
        self._counted = len(prompt_token_ids)
        self._frequency, self._presence = params.frequency_penalty, params.presence_penalty

    def update(self, token_ids: Seq[int]) -> None:
        """Count the output tokens of `token_ids` (the prompt, then the output so far) not yet counted."""
        self._count(token_ids[self._counted :])
        self._counted = len(token_ids)

    def ahead(self, drafts: Seq[int]) -> PenaltyState:
        """A copy that has also counted `drafts`: what a verification row sees after the drafts before it."""
        copy = PenaltyState.__new__(PenaltyState)
        copy.ids, copy.counts, copy.offsets = array("q", self.ids), array("f", self.counts), array("f", self.offsets)
        copy._index, copy._counted = dict(self._index), self._counted + len(drafts)
        copy._frequency, copy._presence = self._frequency, self._presence
        copy._count(drafts)
        return copy

    def _count(self, tokens: Seq[int]) -> None:
        index, ids, counts, offsets = self._index, self.ids, self.counts, self.offsets
        for token in tokens:
            i = index.get(token)
            if i is None:
                i = index[token] = len(ids)
                ids.append(token)
                counts.append(0.0)
                offsets.append(0.0)
            counts[i] += 1
            offsets[i] = self._frequency * counts[i] + self._presence


def dry_penalties(tokens: Seq[int], params: SamplingParams, breakers: frozenset[int]) -> dict[int, float]:
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
        token: params.dry_multiplier * params.dry_base ** min(n - params.dry_allowed_length, max_exp)
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
