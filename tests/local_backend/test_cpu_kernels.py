"""The native CPU kernels: decode attention read in place and prefill attention equal the SDPA path,
the kv write equals index_copy_; without a compiler the engine runs on torch ops alone. (The sampler's and the layers'
kernels: test_sampler.py, test_native_layers.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from local_backend import SamplingParams, cpu_kernels, ops
from local_backend.attention import AttentionMetadata, DecodeGroup, PagedDecodes, paged_attention

BLOCK = 16


def _sdpa_reference(q, kv_cache, tables, lengths):
    """Each decode as its own SDPA group: the fallback path the kernel replaces."""
    groups = []
    for i, length in enumerate(lengths):
        slots = (tables[i][:, None] * BLOCK + torch.arange(BLOCK)).view(-1)[:length]
        groups.append(DecodeGroup(i, i + 1, slots[None, :], None))
    meta = AttentionMetadata(torch.zeros(0, dtype=torch.long), tuple(groups), ())
    empty = torch.zeros(0, *kv_cache.shape[2:])
    return paged_attention(q, empty, empty, kv_cache, meta, ops.TORCH)


@pytest.mark.parametrize(("heads", "kv_heads", "dim"), [(8, 4, 64), (4, 4, 16), (8, 1, 32), (6, 2, 8)])
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
    for form in (ops.NativeOps(dim), ops.TORCH):  # the kernel, and the torch form beside it, read the same layout
        got = paged_attention(q, empty, empty, kv_cache, meta, form)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_the_kernel_refuses_what_it_cannot_read_with_a_clear_error():
    assert cpu_kernels.load()
    q, cache = torch.randn(1, 4, 12), torch.randn(16, 2, 4, 12)  # head_dim 12 is not a multiple of 8
    table, length = torch.zeros(1, 1, dtype=torch.long), torch.ones(1, dtype=torch.long)
    with pytest.raises(RuntimeError, match="multiple of 8"):
        torch.ops.kvwise.paged_decode_attention(q, cache, table, length, BLOCK, 1.0)
    assert not ops.select(torch.device("cpu"), torch.float32, 12).paged_decodes
    assert ops.select(torch.device("cpu"), torch.bfloat16, 64) is ops.TORCH
    assert ops.select(torch.device("cpu"), torch.float32, 64).paged_decodes


@pytest.mark.parametrize(("tokens", "kv_heads", "dim"), [(1, 4, 64), (130, 2, 16), (5, 1, 12)])
def test_the_kv_write_stores_the_steps_keys_and_values_as_index_copy_does(tokens, kv_heads, dim):
    assert cpu_kernels.load()
    gen = torch.Generator().manual_seed(tokens + dim)
    heads = 2 * kv_heads
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, generator=gen)
    _, k, v = qkv.split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
    k, v = k.view(tokens, kv_heads, dim), v.view(tokens, kv_heads, dim)  # views into the step's qkv rows
    slots = torch.randperm(4 * tokens, generator=gen)[:tokens]
    cache = torch.randn(4 * tokens, 2, kv_heads, dim, generator=gen)
    expected = cache.clone().index_copy_(0, slots, torch.stack((k, v), dim=1))
    torch.ops.kvwise.write_kv_(cache, k, v, slots)
    assert torch.equal(cache, expected)  # the written slots, and every other slot untouched
    with pytest.raises(RuntimeError, match="out of range"):
        torch.ops.kvwise.write_kv_(cache, k, v, slots + 4 * tokens)
    with pytest.raises(RuntimeError, match="matching the cache"):
        torch.ops.kvwise.write_kv_(cache, k[:-1], v, slots)  # a token short


@pytest.mark.parametrize(("heads", "kv_heads", "dim"), [(8, 4, 64), (4, 4, 16), (8, 1, 32), (6, 2, 8)])
@pytest.mark.parametrize(("tokens", "cached"), [(1, 0), (5, 0), (127, 0), (128, 0), (129, 0), (300, 0), (1, 50), (32, 200), (129, 7)])
def test_the_prefill_kernel_equals_sdpa_with_the_causal_mask_after_a_cached_prefix(heads, kv_heads, dim, tokens, cached):
    assert cpu_kernels.load()
    gen = torch.Generator().manual_seed(tokens * 1000 + cached + heads + dim)
    context = cached + tokens
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, generator=gen)
    q = qkv[:, : heads * dim].view(tokens, heads, dim)  # strided rows: a view into the step's qkv, as the engine passes it
    k, v = torch.randn(2, context, kv_heads, dim, generator=gen)
    sees = torch.ones(tokens, context, dtype=torch.bool).tril_(cached)  # query j: keys 0 .. cached + j
    expected = F.scaled_dot_product_attention(
        q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None], attn_mask=sees, enable_gqa=True
    )[0].transpose(0, 1).reshape(tokens, heads * dim)
    got = torch.ops.kvwise.prefill_attention(q, k, v, dim**-0.5)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


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


def test_engine_prefills_use_the_kernel_up_to_its_context_limit_and_give_the_sdpa_paths_tokens(make_engine, monkeypatch):
    engine = make_engine(max_num_batched_tokens=64)  # longer prompts prefill in chunks over their cached start
    contexts = []
    kernel = torch.ops.kvwise.prefill_attention

    def counted(q, k, v, scale):
        contexts.append(len(k))
        return kernel(q, k, v, scale)

    monkeypatch.setattr(torch.ops.kvwise, "prefill_attention", counted)
    monkeypatch.setattr(ops, "PREFILL_KERNEL_MAX_CONTEXT", 100)
    prompts = [[5 + i % 90 for i in range(n)] for n in (3, 40, 150)]
    params = SamplingParams(max_tokens=8, temperature=0, ignore_eos=True)
    with_kernel = [list(o.token_ids) for o in engine.generate(prompts, params)]
    assert {3, 40} <= set(contexts)  # whole prompts
    assert any(40 < n <= 100 for n in contexts)  # a chunk of the 150 over its cached start
    assert max(contexts) <= 100  # its last chunk sees more keys: SDPA's
    monkeypatch.setattr(ops, "PREFILL_KERNEL_MAX_CONTEXT", 0)
    engine.reset_prefix_cache()
    contexts.clear()
    assert [list(o.token_ids) for o in engine.generate(prompts, params)] == with_kernel
    assert not contexts


def test_engine_decodes_use_the_kernel_and_give_the_sdpa_paths_tokens(make_engine, monkeypatch):
    engine = make_engine()
    assert engine.runner.paged_decodes
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
        "from local_backend import Engine, SamplingParams, cpu_kernels, ops\n"
        "engine = Engine.from_pretrained(sys.argv[1], device='cpu', max_model_len=64, kv_cache_memory=2**20)\n"
        "out = engine.generate([[5, 6, 7]], SamplingParams(max_tokens=4, temperature=0, ignore_eos=True))\n"
        "native = {m.ops for m in engine.runner.model.modules() if hasattr(m, 'ops')} != {ops.TORCH}\n"
        "native = native or engine.runner.sampler.ops is not ops.TORCH\n"
        "print(cpu_kernels.load(), engine.runner.paged_decodes, native, len(out[0].token_ids))\n"
        "engine.close()\n"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "CXX": str(tmp_path / "no-such-compiler")}
    command = [sys.executable, "-c", script, str(checkpoints["llama"])]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False", "False", "4"]
    assert "native CPU kernels unavailable, the engine runs on torch ops alone" in done.stderr
    assert not list(tmp_path.rglob("*.so"))
