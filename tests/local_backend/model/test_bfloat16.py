"""bfloat16 on CPU: what `--dtype auto` picks and says, the greedy tokens against transformers' in bfloat16, and
an int8 KV cache with bfloat16 weights (n-gram speculation in bfloat16: test_speculative.py).

The parity bound is vLLM's for its bfloat16 model tests (`check_logprobs_close`): two bfloat16 runs of one
model may part where two tokens' logits lie within bfloat16's rounding, so the tokens must agree until the
first place they differ, and there each side's token must be among the other's top `TOP_K` candidates
(a near tie, not a different model); after it the contexts differ and nothing more is compared. The kernels
themselves are held to bfloat16 tolerances against float32 references (test_native_layers.py,
test_cpu_kernels.py); on a CPU without AVX512-BF16 the same kernels run their portable conversions
(`lanes.h`), which these tests then exercise, as the first test's output says.
"""

from __future__ import annotations

import pytest
import torch

from local_backend import SamplingParams
from local_backend.kernels import ops
from local_backend.model import dtype_choice
from local_backend.model.dtype_choice import DtypeChoice

TOP_K = 5
"""vLLM's `NUM_LOG_PROBS` in its bfloat16 model tests: a diverging token must be among the other run's top 5."""

GREEDY = SamplingParams(max_tokens=24, temperature=0, ignore_eos=True)


@pytest.mark.parametrize(
    ("avx512_bf16", "amx", "expected"),
    [
        (True, True, torch.bfloat16),
        (True, False, torch.bfloat16),
        (False, True, torch.bfloat16),
        (False, False, torch.float32),
    ],
)
def test_auto_is_bfloat16_where_the_cpu_multiplies_it_natively_and_float32_elsewhere(
    monkeypatch, avx512_bf16, amx, expected
):
    monkeypatch.setattr(dtype_choice.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    choice = dtype_choice.choose(torch.device("cpu"), "auto")
    assert choice.dtype == expected
    named = [name for name, present in (("avx512_bf16", avx512_bf16), ("amx_bf16", amx)) if present]
    assert all(name in choice.reason for name in named) and (named or "neither AVX512-BF16 nor AMX" in choice.reason)
    assert dtype_choice.choose(torch.device("cpu"), "float32") == DtypeChoice(torch.float32, "asked for")
    assert dtype_choice.choose(torch.device("cuda"), "auto").dtype == torch.bfloat16
    with pytest.raises(ValueError, match="not a torch dtype"):
        dtype_choice.choose(torch.device("cpu"), "float33")


def test_an_auto_engine_computes_in_the_dtype_this_cpu_gets_and_logs_and_reports_why(make_engine, caplog):
    features = dtype_choice.cpu_bf16_features()
    print(f"this CPU's native bfloat16: {', '.join(features) or 'none (the kernels run their portable conversions)'}")
    with caplog.at_level("INFO", logger="local_backend.model.dtype_choice"):
        engine = make_engine(dtype="auto")
    expected = torch.bfloat16 if features else torch.float32
    assert next(engine.runner.model.parameters()).dtype == expected and engine.engine_config.dtype == str(expected)[6:]
    assert engine.runner.kv_cache.dtype == expected
    stats = engine.stats()
    assert stats.dtype == str(expected)[6:] and stats.dtype_reason.startswith("auto: ")
    assert f"dtype auto on cpu: {stats.dtype} ({stats.dtype_reason})" in caplog.text
    assert make_engine(dtype="bfloat16").stats().dtype_reason == ("asked for" if not features else stats.dtype_reason)


def test_metrics_name_the_model_dtype_and_why(llama_dir):
    import httpx2
    from prometheus_client.parser import text_string_to_metric_families

    from tests.local_backend.serving import served_engine

    with served_engine(llama_dir, dtype="float32", max_model_len=64, kv_cache_memory=2**20) as served:
        text = httpx2.get(f"{served.url}/metrics").text
        expected = served.engine.stats()
    [info] = [family for family in text_string_to_metric_families(text) if family.name == "kvwise_model_dtype_info"]
    [sample] = info.samples
    assert sample.value == 1 and sample.labels == {"dtype": "float32", "reason": expected.dtype_reason}
    assert expected.dtype_reason == (
        "asked for" if dtype_choice.cpu_bf16_features() else "auto: " + expected.dtype_reason[6:]
    )


def _hf_bfloat16(checkpoint, prompt: list[int], steps: int) -> tuple[list[int], list[list[int]]]:
    """transformers' greedy tokens in bfloat16 and its top `TOP_K` candidates at each step."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.bfloat16).eval()
    out = model.generate(
        torch.tensor([prompt]),
        max_new_tokens=steps,
        min_new_tokens=steps,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
        output_scores=True,
        return_dict_in_generate=True,
    )
    return out.sequences[0, len(prompt) :].tolist(), [s[0].topk(TOP_K).indices.tolist() for s in out.scores]


def _top_k(engine, prompt: list[int], tokens: list[int], at: int) -> list[int]:
    """The engine's top `TOP_K` next tokens after `prompt + tokens[:at]` (one prefill, its own logits)."""
    seen: list[list[int]] = []

    def record(_: object, logits: torch.Tensor) -> torch.Tensor:
        seen.append(logits.topk(TOP_K).indices.tolist())
        return logits

    engine.generate([prompt + tokens[:at]], SamplingParams(max_tokens=1, temperature=0, logits_processor=record))
    return seen[0]


@pytest.mark.parametrize("prefill", ["kernel", "sdpa"])
@pytest.mark.parametrize("kind", ["llama", "mistral", "qwen2", "qwen3"])
def test_bfloat16_greedy_tokens_agree_with_transformers_bfloat16_until_a_near_tie(
    make_engine, checkpoints, kind, prefill, monkeypatch
):
    """Prompts prefill whole, in SDPA, or in chunks of 16 that attend over their cached start in
    `kvwise::prefill_attention` ("kernel", where this CPU has bfloat16 brgemm: `packs_bf16`; SDPA elsewhere)."""
    monkeypatch.setattr(ops, "BF16_PREFILL_KERNEL_MIN_QUERIES", 1)
    chunks = {"max_num_batched_tokens": 16, "max_num_seqs": 16} if prefill == "kernel" else {}
    engine = make_engine(kind, dtype="bfloat16", **chunks)
    assert isinstance(engine.runner.model.ops, ops.NativeOps)
    agreed = []
    for prompt in ([5, 9, 17, 33, 2, 48, 7], list(range(3, 60))):
        theirs, their_top = _hf_bfloat16(checkpoints[kind], prompt, GREEDY.max_tokens)
        [out] = engine.generate([prompt], GREEDY)
        ours = list(out.token_ids)
        same = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), len(ours))
        agreed.append(same)
        if same < len(ours):  # a near tie: each side's token among the other's top candidates there
            assert ours[same] in their_top[same] and theirs[same] in _top_k(engine, prompt, ours, same), (kind, same)
    print(f"{kind}, {prefill} prefill: the first {agreed} greedy tokens of 24 equal transformers' bfloat16")


