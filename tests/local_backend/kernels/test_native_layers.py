"""The native projection rows, norm, rope and MLP activation equal the torch ops they replace, in float32 and in
bfloat16 (against the float32 op on the same bfloat16 inputs, within bfloat16's rounding of the result), and a CPU
float32 or bfloat16 load uses them."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from local_backend import SamplingParams
from local_backend.kernels import cpu_kernels, ops
from local_backend.kernels.ops import NativeOps, apply_rope
from local_backend.model.llama import Linear


@pytest.fixture(autouse=True)
def _kernels():
    assert cpu_kernels.load()


DTYPES = [torch.float32, torch.bfloat16]
BF16_TOLERANCE = {"rtol": 1.6e-2, "atol": 1e-2}
"""bfloat16 keeps 8 significant bits: a result rounded once is within 2^-8 of its float32 value, relative; the
references round their inputs too, so twice that leaves room for the order of float32 sums."""


def _as(dtype, *tensors):
    """The tensors in `dtype`, and each back in float32 (the reference's inputs: the same rounded values)."""
    cast = [t.to(dtype) for t in tensors]
    return cast, [t.float() for t in cast]


def _close(got, expected, dtype, tight):
    assert got.dtype == dtype
    tolerance = {"rtol": tight, "atol": tight} if dtype == torch.float32 else BF16_TOLERANCE
    torch.testing.assert_close(got.float(), expected.float(), **tolerance)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 512), (37, 64), (3, 5, 20), (2, 7)])  # widths with and without a vector tail
def test_native_rms_norm_equals_torchs(shape, dtype):
    gen = torch.Generator().manual_seed(sum(shape))
    (x, weight), (xf, wf) = _as(dtype, torch.randn(*shape, generator=gen) * 3, torch.randn(shape[-1], generator=gen))
    expected = F.rms_norm(xf, (shape[-1],), wf, 1e-6)
    _close(torch.ops.kvwise.rms_norm(x, weight, 1e-6), expected, dtype, 2e-6)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 512), (37, 64), (2, 7)])
def test_native_add_rms_norm_leaves_the_sum_in_the_residual_and_its_norm_in_x_as_the_torch_form_returns_them(
    shape, dtype
):
    gen = torch.Generator().manual_seed(sum(shape) + 1)
    (x, residual, weight), floats = _as(
        dtype, *torch.randn(2, *shape, generator=gen) * 3, torch.randn(shape[-1], generator=gen)
    )
    expected_norm, expected_sum = ops.TORCH.add_rms_norm(*floats, 1e-6)
    assert torch.equal(expected_sum, floats[0] + floats[1])  # the torch form leaves its inputs as they were
    got_norm, got_sum = NativeOps(64, cpu_kernels.load().choices).add_rms_norm(x, residual, weight, 1e-6)
    assert got_norm is x and got_sum is residual  # written in place
    assert torch.equal(got_sum, expected_sum.to(dtype))  # one rounding of the exact sum
    _close(got_norm, expected_norm, dtype, 2e-6)
    with pytest.raises(RuntimeError, match="residual shaped as x"):
        torch.ops.kvwise.add_rms_norm_(x, residual[:-1], weight, 1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("heads", "kv_heads", "dim", "tokens"), [(8, 4, 64, 1), (4, 4, 16, 33), (6, 2, 10, 5)])
def test_native_rope_rotates_strided_q_and_k_in_place_as_apply_rope_does(heads, kv_heads, dim, tokens, dtype):
    gen = torch.Generator().manual_seed(heads * dim + tokens)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, generator=gen).to(dtype)
    q, k, _ = qkv.split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
    q, k = q.view(tokens, heads, dim), k.view(tokens, kv_heads, dim)  # views into one buffer, as the layer has them
    (cos, sin), (cosf, sinf) = _as(
        dtype, torch.randn(tokens, 1, dim, generator=gen), torch.randn(tokens, 1, dim, generator=gen)
    )
    expected_q, expected_k = apply_rope(q.float(), cosf, sinf), apply_rope(k.float(), cosf, sinf)
    untouched = qkv[:, (heads + kv_heads) * dim :].clone()
    torch.ops.kvwise.rotary_embedding_(q, k, cos, sin)
    _close(q, expected_q, dtype, 1e-6)
    _close(k, expected_k, dtype, 1e-6)
    assert torch.equal(qkv[:, (heads + kv_heads) * dim :], untouched)  # the values are not touched


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("tokens", "size"), [(1, 1376), (16, 20), (3, 7)])
def test_native_silu_and_mul_equals_silu_of_gate_times_up(tokens, size, dtype):
    (gate_up,), (floats,) = _as(dtype, torch.randn(tokens, 2 * size, generator=torch.Generator().manual_seed(size)) * 4)
    gate, up = floats.chunk(2, dim=-1)
    _close(torch.ops.kvwise.silu_and_mul(gate_up), F.silu(gate) * up, dtype, 1e-6)


