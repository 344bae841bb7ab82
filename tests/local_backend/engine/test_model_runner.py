"""Step layout: decodes grouped by context length so one long context does not pad every short one
(the SDPA path), or read in place by the native kernel (`test_paged_attention_kernel.py`)."""

from __future__ import annotations

import pytest
import torch

from local_backend import SamplingParams
from local_backend.engine.model_runner import ModelRunner, decode_groups
from local_backend.kernels import ops
from local_backend.model.attention import OutputRows, paged_attention


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

    def observed(q, k, v, kv_cache, meta, ops, kept=None):
        groups_per_layer.append(len(meta.decodes))
        return paged_attention(q, k, v, kv_cache, meta, ops, kept)

    monkeypatch.setattr("local_backend.model.llama.paged_attention", observed)
    prompts = [[5 + i for i in range(n)] for n in (3, 4, 150)]
    greedy = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
    outputs = engine.generate(prompts, greedy)
    assert max(groups_per_layer) == 2  # the two short contexts decode apart from the long one
    for prompt, out in zip(prompts, outputs):
        assert list(out.token_ids) == hf_greedy("llama", prompt, greedy.max_tokens)


@pytest.mark.parametrize("native", [True, False])
def test_the_last_layer_computes_only_the_rows_that_sample_and_the_tokens_stay_those_of_every_row(
    make_engine, monkeypatch, native
):
    engine = make_engine(max_num_batched_tokens=64)  # a 150-token prompt prefills in chunks of 64, 64 and 22
    if not native:
        engine.runner.paged_decodes = False
        for module in engine.runner.model.modules():
            if hasattr(module, "ops"):
                module.ops = ops.TORCH
    monkeypatch.setattr(engine.runner.model, "layer_stack", None)  # the layer loop, whose modules it watches
    layers = engine.runner.model.model.layers
    rows_seen: dict[int, list[int]] = {0: [], len(layers) - 1: []}
    for index in rows_seen:
        forward = layers[index].mlp.forward
        monkeypatch.setattr(
            layers[index].mlp, "forward", lambda x, i=index, f=forward: rows_seen[i].append(len(x)) or f(x)
        )
    logits_seen: list[torch.Tensor] = []
    project = engine.runner.model.logits
    monkeypatch.setattr(
        engine.runner.model, "logits", lambda hidden: logits_seen.append(project(hidden)) or logits_seen[-1]
    )
    greedy = SamplingParams(max_tokens=3, temperature=0, ignore_eos=True)
    prompt = [5 + i % 90 for i in range(150)]
    [pruned] = engine.generate([prompt], greedy)
    assert rows_seen[0] == [64, 64, 22, 1, 1]  # every row of each chunk, then the two decodes
    assert rows_seen[len(layers) - 1] == [0, 0, 1, 1, 1]  # the chunks that do not sample compute nothing there

    engine.reset_prefix_cache()
    monkeypatch.setattr(ModelRunner, "_output_rows", lambda self, counts, kept: _every_row(self, counts))
    [whole] = engine.generate([prompt], greedy)
    assert rows_seen[len(layers) - 1][5:] == [64, 64, 22, 1, 1]
    assert pruned.token_ids == whole.token_ids
    assert len(logits_seen) == 6
    for cut, every in zip(logits_seen[:3], logits_seen[3:]):
        torch.testing.assert_close(cut, every, rtol=1e-5, atol=1e-5)


def _every_row(runner: ModelRunner, counts: list[int]) -> OutputRows:
    """Rows kept as though every one were read: the last layer as the others."""
    num_decodes = sum(1 for n in counts if n == 1)
    everything = torch.arange(sum(counts), device=runner.device)
    return OutputRows(everything, torch.arange(num_decodes, device=runner.device), tuple(counts[num_decodes:]))
