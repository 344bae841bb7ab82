"""Logit processors against hand-computed values, and draws that depend only on their own seed."""

from __future__ import annotations

import math

import pytest
import torch

from local_backend.engine.sequence import Sequence
from local_backend.kernels import cpu_kernels, ops
from local_backend.kernels.ops import apply_penalties, chunk_sums, draw, heavier_mass
from local_backend.sampling.penalties import PenaltyState, dry_penalties
from local_backend.sampling.sampler import Sampler, keep_thresholds
from local_backend.sampling.sampling_params import SamplingParams

NO_BREAKERS: frozenset[int] = frozenset()


def cpu_ops() -> ops.TorchOps:
    """The ops an engine on CPU gives its sampler: the native ones when the kernels build."""
    return ops.select(torch.device("cpu"), torch.float32, 64)


def test_penalty_state_keeps_distinct_seen_tokens_and_output_counts_as_tokens_arrive():
    tokens = [3, 1, 3]
    state = PenaltyState(tokens, SamplingParams())
    tokens.extend([1, 2, 2])
    state.update(tokens)
    tokens.extend([*range(10, 80), 2])
    state.update(tokens)
    seen = dict(zip(state.ids.tolist(), state.counts.tolist(), strict=True))
    assert seen == {1: 1.0, 2: 3.0, 3: 0.0} | {t: 1.0 for t in range(10, 80)}


def test_penalty_offsets_are_frequency_times_count_plus_presence_for_output_tokens_only():
    tokens = [3, 1, 3]
    state = PenaltyState(tokens, SamplingParams(frequency_penalty=0.5, presence_penalty=0.25))
    tokens.extend([1, 2, 2])
    state.update(tokens)
    assert dict(zip(state.ids.tolist(), state.offsets.tolist(), strict=True)) == {1: 0.75, 2: 1.25, 3: 0.0}


def test_penalties_follow_vllm_semantics():
    # seen tokens 0 (prompt only), 1 and 2 (output once and twice), frequency 0.5, presence 0.25
    values, offsets = torch.tensor([2.0, -1.0, 0.5]), torch.tensor([0.0, 0.5 * 1 + 0.25, 0.5 * 2 + 0.25])
    out = apply_penalties(values, offsets, torch.tensor(2.0))
    # token 0: 2/2; token 1: -1×2 −0.5×1 −0.25; token 2: 0.5/2 −0.5×2 −0.25
    assert out.tolist() == [1.0, -2.75, -1.0]


def test_sampler_penalises_only_the_seen_tokens_of_each_row():
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0], [2.0, -1.0, 0.5, 3.0]])
    penalised = Sequence("p", [0], SamplingParams(repetition_penalty=2.0, frequency_penalty=0.5, presence_penalty=0.25))
    penalised.token_ids.extend([1, 2, 2])
    plain = Sequence("q", [0], SamplingParams())
    out = Sampler(4, lambda _: NO_BREAKERS, cpu_ops()).adjusted_logits(logits, [penalised, plain])
    assert out.tolist() == [[1.0, -2.75, -1.0, 3.0], [2.0, -1.0, 0.5, 3.0]]


def test_penalised_rows_with_different_params_and_lengths_each_get_their_own_penalties():
    torch.manual_seed(0)
    logits = torch.randn(3, 8) * 2
    short = Sequence("s", [0], SamplingParams(repetition_penalty=1.5, presence_penalty=1.0))
    short.token_ids.append(5)
    long = Sequence("l", [1, 2, 3, 4], SamplingParams(repetition_penalty=3.0, frequency_penalty=0.5))
    long.token_ids.extend([6, 6, 2])
    plain = Sequence("p", [7], SamplingParams())
    out = Sampler(8, lambda _: NO_BREAKERS, cpu_ops()).adjusted_logits(logits.clone(), [short, plain, long])
    expected = logits.clone()
    for row, repetition, seen in ((0, 1.5, {0: 0.0, 5: 1.0}), (2, 3.0, {1: 0, 2: 0.5, 3: 0, 4: 0, 6: 1.0})):
        for token, offset in seen.items():
            value = expected[row, token].item()
            expected[row, token] = (value / repetition if value > 0 else value * repetition) - offset
    assert torch.allclose(out, expected) and torch.equal(out[1], logits[1])


