"""Step layout: decodes grouped by context length so one long context does not pad every short one
(the SDPA path), or read in place by the native kernel (`test_paged_attention_kernel.py`)."""

from __future__ import annotations

import pytest

from local_backend import SamplingParams
from local_backend.attention import paged_attention
from local_backend.model_runner import decode_groups


@pytest.mark.parametrize(
    ("lengths", "groups"),
    [
        ([], []),
        ([7], [(0, 1)]),
        ([40, 40, 40], [(0, 3)]),
        ([100, 110, 120], [(0, 3)]),  # 360 padded vs 330 gathered: within a quarter
        ([10, 11, 12, 100, 101, 2000], [(0, 3), (3, 5), (5, 6)]),
        ([50, 50, 50, 50, 400], [(0, 4), (4, 5)]),
    ],
)
def test_decode_groups_split_where_padding_would_add_more_than_a_quarter(lengths, groups):
    assert decode_groups(lengths) == groups


def test_mixed_context_lengths_decode_in_several_groups_and_match_transformers(make_engine, hf_greedy, monkeypatch):
    engine = make_engine()
    engine.runner.paged_decodes = False  # the grouping is the SDPA path's (no native kernel, or not CPU float32)
    groups_per_layer = []

    def observed(q, k, v, kv_cache, meta, ops):
        groups_per_layer.append(len(meta.decodes))
        return paged_attention(q, k, v, kv_cache, meta, ops)

    monkeypatch.setattr("local_backend.model.paged_attention", observed)
    prompts = [[5 + i for i in range(n)] for n in (3, 4, 150)]
    greedy = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
    outputs = engine.generate(prompts, greedy)
    assert max(groups_per_layer) == 2  # the two short contexts decode apart from the long one
    for prompt, out in zip(prompts, outputs):
        assert list(out.token_ids) == hf_greedy("llama", prompt, greedy.max_tokens)
