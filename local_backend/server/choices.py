"""`n > 1`: one engine request per choice, all on the same prompt (the later ones read the first's
prefix-cache blocks once they are written).

A seeded request gives choice i the seed `seed + i` (vLLM's rule), so its n choices differ from each
other and each repeats on the next call; a greedy one gives n equal choices, as it should.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from starlette.requests import Request

from local_backend._constants import SEED_RANGE
from local_backend.sampling_params import SamplingParams
from local_backend.server._constants import MAX_CHOICES
from local_backend.server.errors import ApiError
from local_backend.server.generation import Backend, Generation


def choice_count(n: int) -> int:
    if not 1 <= n <= MAX_CHOICES:
        raise ApiError(f"n={n} must be between 1 and {MAX_CHOICES}", param="n")
    return n


def per_choice(params: SamplingParams, n: int) -> list[SamplingParams]:
    """The params of each of `n` choices: the seed moves by the choice's index."""
    if params.seed is None or n == 1:
        return [params] * n
    if params.seed + n - 1 > SEED_RANGE[1]:
        raise ApiError(f"seed={params.seed} leaves no room for n={n} seeds (seed + n - 1 <= {SEED_RANGE[1]})",
                       param="seed")  # fmt: skip
    return [dataclasses.replace(params, seed=params.seed + i) for i in range(n)]


async def start_choices(
    backend: Backend, request: Request, token_ids: list[int], params: Sequence[SamplingParams]
) -> list[Generation]:
    """One generation per choice; if one is refused (a full queue), those started are closed first."""
    started: list[Generation] = []
    try:
        for choice in params:
            started.append(backend.start(request, token_ids, choice))
    except ApiError:
        for generation in started:
            await generation.aclose()
        raise
    return started