def test_penalties_apply_before_temperature():
    # vLLM's order: (logit − frequency × count) / T, not logit / T − frequency × count
    seq = Sequence("r", [0], SamplingParams(temperature=0.5, frequency_penalty=1.0))
    seq.token_ids.append(1)
    sampler = Sampler(2, lambda _: NO_BREAKERS, cpu_ops())
    w, _ = sampler.weights(sampler.adjusted_logits(torch.zeros(1, 2), [seq]), [seq.params])
    probs = (w / w.sum()).flatten().tolist()
    assert probs == pytest.approx([1 / (1 + math.exp(-2.0)), math.exp(-2.0) / (1 + math.exp(-2.0))])


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
        (2, 0.7, 0.0, [0, 1]),  # top-p over what top-k kept: 0.5 / 0.8 < 0.7
        (3, 0.6, 0.0, [0, 1]),
    ],
)
def test_filters_keep_the_hand_computed_tokens(top_k, top_p, min_p, kept):
    w = torch.tensor([PROBS, PROBS[::-1]]) / max(PROBS)
    threshold = keep_thresholds(w, torch.tensor([top_k] * 2), torch.tensor([top_p] * 2), torch.tensor([min_p] * 2))
    assert (w[0] >= threshold[0]).nonzero().flatten().tolist() == kept
    assert (w[1] >= threshold[1]).nonzero().flatten().tolist() == sorted(3 - i for i in kept)


def test_filters_find_a_wide_nucleus_below_the_first_candidate_cutoff():
    torch.manual_seed(0)
    logits = torch.randn(3, 5000) * 0.5  # nearly flat: the nucleus is most of the vocabulary
    w = (logits - logits.amax(-1, keepdim=True)).exp()
    threshold = keep_thresholds(w, torch.tensor([5000, 5000, 40]), torch.tensor([0.9, 0.5, 0.9]), torch.zeros(3))
    for row, p in ((0, 0.9), (1, 0.5)):
        ordered = w[row].sort(descending=True).values / w[row].sum()
        kept = int(((ordered.cumsum(0) - ordered) < p).sum())
        assert int((w[row] >= threshold[row]).sum()) == kept
    top40 = w[2].topk(40).values
    ordered = top40 / top40.sum()
    assert int((w[2] >= threshold[2]).sum()) == int(((ordered.cumsum(0) - ordered) < 0.9).sum())


def test_draw_by_inverse_cdf_follows_the_weights_across_chunks():
    torch.manual_seed(0)
    w = torch.zeros(1, 1000)
    w[0, [3, 700, 999]] = torch.tensor([1.0, 2.0, 1.0])  # in different chunks, one in the tail
    tokens = torch.cat([draw(w, torch.rand(1, dtype=torch.float64)) for _ in range(4000)]).tolist()
    assert set(tokens) == {3, 700, 999}
    assert 0.45 < tokens.count(700) / len(tokens) < 0.55
    edge = draw(w, torch.tensor([0.0, 1.0 - 2**-53], dtype=torch.float64).view(2)[:1].expand(1))
    assert edge.tolist() == [3]


@pytest.mark.parametrize("fused", [False, True], ids=["torch", "native"])
def test_the_mass_above_a_drawn_token_counts_only_strictly_heavier_tokens(fused):
    w = torch.tensor([[0.5, 1.0, 0.25, 0.5], [1.0, 0.125, 0.25, 0.0], [1.0, 1.0, 0.5, 0.5]]).repeat(1, 5)
    chosen = torch.tensor([[0.5], [1.0], [0.25]])  # a tie with another token; the top token; a light one
    if fused:
        assert cpu_kernels.load()
        mass = torch.ops.kvwise.heavier_mass(w, chosen[:, 0].contiguous())  # 20 columns: vector lanes and a tail
    else:
        mass = heavier_mass(w, chosen, torch.empty_like(w))
    assert mass.tolist() == pytest.approx([5.0, 0.0, 15.0], rel=1e-6)


