"""OpenAI's `logit_bias`: a bias per token id, added to that token's logit at every step.

    logit_bias: {"42": 100, "7": -100}     token ids (as strings) to numbers in [−100, 100]

−100 all but bans a token and 100 all but forces it, as OpenAI documents; the bias is added to the
raw logits, so a request's logprobs recorder (which runs first) still sees them unbiased.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import torch

from local_backend.server.errors import ApiError
from local_backend.server.fields import short

BIAS_RANGE: Final = (-100, 100)
"""OpenAI's range of one token's bias."""
_TOKEN_ID: Final = re.compile(r"[0-9]{1,10}")
"""A key is ASCII digits, few enough for `int()` (`"²"` is a digit to `str.isdigit`, and 5,000 digits pass
Python's limit on converting a string to an int)."""


class LogitBias:
    """The logits processor of one request's `logit_bias`: each listed token's logit moves by its bias."""

    def __init__(self, bias: Mapping[int, float]):
        self._ids = torch.tensor(list(bias), dtype=torch.long)
        self._values = torch.tensor(list(bias.values()), dtype=torch.float32)

    @classmethod
    def parse(cls, value: Any, vocab_size: int) -> LogitBias | None:
        """The processor of a `logit_bias` object, or None when it is absent or empty; a 400 naming a bad entry."""
        if not value:
            return None
        if not isinstance(value, dict):
            raise ApiError("logit_bias must be an object of token ids to biases", param="logit_bias")
        low, high = BIAS_RANGE
        bias = {}
        for key, amount in value.items():
            if not (isinstance(key, str) and _TOKEN_ID.fullmatch(key) and int(key) < vocab_size):
                raise ApiError(f"logit_bias key {short(key)} is not a token id below {vocab_size}", param="logit_bias")
            if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not low <= amount <= high:
                raise ApiError(
                    f"logit_bias[{key!r}]={short(amount)} must be a number in [{low}, {high}]", param="logit_bias"
                )
            bias[int(key)] = float(amount)
        return cls(bias)

    def __call__(self, output_token_ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        return logits.index_add_(0, self._ids.to(logits.device), self._values.to(logits.device, logits.dtype))
