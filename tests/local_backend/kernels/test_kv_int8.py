"""`--kv-cache-dtype int8`: 8-bit keys and values with one scale per (token, kv head), read in place.

The parity figures are teacher-forced: the int8 engine decodes the float32 engine's greedy tokens
(a logits processor records its own raw row, then forces the float32 token), so every step compares
the two caches' next-token distributions over the same context, through the decode kernels.
"""

from __future__ import annotations

import logging

import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families

from local_backend import Engine, SamplingParams
from local_backend.__main__ import engine_config, parse_args
from local_backend.engine.engine_config import ConfigError, EngineConfig
from local_backend.kernels import cpu_kernels, kv_quant, ops
from local_backend.server.generation import Admission
from local_backend.server.metrics import ServerMetrics
from tests.local_backend.kernels.op_forms import run_on

PARITY_TOKENS = 128
MIN_AGREEMENT = 0.95
MAX_MEAN_LOGPROB_DELTA = 0.05
SPEC = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
GREEDY = SamplingParams(max_tokens=40, temperature=0, ignore_eos=True)
PROMPTS = [[5, 6, 7, 8, 5, 6, 7, 8, 5, 6], [9, 10, 11, 12, 13, 9, 10, 11, 12, 13, 9, 10], list(range(20, 70))]


def _native() -> ops.NativeOps:
    kernels = cpu_kernels.load()
    if kernels is None:
        pytest.skip("no native CPU kernels on this machine")
    return ops.NativeOps(16, kernels.choices)


# --- the format --------------------------------------------------------------------------------


def test_a_row_round_trips_within_half_a_code_and_a_zero_row_stays_zero():
    torch.manual_seed(0)
    x = torch.randn(7, 2, 3, 16) * torch.logspace(-3, 2, 7)[:, None, None, None]
    x[0, 0, 0] = 0
    stored = kv_quant.quantize(x, torch.int8)
    assert stored.shape == (7, 2, 3, 16 + kv_quant.SCALE_BYTES) and stored.dtype == torch.int8
    scale = x.abs().amax(-1, keepdim=True) / 127
    back = kv_quant.dequantize(stored, torch.float32)
    assert torch.all((back - x).abs() <= scale * 0.5 * (1 + 1e-5) + 1e-30)
    assert torch.equal(back[0, 0, 0], torch.zeros(16))
    assert stored[..., :16].abs().max() == 127


def test_kv_bytes_per_token_count_the_codes_and_the_scales():
    assert kv_quant.bytes_per_token(8, 4, 64, torch.float32) == 2 * 8 * 4 * 64 * 4
    assert kv_quant.bytes_per_token(8, 4, 64, torch.int8) == 2 * 8 * 4 * (64 + 4)
    assert kv_quant.bytes_per_token(8, 4, 64, torch.bfloat16) == 2 * 8 * 4 * 64 * 2


# --- the native kernels against the torch forms ---------------------------------------------------