@pytest.mark.parametrize(
    ("rows", "inputs", "outputs"),
    [
        (1, 512, 1024),
        (1, 1376, 512),
        (3, 13, 37),
        (16, 70, 9),
        (2, 3, 1),
        (5, 200, 24),
    ],  # row counts, tails, short bands
)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_native_matvec_equals_the_matmul_it_replaces(rows, inputs, outputs, bias, dtype):
    gen = torch.Generator().manual_seed(rows * inputs + outputs)
    (x, weight_t, b), (xf, wf, bf) = _as(
        dtype,
        torch.randn(rows, inputs, generator=gen),
        torch.randn(inputs, outputs, generator=gen),
        torch.randn(outputs, generator=gen),
    )
    expected = torch.addmm(bf, xf, wf) if bias else xf @ wf
    got = torch.ops.kvwise.matvec(x, weight_t, b if bias else None)
    if dtype == torch.float32:
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-4)
    else:  # float32 sums of √inputs-sized terms, rounded once to bfloat16
        assert got.dtype == dtype
        torch.testing.assert_close(got.float(), expected, rtol=1.6e-2, atol=1e-2 * inputs**0.5)


@pytest.mark.parametrize("most", [1, 16])
def test_a_native_projection_sends_decode_rows_to_matvec_up_to_its_choice_and_larger_batches_past_it(most):
    choices = replace(cpu_kernels.load().choices, matvec_max_rows=most)
    layer = Linear(64, 48, True, torch.float32, NativeOps(64, choices))
    torch.nn.init.normal_(layer.weight_t)
    torch.nn.init.normal_(layer.bias)
    for rows, native in ((1, True), (most, True), (most + 1, False)):
        x = torch.randn(rows, 64)
        with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            got = layer(x)
        assert ("kvwise::matvec" in {event.name for event in prof.events()}) is native
        torch.testing.assert_close(got, torch.addmm(layer.bias, x, layer.weight_t), rtol=1e-5, atol=1e-4)


def test_the_native_kernels_refuse_what_they_cannot_read_with_a_clear_error():
    with pytest.raises(RuntimeError, match="contiguous x and weight"):
        torch.ops.kvwise.rms_norm(torch.randn(4, 8).t(), torch.randn(4), 1e-6)
    with pytest.raises(RuntimeError, match="float32 or bfloat16"):
        torch.ops.kvwise.silu_and_mul(torch.randn(2, 8, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="of one dtype"):
        torch.ops.kvwise.matvec(torch.randn(1, 8), torch.randn(8, 4, dtype=torch.bfloat16), None)
    with pytest.raises(RuntimeError, match="weight_t \\[in, out\\]"):
        torch.ops.kvwise.matvec(torch.randn(1, 8), torch.randn(9, 4), None)
    with pytest.raises(RuntimeError, match="one element per output"):
        torch.ops.kvwise.matvec(torch.randn(1, 8), torch.randn(8, 4), torch.randn(5))


@pytest.mark.parametrize("kind", ["llama", "qwen3"])  # qwen3: q/k norms before the rope
def test_a_cpu_float32_load_uses_the_native_ops_and_decodes_the_torch_forms_tokens(make_engine, kind):
    engine = make_engine(kind, dtype="float32")
    layers = [m for m in engine.runner.model.modules() if hasattr(m, "ops")]
    assert len({id(m.ops) for m in layers}) == 1 and isinstance(layers[0].ops, NativeOps)  # chosen once, for all
    assert isinstance(engine.runner.sampler.ops, NativeOps)
    prompts = [[5 + i for i in range(n)] for n in (3, 40, 17)]
    params = SamplingParams(max_tokens=16, temperature=0, ignore_eos=True)
    native = [list(o.token_ids) for o in engine.generate(prompts, params)]
    for module in layers:
        module.ops = ops.TORCH
    engine.runner.sampler.ops = ops.TORCH
    engine.runner.paged_decodes = ops.TORCH.paged_decodes
    engine.reset_prefix_cache()
    assert [list(o.token_ids) for o in engine.generate(prompts, params)] == native