@pytest.mark.parametrize("vocab", [7, 256, 1000, 4096])
def test_native_tempered_weights_equal_the_torch_passes_with_their_chunk_sums(vocab):
    assert cpu_kernels.load()
    logits = torch.randn(5, vocab, generator=torch.Generator().manual_seed(vocab)) * 4
    params = [SamplingParams(temperature=t) for t in (0.3, 0.7, 1.0, 1.9, 0.0)]
    torch_pass, native = (
        Sampler(vocab, lambda _: NO_BREAKERS, ops.TORCH),
        Sampler(vocab, lambda _: NO_BREAKERS, cpu_ops()),
    )
    w, sums = torch_pass.weights(logits.clone(), params)
    w_native, sums_native = native.weights(logits.clone(), params)
    torch.testing.assert_close(w_native, w, rtol=2e-6, atol=0)
    assert sums.shape[1] >= sums_native.shape[1] == -(-vocab // 256)  # torch's may end in an empty chunk
    torch.testing.assert_close(sums_native, sums[:, : sums_native.shape[1]], rtol=1e-5, atol=0)


@pytest.mark.parametrize("vocab", [5, 256, 1000, 4096])
def test_the_native_draw_takes_the_torch_draws_steps_to_the_same_tokens(vocab):
    assert cpu_kernels.load()
    gen = torch.Generator().manual_seed(vocab)
    w = torch.rand(6, vocab, generator=gen)
    w[1, vocab // 2 :] = 0  # a row whose last chunks weigh nothing (top-k masked)
    w[2] = 0
    w[2, vocab - 1] = 1.0  # all the weight on the last token
    sums = chunk_sums(w)
    uniforms = torch.tensor([0.0, 0.3, 0.5, 0.999, 1.0 - 2**-53, 0.7], dtype=torch.float64)
    native = torch.ops.kvwise.draw(w, sums[:, : -(-vocab // 256)].contiguous(), uniforms, 256)
    assert native.tolist() == draw(w, uniforms, sums).tolist()
    assert native[2] == vocab - 1 and native[1] < vocab // 2


@pytest.mark.parametrize("vocab", [1, 7, 16, 49152, 49157])
def test_the_native_argmax_gives_torch_s_first_index_of_the_largest_logit(vocab):
    assert cpu_kernels.load()
    logits = torch.randn(7, vocab, generator=torch.Generator().manual_seed(vocab)) * 4
    logits[1] = float("-inf")  # every token masked: index 0, as torch gives it
    logits[2, vocab // 3] = logits[2, vocab - 1] = 99.0  # a tie: the first one
    logits[3, -1] = 99.0  # the largest in the last lane or the tail past the vectors
    logits[4, vocab // 2] = float("nan")  # a NaN counts as the largest, as in torch
    logits[5, 0] = 99.0
    logits[6, : vocab // 2] = 50.0  # the largest repeated across many vectors: the first
    native = torch.ops.kvwise.argmax_rows(logits)
    assert native.dtype == torch.int64
    assert native.tolist() == logits.argmax(dim=-1).tolist()
    strided = logits[:, ::2]  # not contiguous past one column: the sampler's op takes torch's form
    assert cpu_ops().argmax(strided).tolist() == strided.argmax(dim=-1).tolist()


def test_native_penalties_equal_the_torch_ones_and_refuse_an_index_out_of_range():
    assert cpu_kernels.load()
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0], [0.0, -2.0, 1.0, 4.0]])
    index, offsets = torch.tensor([0, 1, 2, 5, 7]), torch.tensor([0.0, 0.75, 1.25, 0.5, 0.0])
    repetition = torch.full((5,), 2.0)
    expected = logits.clone().view(-1)
    expected[index] = apply_penalties(expected[index].clone(), offsets, repetition)
    torch.ops.kvwise.apply_penalties_(logits, index, offsets, repetition)
    assert logits.view(-1).tolist() == expected.tolist()
    with pytest.raises(RuntimeError, match="index out of range"):
        torch.ops.kvwise.apply_penalties_(logits, torch.tensor([8]), offsets[:1], repetition[:1])


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0.8, seed=1),
        SamplingParams(temperature=1.2, top_p=0.5, seed=2),
        SamplingParams(temperature=0.9, min_p=0.2, seed=3),
        SamplingParams(temperature=0.7, top_k=40, top_p=0.9, seed=4),
        SamplingParams(temperature=1.0, repetition_penalty=1.3, frequency_penalty=0.4, presence_penalty=0.2, seed=5),
    ],
    ids=["temperature", "top_p", "min_p", "top_k", "penalties"],
)
def test_native_kernels_draw_the_tokens_the_torch_passes_draw(params):
    vocab, steps = 3000, 40
    runs = []
    assert cpu_kernels.load()
    for form in (ops.TORCH, cpu_ops()):
        sampler = Sampler(vocab, lambda _: NO_BREAKERS, form)
        seqs = [Sequence(f"r{i}", [i, 7, 7, 9], params) for i in range(3)]
        gen = torch.Generator().manual_seed(0)
        for _ in range(steps):
            tokens = sampler(torch.randn(3, vocab, generator=gen) * 3, seqs)
            for seq, token in zip(seqs, tokens):
                seq.token_ids.append(token)
        runs.append([seq.output_token_ids for seq in seqs])
    assert runs[0] == runs[1]
    assert len({t for row in runs[0] for t in row}) > steps  # real draws, not one repeated token


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
    return Sampler(vocab_size=50, breakers=lambda _: NO_BREAKERS, ops=cpu_ops())


def test_greedy_rows_take_the_argmax_after_penalties():
    logits = torch.tensor([[1.0, 3.0, 2.9] + [0.0] * 47])
    seq = _seq("a", SamplingParams(temperature=0))
    assert _sampler()(logits.clone(), [seq]) == [1]  # the sampler uses its logits up
    seq.token_ids.append(1)  # token 1 is now in the output: presence 0.5 lets token 2 win
    penalised = _seq("b", SamplingParams(temperature=0, presence_penalty=0.5))
    penalised.token_ids.append(1)
    assert _sampler()(logits.clone(), [penalised]) == [2]


def test_a_seeded_row_draws_the_same_tokens_alone_or_in_a_batch():
    torch.manual_seed(0)
    logits = torch.randn(3, 50)
    params = SamplingParams(seed=77, temperature=0.8)
    alone, batched = _seq("alone", params), _seq("batched", params)
    others = [_seq("x", SamplingParams()), _seq("y", SamplingParams(seed=1))]
    sampler = _sampler()
    draws_alone = [sampler(logits[:1].clone(), [alone])[0] for _ in range(20)]
    batch = logits[[1, 0, 2]]
    draws_batched = [sampler(batch.clone(), [others[0], batched, others[1]])[1] for _ in range(20)]
    assert draws_alone == draws_batched
    assert len(set(draws_alone)) > 1


def test_draws_follow_the_distribution():
    torch.manual_seed(0)
    logits = torch.tensor([[0.0, math.log(3.0)] + [-math.inf] * 48])
    seq = _seq("a", SamplingParams(temperature=1.0))
    draws = [_sampler()(logits.clone(), [seq])[0] for _ in range(2000)]
    assert 0.7 < draws.count(1) / len(draws) < 0.8


@pytest.mark.parametrize(
    ("params", "kept"),
    [
        (SamplingParams(top_p=0.6), {0: 0.5 / 0.8, 1: 0.3 / 0.8}),
        (SamplingParams(min_p=0.5), {0: 0.5 / 0.8, 1: 0.3 / 0.8}),
        (SamplingParams(top_k=3, top_p=0.9), {0: 0.5 / 0.95, 1: 0.3 / 0.95, 2: 0.15 / 0.95}),
    ],
)
def test_filtered_draws_follow_the_renormalised_distribution(params, kept):
    torch.manual_seed(0)
    logits = torch.tensor([PROBS + [0.0] * 46]).log()
    seq = _seq("a", params)
    sampler = Sampler(vocab_size=50, breakers=lambda _: NO_BREAKERS, ops=cpu_ops())
    draws = [sampler(logits.clone(), [seq])[0] for _ in range(1200)]
    assert set(draws) == set(kept)
    for token, share in kept.items():
        assert abs(draws.count(token) / len(draws) - share) < 0.05


def test_a_filter_that_refuses_almost_every_draw_is_applied_as_a_mask():
    torch.manual_seed(0)
    logits = torch.zeros(2, 1000)
    logits[:, 7] = 1e-3  # the top token, barely: min_p=0.9999 keeps it alone
    seqs = [_seq("a", SamplingParams(min_p=0.9999)), _seq("b", SamplingParams(min_p=0.9999, seed=5))]
    sampler = Sampler(vocab_size=1000, breakers=lambda _: NO_BREAKERS, ops=cpu_ops())
    assert [sampler(logits.clone(), seqs) for _ in range(5)] == [[7, 7]] * 5


@pytest.mark.parametrize("temperature", [1e-300, 1e-6])
def test_a_temperature_below_vllms_epsilon_samples_greedily_instead_of_dividing_by_almost_nothing(temperature):
    assert SamplingParams(temperature=temperature).greedy and not SamplingParams(temperature=1e-4).greedy


def test_a_repetition_penalty_too_small_for_float32_logits_is_refused_by_name():
    with pytest.raises(ValueError, match="repetition_penalty=1.7e-219 must be >= 1e-05"):
        SamplingParams(repetition_penalty=1.7e-219)
