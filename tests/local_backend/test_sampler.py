"""Logit processors against hand-computed values, and draws that depend only on their own seed."""

from __future__ import annotations

import math

import pytest
import torch

from local_backend.sampler import Sampler, apply_penalties, dry_penalties, filter_logits, token_counts
from local_backend.sampling_params import SamplingParams
from local_backend.sequence import Sequence

NO_BREAKERS: frozenset[int] = frozenset()


def test_token_counts_counts_each_id_per_row():
    counts = token_counts([[1, 2, 2], []], vocab_size=4, device=torch.device("cpu"))
    assert counts.tolist() == [[0, 1, 2, 0], [0, 0, 0, 0]]


def test_penalties_follow_vllm_semantics():
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0]])
    cpu = torch.device("cpu")
    out = apply_penalties(
        logits,
        prompt_counts=token_counts([[0]], 4, cpu),
        output_counts=token_counts([[1, 2, 2]], 4, cpu),
        repetition=torch.tensor([2.0]),
        frequency=torch.tensor([0.5]),
        presence=torch.tensor([0.25]),
    )
    # token 0: prompt only, 2/2; token 1: -1×2 −0.5×1 −0.25; token 2: 0.5/2 −0.5×2 −0.25; token 3 unseen
    assert out.tolist() == [[1.0, -2.75, -1.0, 3.0]]


PROBS = [0.5, 0.3, 0.15, 0.05]


@pytest.mark.parametrize(
    ("top_k", "top_p", "min_p", "kept"),
    [
        (4, 1.0, 0.0, [0, 1, 2, 3]),
        (2, 1.0, 0.0, [0, 1]),
        (4, 0.6, 0.0, [0, 1]),
        (4, 0.45, 0.0, [0]),
        (4, 0.9, 0.0, [0, 1, 2]),
        (4, 1.0, 0.5, [0, 1]),
        (4, 1.0, 0.7, [0]),
        (1, 1.0, 0.0, [0]),
    ],
)
def test_filters_keep_the_hand_computed_tokens(top_k, top_p, min_p, kept):
    logits = torch.tensor([PROBS, PROBS[::-1]]).log()
    out = filter_logits(logits, torch.tensor([top_k] * 2), torch.tensor([top_p] * 2), torch.tensor([min_p] * 2))
    assert torch.isfinite(out[0]).nonzero().flatten().tolist() == kept
    assert torch.isfinite(out[1]).nonzero().flatten().tolist() == sorted(3 - i for i in kept)


def test_dry_penalises_the_token_that_would_extend_a_repeat():
    params = SamplingParams(dry_multiplier=1.0, dry_base=2.0, dry_allowed_length=2)
    # "1 2 3" repeats; it was followed by 4, so 4 would extend a repeat of length 3: 1 × 2^(3−2)
    assert dry_penalties([1, 2, 3, 4, 1, 2, 3], params, NO_BREAKERS) == {4: 2.0}


def test_dry_allowed_length_sets_the_exponent_origin():
    params = SamplingParams(dry_multiplier=0.5, dry_base=2.0, dry_allowed_length=3)
    assert dry_penalties([1, 2, 3, 4, 1, 2, 3], params, NO_BREAKERS) == {4: 0.5}


def test_dry_repeats_do_not_cross_a_sequence_breaker():
    params = SamplingParams(dry_multiplier=1.0, dry_base=2.0, dry_allowed_length=2)
    assert dry_penalties([1, 2, 3, 4, 1, 2, 3], params, frozenset({2})) == {}


def test_dry_only_looks_at_the_last_n_tokens():
    params = SamplingParams(dry_multiplier=1.0, dry_allowed_length=2, dry_penalty_last_n=4)
    assert dry_penalties([1, 2, 3, 4, 1, 2, 3], params, NO_BREAKERS) == {}


def test_dry_exponent_is_clamped_so_the_penalty_stays_finite():
    params = SamplingParams(dry_multiplier=1.0, dry_base=1000.0, dry_allowed_length=1)
    penalties = dry_penalties([5] * 200, params, NO_BREAKERS)
    assert math.isfinite(penalties[5])


def _seq(name: str, params: SamplingParams) -> Sequence:
    return Sequence(name, [1, 2, 3], params)


def _sampler() -> Sampler:
    return Sampler(vocab_size=50, breakers=lambda _: NO_BREAKERS)


def test_greedy_rows_take_the_argmax_after_penalties():
    logits = torch.tensor([[1.0, 3.0, 2.9] + [0.0] * 47])
    seq = _seq("a", SamplingParams(temperature=0))
    assert _sampler()(logits, [seq]) == [1]
    seq.token_ids.append(1)  # token 1 is now in the output: presence 0.5 lets token 2 win
    penalised = _seq("b", SamplingParams(temperature=0, presence_penalty=0.5))
    penalised.token_ids.append(1)
    assert _sampler()(logits, [penalised]) == [2]


def test_a_seeded_row_draws_the_same_tokens_alone_or_in_a_batch():
    torch.manual_seed(0)
    logits = torch.randn(3, 50)
    params = SamplingParams(seed=77, temperature=0.8)
    alone, batched = _seq("alone", params), _seq("batched", params)
    others = [_seq("x", SamplingParams()), _seq("y", SamplingParams(seed=1))]
    sampler = _sampler()
    draws_alone = [sampler(logits[:1], [alone])[0] for _ in range(20)]
    batch = logits[[1, 0, 2]]
    draws_batched = [sampler(batch, [others[0], batched, others[1]])[1] for _ in range(20)]
    assert draws_alone == draws_batched
    assert len(set(draws_alone)) > 1


def test_draws_follow_the_distribution():
    torch.manual_seed(0)
    logits = torch.tensor([[0.0, math.log(3.0)] + [-math.inf] * 48])
    seq = _seq("a", SamplingParams(temperature=1.0))
    draws = [_sampler()(logits, [seq])[0] for _ in range(2000)]
    assert 0.7 < draws.count(1) / len(draws) < 0.8
