"""The native CPU kernels: decode attention read in place and prefill attention equal the SDPA path,
the kv write equals index_copy_; without a compiler the engine runs on torch ops alone. Every variant
the compiler targets here builds, and each one this CPU executes passes these tests, the layers' and
the sampler's, and the engine's transformers parity tests, in a process of its own (a process
registers one variant's ops). The thresholds between kernel and torch form are measured once per
library, cached beside it, reported at load and in `/metrics`, and any choice gives the same tokens.
(The sampler's and the layers' kernels: test_sampler.py, test_native_layers.py.)"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import httpx2
import pytest
import torch
import torch.nn.functional as F

from local_backend import SamplingParams
from local_backend._constants import BF16_WIDENED_PREFILL_MIN_QUERIES
from local_backend.kernels import cpu_kernels, kernel_choices, ops
from local_backend.kernels.kernel_choices import KernelChoices
from local_backend.model.attention import AttentionMetadata, DecodeGroup, PagedDecodes, paged_attention
from tests.local_backend.kernels.op_forms import run_on

BLOCK = 16
LANES = {"DEFAULT": 8, "AVX2": 8, "AVX512": 16}
TESTS = Path(__file__).parent
VARIANT_TESTS = (  # what each variant must pass: its kernels against the torch forms, and transformers' tokens
    "tests/local_backend/kernels/test_cpu_kernels.py",
    "tests/local_backend/kernels/test_kv_int8.py::test_the_native_int8_kernels_match_the_torch_int8_forms",
    "tests/local_backend/kernels/test_native_layers.py",
    "tests/local_backend/kernels/test_quantized.py",
    "tests/local_backend/sampling/test_sampler.py",
    "tests/local_backend/engine/test_engine.py::test_greedy_batch_matches_transformers_token_for_token",
    "tests/local_backend/engine/test_model_runner.py::test_mixed_context_lengths_decode_in_several_groups_and_match_transformers",
)


def _sdpa_reference(q, kv_cache, tables, lengths):
    """Each decode as its own SDPA group: the fallback path the kernel replaces."""
    groups = []
    for i, length in enumerate(lengths):
        slots = (tables[i][:, None] * BLOCK + torch.arange(BLOCK)).view(-1)[:length]
        groups.append(DecodeGroup(i, i + 1, slots[None, :], None))
    meta = AttentionMetadata(torch.zeros(0, dtype=torch.long), tuple(groups), ())
    empty = torch.zeros(0, *kv_cache.shape[2:])
    return paged_attention(q, empty, empty, kv_cache, meta, ops.TORCH)


@pytest.mark.parametrize(("heads", "kv_heads", "dim"), [(8, 4, 64), (4, 4, 16), (8, 1, 32), (6, 2, 8), (4, 2, 24)])
@pytest.mark.parametrize("lengths", [[1], [16], [17], [300], [5, 16, 33, 200, 1]])
def test_the_kernel_equals_sdpa_over_scattered_blocks(heads, kv_heads, dim, lengths):
    assert cpu_kernels.load()
    gen = torch.Generator().manual_seed(len(lengths) * 100 + heads + dim)
    num_blocks = 64
    kv_cache = torch.randn(num_blocks * BLOCK, 2, kv_heads, dim, generator=gen)
    most = -(-max(lengths) // BLOCK)
    order = torch.randperm(num_blocks, generator=gen)
    tables = torch.stack([order[(i * 3) % (num_blocks - most) :][:most] for i in range(len(lengths))])
    q = torch.randn(len(lengths), heads, dim, generator=gen)
    paged = PagedDecodes(tables.contiguous(), torch.tensor(lengths), BLOCK)
    meta = AttentionMetadata(torch.zeros(0, dtype=torch.long), (), (), paged)
    empty = torch.zeros(0, kv_heads, dim)
    expected = _sdpa_reference(q, kv_cache, tables, lengths)
    for form in (
        ops.NativeOps(dim, cpu_kernels.load().choices),
        ops.TORCH,
    ):  # the kernel, and the torch form beside it, read the same layout
        got = paged_attention(q, empty, empty, kv_cache, meta, form)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("heads", "kv_heads", "dim"), [(8, 4, 64), (6, 2, 8), (4, 2, 24)])
@pytest.mark.parametrize("lengths", [[1], [17], [5, 16, 33, 200, 1]])
def test_the_kernel_reads_a_bfloat16_cache_as_sdpa_over_its_values_in_float32(heads, kv_heads, dim, lengths):
    """A bfloat16 cache and queries, summed in float32: the float32 SDPA of the same rounded values, rounded once."""
    assert cpu_kernels.load()
    gen = torch.Generator().manual_seed(len(lengths) * 10 + heads + dim)
    kv_cache = torch.randn(80 * BLOCK, 2, kv_heads, dim, generator=gen).bfloat16()
    tables = torch.randperm(80, generator=gen)[: len(lengths) * 13].view(len(lengths), 13)
    q = torch.randn(len(lengths), heads, dim, generator=gen).bfloat16()
    meta = AttentionMetadata(
        torch.zeros(0, dtype=torch.long), (), (), PagedDecodes(tables, torch.tensor(lengths), BLOCK)
    )
    got = paged_attention(
        q,
        q.new_zeros(0, kv_heads, dim),
        q.new_zeros(0, kv_heads, dim),
        kv_cache,
        meta,
        ops.NativeOps(dim, cpu_kernels.load().choices),
    )
    assert got.dtype == torch.bfloat16
    expected = _sdpa_reference(q.float(), kv_cache.float(), tables, lengths)
    torch.testing.assert_close(got.float(), expected, rtol=1.6e-2, atol=1e-2)


def test_the_kernel_refuses_what_it_cannot_read_with_a_clear_error():
    assert cpu_kernels.load()
    q, cache = torch.randn(1, 4, 12), torch.randn(16, 2, 4, 12)  # head_dim 12 is not a multiple of 8
    table, length = torch.zeros(1, 1, dtype=torch.long), torch.ones(1, dtype=torch.long)
    with pytest.raises(RuntimeError, match="multiple of 8"):
        torch.ops.kvwise.paged_decode_attention(q, cache, table, length, BLOCK, 1.0)
    assert not ops.select(torch.device("cpu"), torch.float32, 12).paged_decodes
    assert isinstance(ops.select(torch.device("cpu"), torch.bfloat16, 64), ops.NativeOps)
    assert ops.select(torch.device("cpu"), torch.float16, 64) is ops.TORCH
    assert ops.select(torch.device("cpu"), torch.float32, 64).paged_decodes


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("tokens", "kv_heads", "dim"), [(1, 4, 64), (130, 2, 16), (5, 1, 12)])
def test_the_kv_write_stores_the_steps_keys_and_values_as_index_copy_does(tokens, kv_heads, dim, dtype):
    assert cpu_kernels.load()
    gen = torch.Generator().manual_seed(tokens + dim)
    heads = 2 * kv_heads
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, generator=gen).to(dtype)
    _, k, v = qkv.split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
    k, v = k.view(tokens, kv_heads, dim), v.view(tokens, kv_heads, dim)  # views into the step's qkv rows
    slots = torch.randperm(4 * tokens, generator=gen)[:tokens]
    cache = torch.randn(4 * tokens, 2, kv_heads, dim, generator=gen).to(dtype)
    expected = cache.clone().index_copy_(0, slots, torch.stack((k, v), dim=1))
    torch.ops.kvwise.write_kv_(cache, k, v, slots)
    assert torch.equal(cache, expected)  # the written slots, and every other slot untouched
    with pytest.raises(RuntimeError, match="out of range"):
        torch.ops.kvwise.write_kv_(cache, k, v, slots + 4 * tokens)
    with pytest.raises(RuntimeError, match="matching the cache"):
        torch.ops.kvwise.write_kv_(cache, k[:-1], v, slots)  # a token short


@pytest.mark.parametrize(("heads", "kv_heads", "dim"), [(8, 4, 64), (4, 4, 16), (8, 1, 32), (6, 2, 8), (4, 2, 40)])
@pytest.mark.parametrize(
    ("tokens", "cached"),
    [
        (1, 0),
        (5, 0),
        (127, 0),
        (128, 0),
        (129, 0),
        (300, 0),
        (1, 50),
        (32, 200),
        (129, 7),
        (700, 0),
        (130, 900),
        (1, 1100),
    ],
)  # past 512 keys a query block spans several tiles of keys (the online softmax)
def test_the_prefill_kernel_equals_sdpa_with_the_causal_mask_after_a_cached_prefix(
    heads, kv_heads, dim, tokens, cached
):
    assert cpu_kernels.load()
    gen = torch.Generator().manual_seed(tokens * 1000 + cached + heads + dim)
    context = cached + tokens
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, generator=gen)
    q = qkv[:, : heads * dim].view(
        tokens, heads, dim
    )  # strided rows: a view into the step's qkv, as the engine passes it
    k, v = torch.randn(2, context, kv_heads, dim, generator=gen)
    sees = torch.ones(tokens, context, dtype=torch.bool).tril_(cached)  # query j: keys 0 .. cached + j
    expected = (
        F.scaled_dot_product_attention(
            q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None], attn_mask=sees, enable_gqa=True
        )[0]
        .transpose(0, 1)
        .reshape(tokens, heads * dim)
    )
    got = torch.ops.kvwise.prefill_attention(q, k, v, dim**-0.5)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("heads", "kv_heads", "dim"), [(8, 4, 64), (4, 4, 16), (6, 2, 48), (4, 2, 40), (2, 1, 128)])
@pytest.mark.parametrize(
    ("tokens", "cached"), [(1, 0), (65, 0), (129, 0), (700, 0), (32, 200), (130, 900), (257, 1100)]
)
def test_the_bfloat16_prefill_kernel_equals_float32_sdpa_within_bfloat16_rounding(heads, kv_heads, dim, tokens, cached):
    """Where oneDNN multiplies bfloat16 by brgemm (`packs_bf16`: AMX) the kernel attends bfloat16 inputs, keys
    padded to whole packed chunks, for a head_dim oneDNN packs (16, 32, 48, 64 or a multiple of 64); where the CPU
    has AVX512-BF16 dot products instead (`dots_bf16`), on its own packing, for a head_dim a multiple of 16 up to
    128; on a CPU with neither, or for another head_dim (40 here), it refuses them (the engine keeps SDPA there)."""
    assert cpu_kernels.load()
    gen = torch.Generator().manual_seed(tokens * 1000 + cached + heads + dim)
    context = cached + tokens
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, generator=gen).bfloat16()
    q = qkv[:, : heads * dim].view(tokens, heads, dim)
    k, v = torch.randn(2, context, kv_heads, dim, generator=gen).bfloat16()
    if not (torch.ops.kvwise.packs_bf16(dim) or torch.ops.kvwise.dots_bf16(dim)):
        with pytest.raises(RuntimeError, match="packs_bf16"):  # no bfloat16 brgemm or dot products: the portable path
            torch.ops.kvwise.prefill_attention(q, k, v, dim**-0.5)
        return
    sees = torch.ones(tokens, context, dtype=torch.bool).tril_(cached)
    expected = (
        F.scaled_dot_product_attention(
            q.float().transpose(0, 1)[None],
            k.float().transpose(0, 1)[None],
            v.float().transpose(0, 1)[None],
            attn_mask=sees,
            enable_gqa=True,
        )[0]
        .transpose(0, 1)
        .reshape(tokens, heads * dim)
    )
    got = torch.ops.kvwise.prefill_attention(q, k, v, dim**-0.5)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), expected, rtol=1.6e-2, atol=2e-2)  # bfloat16's own tolerances, the
    # exponentials rounded to bfloat16 before the second GEMM as torch's flash kernel rounds them


def test_the_prefill_kernel_refuses_shapes_it_cannot_attend_with_a_clear_error():
    assert cpu_kernels.load()
    q, k = torch.randn(4, 8, 64), torch.randn(4, 4, 64)
    with pytest.raises(RuntimeError, match="0 < n <= context"):
        torch.ops.kvwise.prefill_attention(q, k[:3], k[:3], 1.0)  # more queries than keys
    with pytest.raises(RuntimeError, match="a multiple of kv_heads"):
        torch.ops.kvwise.prefill_attention(torch.randn(4, 6, 64), k, k, 1.0)
    with pytest.raises(RuntimeError, match="a multiple of 8"):
        torch.ops.kvwise.prefill_attention(torch.randn(4, 8, 12), torch.randn(4, 4, 12), torch.randn(4, 4, 12), 1.0)
    with pytest.raises(RuntimeError, match="float32"):
        torch.ops.kvwise.prefill_attention(q.double(), k.double(), k.double(), 1.0)


def test_engine_prefills_use_the_kernel_up_to_its_context_limit_and_give_the_sdpa_paths_tokens(
    make_engine, monkeypatch
):
    engine = make_engine(max_num_batched_tokens=64)  # longer prompts prefill in chunks over their cached start
    contexts = []
    kernel = torch.ops.kvwise.prefill_attention

    def counted(q, k, v, scale):
        contexts.append(len(k))
        return kernel(q, k, v, scale)

    monkeypatch.setattr(torch.ops.kvwise, "prefill_attention", counted)
    choices = cpu_kernels.load().choices
    run_on(engine, ops.NativeOps(16, replace(choices, prefill_kernel_max_context=100)))
    prompts = [[5 + i % 90 for i in range(n)] for n in (3, 40, 150)]
    params = SamplingParams(max_tokens=8, temperature=0, ignore_eos=True)
    with_kernel = [list(o.token_ids) for o in engine.generate(prompts, params)]
    assert {3, 40} <= set(contexts)  # whole prompts
    assert any(40 < n <= 100 for n in contexts)  # a chunk of the 150 over its cached start
    assert max(contexts) <= 100  # its last chunk sees more keys: SDPA's
    run_on(engine, ops.NativeOps(16, replace(choices, prefill_kernel_max_context=0)))
    contexts.clear()
    assert [list(o.token_ids) for o in engine.generate(prompts, params)] == with_kernel
    assert not contexts


def bfloat16_chunk(n: int, cached: int, heads: int, kv_heads: int) -> tuple[torch.Tensor, ...]:
    """A bfloat16 prefill chunk of `n` queries (head_dim 64) after `cached` tokens: q, k, v and the mask of what
    each query sees (None for a whole prompt, as the engine passes it)."""
    gen = torch.Generator().manual_seed(n * 10 + cached)
    q = torch.randn(n, heads, 64, generator=gen).bfloat16()
    k, v = (torch.randn(n + cached, kv_heads, 64, generator=gen).bfloat16() for _ in range(2))
    mask = torch.ones(n, n + cached, dtype=torch.bool).tril(cached) if cached else None
    return q, k, v, mask


def kernel_input_dtypes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[torch.dtype, ...]]:
    """The dtypes of q, k and v at each call of `kvwise::prefill_attention` from now on (it still attends)."""
    widths = []
    kernel = torch.ops.kvwise.prefill_attention

    def recorded(q, k, v, scale):
        widths.append((q.dtype, k.dtype, v.dtype))
        return kernel(q, k, v, scale)

    monkeypatch.setattr(torch.ops.kvwise, "prefill_attention", recorded)
    return widths


@pytest.mark.parametrize("cached", [0, 24])  # a whole prompt; a chunk after cached tokens
def test_bfloat16_prefills_without_bfloat16_brgemm_attend_in_the_float32_kernel_on_widened_copies(monkeypatch, cached):
    native = ops.NativeOps(64, cpu_kernels.load().choices, torch.bfloat16)
    native.bf16_prefill = native.bf16_dots = False  # as on a CPU with no bfloat16 brgemm or dot products
    widths = kernel_input_dtypes(monkeypatch)
    n, context = BF16_WIDENED_PREFILL_MIN_QUERIES, BF16_WIDENED_PREFILL_MIN_QUERIES + cached
    q, k, v, mask = bfloat16_chunk(n, cached, heads=4, kv_heads=2)
    got = native.prefill_attention(q, k, v, mask, 0.125)
    assert widths == [(torch.float32,) * 3] and got.dtype == torch.bfloat16
    expected = ops.TORCH.prefill_attention(q.float(), k.float(), v.float(), mask, 0.125)
    torch.testing.assert_close(got.float(), expected, rtol=1.6e-2, atol=1e-3)  # one rounding to bfloat16
    native.choices = replace(native.choices, prefill_kernel_max_context=context - 1)
    widths.clear()
    assert native.prefill_attention(q, k, v, mask, 0.125).dtype == torch.bfloat16 and not widths  # SDPA past it
    native.choices = replace(native.choices, prefill_kernel_max_context=context)
    fewer = q[1:]  # one query short: SDPA's
    assert native.prefill_attention(fewer, k, v, None if mask is None else mask[1:], 0.125).shape == (n - 1, 256)
    assert not widths


@pytest.mark.skipif(
    not (cpu_kernels.load() and torch.ops.kvwise.dots_bf16(64)), reason="this CPU has no AVX512-BF16 without AMX"
)
@pytest.mark.parametrize(("n", "cached"), [(1, 0), (32, 0), (300, 0), (8, 40), (200, 1100)])
def test_bfloat16_prefills_on_avx512_bf16_dot_products_attend_every_chunk_in_bfloat16(monkeypatch, n, cached):
    native = ops.NativeOps(64, cpu_kernels.load().choices, torch.bfloat16)
    assert native.bf16_dots and not native.bf16_prefill
    native.choices = replace(native.choices, prefill_kernel_max_context=64)  # the float32 kernel's limit binds not
    widths = kernel_input_dtypes(monkeypatch)
    q, k, v, mask = bfloat16_chunk(n, cached, heads=6, kv_heads=2)
    got = native.prefill_attention(q, k, v, mask, 0.125)
    assert widths == [(torch.bfloat16,) * 3] and got.dtype == torch.bfloat16
    expected = ops.TORCH.prefill_attention(q.float(), k.float(), v.float(), mask, 0.125)
    torch.testing.assert_close(got.float(), expected, rtol=1.6e-2, atol=2e-2)  # the exponentials rounded to bfloat16


def test_engine_decodes_use_the_kernel_and_give_the_sdpa_paths_tokens(make_engine, monkeypatch):
    engine = make_engine()
    assert engine.runner.paged_decodes
    monkeypatch.setattr(engine.runner.model, "layer_stack", None)  # the layer loop's calls (test_decode_layers.py: one)
    calls = []
    kernel = torch.ops.kvwise.paged_decode_attention

    def counted(*args):
        calls.append(len(args[3]))
        return kernel(*args)

    monkeypatch.setattr(torch.ops.kvwise, "paged_decode_attention", counted)
    prompts = [[5 + i for i in range(n)] for n in (3, 40, 150, 17)]
    params = SamplingParams(max_tokens=20, temperature=0, ignore_eos=True)
    with_kernel = [list(o.token_ids) for o in engine.generate(prompts, params)]
    assert max(calls) == len(prompts)  # every decode of a step in one call
    engine.runner.paged_decodes = False
    engine.reset_prefix_cache()
    assert [list(o.token_ids) for o in engine.generate(prompts, params)] == with_kernel


def test_without_a_compiler_the_engine_runs_on_torch_ops_alone(tmp_path: Path, checkpoints):
    script = (
        "import logging, sys; logging.basicConfig(level=logging.WARNING)\n"
        "from local_backend import Engine, SamplingParams\n"
        "from local_backend.kernels import cpu_kernels, ops\n"
        "engine = Engine.from_pretrained(sys.argv[1], device='cpu', max_model_len=64, kv_cache_memory=2**20)\n"
        "out = engine.generate([[5, 6, 7]], SamplingParams(max_tokens=4, temperature=0, ignore_eos=True))\n"
        "native = {m.ops for m in engine.runner.model.modules() if hasattr(m, 'ops')} != {ops.TORCH}\n"
        "native = native or engine.runner.sampler.ops is not ops.TORCH\n"
        "print(cpu_kernels.load() is not None, engine.runner.paged_decodes, native, len(out[0].token_ids))\n"
        "engine.close()\n"
    )
    env = {**os.environ, "KVWISE_KERNEL_CACHE_DIR": str(tmp_path), "CXX": str(tmp_path / "no-such-compiler")}
    command = [sys.executable, "-c", script, str(checkpoints["llama"])]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False", "False", "4"]
    assert "native CPU kernels unavailable, the engine runs on torch ops alone" in done.stderr
    assert not list(tmp_path.rglob("*.so"))


def test_the_loaded_library_is_the_variant_asked_for_with_its_vector_width_and_its_choices_beside_it():
    kernels = cpu_kernels.load()
    assert kernels is not None and cpu_kernels.loaded() is kernels
    assert kernels.capability == cpu_kernels.requested_capability()
    assert kernels.lanes == LANES[kernels.capability] == torch.ops.kvwise.vector_lanes()
    assert (
        kernels.path == cpu_kernels.library_path(kernels.capability) and kernels.capability.lower() in kernels.path.name
    )
    beside = kernel_choices.choices_path(kernels.path)
    if kernels.choices.source == "default":  # too busy to measure at load: nothing cached, measured at a quieter one
        assert (kernels.choices.matvec_max_rows, kernels.choices.prefill_kernel_max_context) == (16, 1024)
        return
    saved = json.loads(beside.read_text())
    assert saved["capability"] == kernels.capability
    assert saved["matvec_max_rows"] == kernels.choices.matvec_max_rows
    assert saved["prefill_kernel_max_context"] == kernels.choices.prefill_kernel_max_context
    assert saved["bf16_matvec_max_rows"] == kernels.choices.bf16_matvec_max_rows
    bf16_onednn = {"bf16_plain_vs_onednn"} if kernel_choices.onednn_prepacks(torch.bfloat16) else set()
    assert (
        set(saved["timings_ms"])
        == {"plain_vs_onednn", "matvec_vs_torch", "bf16_matvec_vs_torch", "prefill_kernel_vs_sdpa"} | bf16_onednn
    )


def test_the_capability_follows_torch_then_the_override_clamped_to_this_cpu(monkeypatch, caplog):
    monkeypatch.delenv(cpu_kernels.CAPABILITY_ENV, raising=False)
    torchs = torch.backends.cpu.get_cpu_capability()
    assert cpu_kernels.requested_capability() == (torchs if torchs in cpu_kernels.CAPABILITIES else "DEFAULT")
    monkeypatch.setenv(cpu_kernels.CAPABILITY_ENV, "default")
    assert cpu_kernels.requested_capability() == "DEFAULT"
    monkeypatch.setenv(cpu_kernels.CAPABILITY_ENV, "AVX1024")
    with pytest.raises(
        ValueError, match=f"{cpu_kernels.CAPABILITY_ENV}='AVX1024': expected one of DEFAULT, AVX2, AVX512"
    ):
        cpu_kernels.requested_capability()
    monkeypatch.setenv(cpu_kernels.CAPABILITY_ENV, "AVX512")
    ceiling = cpu_kernels.executable_capability()
    with caplog.at_level(logging.WARNING, logger=cpu_kernels.__name__):
        assert cpu_kernels.requested_capability() == ceiling
    assert (ceiling != "AVX512") == ("cannot execute AVX512 kernels" in caplog.text)
    distinct = {cpu_kernels.library_path(capability) for capability in cpu_kernels.CAPABILITIES}
    assert len(distinct) == len(cpu_kernels.CAPABILITIES)  # one cache entry per capability


@pytest.mark.parametrize("capability", cpu_kernels.CAPABILITIES)
def test_every_variant_the_compiler_targets_builds_and_each_this_cpu_runs_passes_the_kernel_and_parity_tests(
    capability,
):
    if os.environ.get(cpu_kernels.CAPABILITY_ENV):
        pytest.skip("this process is itself one variant's run")
    if capability not in cpu_kernels.buildable_capabilities():
        pytest.skip(f"the compiler does not target {capability} on {os.uname().machine}")
    path = cpu_kernels.build(capability)
    assert path.exists() and path == cpu_kernels.library_path(capability)
    executable = cpu_kernels.CAPABILITIES.index(capability) <= cpu_kernels.CAPABILITIES.index(
        cpu_kernels.executable_capability()
    )
    if not executable:
        pytest.skip(f"built; this CPU cannot execute {capability}")
    env = {**os.environ, cpu_kernels.CAPABILITY_ENV: capability, "OMP_WAIT_POLICY": "PASSIVE"}
    startup = (
        "import logging; logging.basicConfig(level=logging.INFO);"
        " from local_backend.kernels import cpu_kernels; cpu_kernels.load()"
    )
    done = subprocess.run([sys.executable, "-c", startup], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert f"native CPU kernels: {capability}, {LANES[capability]} floats per vector, {path.name}" in done.stderr
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *VARIANT_TESTS]
    done = subprocess.run(command, env=env, cwd=TESTS.parents[2], capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout.splitlines()[-1] and " failed" not in done.stdout.splitlines()[-1]


def test_choices_are_measured_once_cached_beside_the_library_and_read_back(tmp_path, monkeypatch, caplog):
    assert cpu_kernels.load()
    for name, value in (
        ("CALIBRATION_MATRICES", 2),
        ("CALIBRATION_PREFILL_CONTEXTS", (64, 128)),
        ("CALIBRATION_MATVEC_ROWS", (1, 2, 4)),
        ("CALIBRATION_REPEATS", 1),
    ):
        monkeypatch.setattr(kernel_choices, name, value)  # a short measurement: the test checks its bookkeeping
    library = tmp_path / "kvwise_kernels-avx2-0123.so"
    monkeypatch.setattr(kernel_choices, "CALIBRATION_MAX_LOAD_PER_CORE", 0.0)  # no machine is that quiet
    busy = kernel_choices.for_library(library, "AVX2")
    assert busy == KernelChoices("AVX2", 16, 2, 1024, source="default")
    assert not kernel_choices.choices_path(library).exists()  # measured at a later, quieter load
    monkeypatch.setattr(kernel_choices, "CALIBRATION_MAX_LOAD_PER_CORE", float("inf"))
    measured = kernel_choices.for_library(library, "AVX2")
    assert measured.source == "calibrated" and measured.capability == "AVX2"
    assert measured.matvec_max_rows in (0, 1, 2, 4) and measured.prefill_kernel_max_context in (0, 64, 128)
    assert measured.onednn_min_rows in (1, 2, 3, 5, 9)  # past one of the row counts measured
    saved = json.loads((tmp_path / "kvwise_kernels-avx2-0123.json").read_text())
    assert set(saved["timings_ms"]["matvec_vs_torch"]) == {"1", "2", "4"}
    again = kernel_choices.for_library(library, "AVX2")
    assert again == replace(measured, source="cached")
    saved["matvec_max_rows"] = 3  # what the file says is what a later load runs with
    kernel_choices.choices_path(library).write_text(json.dumps(saved))
    assert kernel_choices.for_library(library, "AVX2").matvec_max_rows == 3
    kernel_choices.choices_path(library).write_text("{not json")
    with caplog.at_level(logging.WARNING, logger=kernel_choices.__name__):
        assert kernel_choices.for_library(library, "AVX2").source == "calibrated"
    assert "ignoring unreadable kernel choices" in caplog.text
    assert json.loads(kernel_choices.choices_path(library).read_text())["capability"] == "AVX2"
    with pytest.raises(ValueError, match="KernelChoices.matvec_max_rows must be an int >= 0, got -1"):
        KernelChoices("AVX2", -1, 2, 128)


@pytest.mark.parametrize(
    ("matvec_max_rows", "onednn_min_rows", "prefill_kernel_max_context"),
    [(0, 1, 0), (0, 10**6, 10**6), (10**6, 1, 10**6), (1, 2, 16)],  # every path of each choice, alone and mixed
)
def test_forcing_any_choice_gives_the_same_tokens(
    make_engine, matvec_max_rows, onednn_min_rows, prefill_kernel_max_context
):
    engine = make_engine(max_num_batched_tokens=64)
    prompts = [[5 + i % 90 for i in range(n)] for n in (3, 40, 150, 17)]
    params = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
    loaded = cpu_kernels.load().choices
    expected = [list(o.token_ids) for o in engine.generate(prompts, params)]
    forced = KernelChoices(loaded.capability, matvec_max_rows, onednn_min_rows, prefill_kernel_max_context)
    run_on(engine, ops.NativeOps(16, forced))
    assert [list(o.token_ids) for o in engine.generate(prompts, params)] == expected


def test_metrics_report_the_loaded_kernels_and_their_choices(llama_dir):
    from prometheus_client.parser import text_string_to_metric_families

    from tests.local_backend.serving import served_engine

    kernels = cpu_kernels.load()
    with served_engine(llama_dir, max_model_len=64, kv_cache_memory=2**20) as served:
        text = httpx2.get(f"{served.url}/metrics").text
    [info] = [family for family in text_string_to_metric_families(text) if family.name == "kvwise_kernel_info"]
    [sample] = info.samples
    assert sample.value == 1
    assert sample.labels["capability"] == kernels.capability and sample.labels["lanes"] == str(kernels.lanes)
    assert sample.labels["matvec_max_rows"] == str(kernels.choices.matvec_max_rows)
    assert sample.labels["prefill_kernel_max_context"] == str(kernels.choices.prefill_kernel_max_context)
    assert sample.labels["onednn_min_rows"] == str(kernels.choices.onednn_min_rows)