@pytest.mark.parametrize(
    ("heads", "kv_heads", "dim", "lengths"),
    [
        (4, 2, 16, [1, 5, 17, 40]),
        (8, 8, 64, [33, 2]),
        (6, 2, 24, [16, 31, 3]),
        (4, 1, 8, [70]),
    ],
)
def test_the_native_int8_kernels_match_the_torch_int8_forms(heads, kv_heads, dim, lengths):
    native, torch_form = _native(), ops.TORCH
    torch.manual_seed(1)
    block_size, blocks = 16, 24
    slots = blocks * block_size
    written, reference = (kv_quant.allocate(1, slots, kv_heads, dim, torch.int8, torch.device("cpu"))[0] for _ in "ab")
    k, v = torch.randn(slots, kv_heads, dim) * 3, torch.randn(slots, kv_heads, dim)
    order = torch.randperm(slots)
    native.write_kv(written, k, v, order)
    torch_form.write_kv(reference, k, v, order)
    assert torch.equal(written, reference)  # the same codes and the same scales, bit for bit

    gathered = native.read_kv(written, order[:50], torch.float32)
    assert torch.equal(gathered, torch_form.read_kv(reference, order[:50], torch.float32))

    tables = torch.stack([torch.randperm(blocks)[: -(-max(lengths) // block_size)] for _ in lengths])
    lens = torch.tensor(lengths)
    q = torch.randn(len(lengths), heads, dim)
    scale = dim**-0.5
    got = native.paged_decode_attention(q, written, tables, lens, block_size, scale)
    want = torch_form.paged_decode_attention(q, reference, tables, lens, block_size, scale)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)

    context = order[: max(lengths)]
    keys, values = native.read_kv(written, context, torch.float32).unbind(1)
    chunk = torch.randn(min(len(context), 9), heads, dim)
    mask = _shifted(len(chunk), len(context))
    torch.testing.assert_close(
        native.prefill_attention(chunk, keys, values, mask, scale),
        torch_form.prefill_attention(chunk, keys, values, mask, scale),
        rtol=1e-5,
        atol=1e-5,
    )


def _shifted(n: int, context: int) -> torch.Tensor:
    """The causal mask of a chunk of `n` queries that ends a context of `context` keys."""
    return torch.arange(context)[None, :] <= torch.arange(context - n, context)[:, None]


# --- the engine ---------------------------------------------------------------------------------


def _recorded(engine: Engine, prompt: list[int], forced: list[int] | None) -> tuple[list[int], list[torch.Tensor]]:
    """Greedy tokens and each step's raw logits; with `forced`, each step emits `forced`'s token instead."""
    rows: list[torch.Tensor] = []

    def record(ids, row):
        rows.append(row.clone())
        if forced is None:
            return row
        pinned = torch.full_like(row, -torch.inf)
        pinned[forced[len(ids)]] = 0
        return pinned

    params = SamplingParams(max_tokens=PARITY_TOKENS, temperature=0, ignore_eos=True, logits_processor=record)
    [out] = engine.generate([prompt], params)
    return list(out.token_ids), rows


@pytest.mark.parametrize("kind", ["llama", "mistral", "qwen2", "qwen3"])
def test_int8_kv_agrees_with_float32_kv_on_the_parity_models(make_engine, kind, capsys):
    prompt = [5 + (i * 7) % 300 for i in range(24)]
    exact, exact_rows = _recorded(make_engine(kind), prompt, None)
    forced, int8_rows = _recorded(make_engine(kind, kv_cache_dtype="int8"), prompt, exact)
    assert forced == exact and len(int8_rows) == PARITY_TOKENS
    agreement = sum(int(row.argmax()) == token for row, token in zip(int8_rows, exact)) / PARITY_TOKENS
    deltas = [
        (torch.log_softmax(a.double(), -1)[t] - torch.log_softmax(b.double(), -1)[t]).abs().item()
        for a, b, t in zip(int8_rows, exact_rows, exact)
    ]
    mean_delta = sum(deltas) / len(deltas)
    with capsys.disabled():
        print(
            f"\n{kind}: int8 KV greedy agreement {agreement:.1%} of {PARITY_TOKENS}, "
            f"mean |Δ logprob| {mean_delta:.4f} (max {max(deltas):.4f})"
        )
    assert agreement >= MIN_AGREEMENT and mean_delta <= MAX_MEAN_LOGPROB_DELTA


def test_a_pool_of_the_same_bytes_holds_at_least_twice_the_tokens_and_the_log_and_metrics_say_so(make_engine, caplog):
    exact = make_engine()
    with caplog.at_level(logging.INFO, logger="local_backend.engine.engine_core"):
        int8 = make_engine(kv_cache_dtype="int8")
    tokens = int8.block_manager.num_blocks * int8.block_manager.block_size
    assert "KV cache int8: 2 x 2 layers x 2 kv heads x (16 x 1 B + 4 B scale) = 160 B per token; " in caplog.text
    assert f": {tokens} tokens" in caplog.text
    assert int8.kv_bytes_per_token == 2 * 2 * 2 * (16 + kv_quant.SCALE_BYTES)
    assert exact.kv_bytes_per_token == 2 * 2 * 2 * 16 * 4
    assert int8.block_manager.num_blocks >= 2 * exact.block_manager.num_blocks
    assert int8.runner.kv_cache.dtype == torch.int8
    assert int8.kv_cache_bytes <= 2**20
    stats = int8.stats()
    text = ServerMetrics(int8.stats, Admission(stats.max_num_seqs, 4)).exposition().decode()
    gauges = {f.name: f.samples[0].value for f in text_string_to_metric_families(text) if f.samples}
    assert gauges["kvwise_kv_bytes_per_token"] == int8.kv_bytes_per_token
    assert gauges["kvwise_kv_capacity_tokens"] == stats.num_blocks * stats.block_size
    assert engine_config(parse_args(["serve", "--kv-cache-dtype", "int8"])).kv_cache_dtype == "int8"


def test_int8_with_prefix_caching_gives_the_tokens_of_a_cold_run(make_engine):
    cold = make_engine(kv_cache_dtype="int8", enable_prefix_caching=False, block_size=4)
    warm = make_engine(kv_cache_dtype="int8", block_size=4)
    shared = list(range(30, 70))
    prompts = [shared + [5, 6], shared + [7], shared[:21] + [8, 9, 10]]
    want = [list(o.token_ids) for o in cold.generate(prompts, GREEDY)]
    assert [list(o.token_ids) for o in warm.generate(prompts[:1], GREEDY)] == want[:1]
    again = warm.generate(prompts, GREEDY)
    assert all(out.cached_tokens > 0 for out in again)
    assert [list(o.token_ids) for o in again] == want


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_int8_with_speculation_gives_the_tokens_of_int8_without(make_engine, kind):
    plain = make_engine(kind, kv_cache_dtype="int8")
    fast = make_engine(
        kind, kv_cache_dtype="int8", speculative_config=SPEC, max_num_seqs=6, max_num_batched_tokens=24, block_size=4
    )
    want, got = plain.generate(PROMPTS, GREEDY), fast.generate(PROMPTS, GREEDY)
    assert [list(o.token_ids) for o in got] == [list(o.token_ids) for o in want]
    assert sum(out.draft_tokens for out in got) > 0


@pytest.mark.skipif(not kv_quant.supports("fp8_e4m3", torch.device("cpu")), reason="this torch has no float8 on CPU")
def test_fp8_kv_runs_where_torch_has_float8_and_holds_the_int8_pools_tokens(make_engine):
    fp8, int8 = make_engine(kv_cache_dtype="fp8_e4m3"), make_engine(kv_cache_dtype="int8")
    assert fp8.block_manager.num_blocks == int8.block_manager.num_blocks
    [out] = fp8.generate([PROMPTS[0]], GREEDY)
    assert len(out.token_ids) == GREEDY.max_tokens


def test_a_kv_cache_dtype_it_does_not_have_is_refused_naming_the_option(capsys):
    with pytest.raises(ConfigError) as refused:
        EngineConfig(kv_cache_dtype="int4")
    assert refused.value.option == "--kv-cache-dtype" and "int8" in str(refused.value)
    with pytest.raises(SystemExit) as exited:
        parse_args(["serve", "--kv-cache-dtype", "int4"])
    assert exited.value.code == 2 and "--kv-cache-dtype" in capsys.readouterr().err


def test_int8_on_the_torch_forms_gives_the_native_kernels_tokens(make_engine):
    engine = make_engine(kv_cache_dtype="int8", max_num_batched_tokens=64)  # the long prompt prefills in chunks
    prompts = [PROMPTS[0], list(range(4, 150)), PROMPTS[2]]
    native = [list(o.token_ids) for o in engine.generate(prompts, GREEDY)]
    run_on(engine, ops.TORCH)  # CUDA's forms: decode groups gathered by slot, dequantized by torch ops
    assert [list(o.token_ids) for o in engine.generate(prompts, GREEDY)] == native