def _agree_until_near_tie(engines: tuple, prompt: list[int], outputs: tuple[list[int], list[int]]) -> int:
    """How many first tokens two engines' greedy outputs share; where they part, each one's token is among
    the other engine's top `TOP_K` there (the bound above)."""
    ours, theirs = outputs
    same = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), len(ours))
    if same < len(ours):
        assert ours[same] in _top_k(engines[1], prompt, theirs, same)
        assert theirs[same] in _top_k(engines[0], prompt, ours, same)
    return same


def test_an_int8_kv_cache_keeps_working_with_bfloat16_weights(make_engine):
    plain = make_engine(dtype="bfloat16")
    quantized = make_engine(dtype="bfloat16", kv_cache_dtype="int8")
    assert quantized.runner.kv_cache.dtype == torch.int8 and isinstance(quantized.runner.model.ops, ops.NativeOps)
    assert quantized.kv_bytes_per_token < plain.kv_bytes_per_token
    [seed] = plain.generate([[5, 9, 17, 33]], GREEDY)
    prompt = [5, 9, 17, 33, *seed.token_ids] * 2
    [base] = plain.generate([prompt], GREEDY)
    [out] = quantized.generate([prompt], GREEDY)
    assert len(out.token_ids) == GREEDY.max_tokens
    agreed = _agree_until_near_tie((quantized, plain), prompt, (list(out.token_ids), list(base.token_ids)))
    print(f"int8 KV: the first {agreed} of 24 equal plain bfloat16's")
