"""Quantized weights (local_backend/kernels/quantized.py, csrc/quant_linear.cpp): Q8_0, Q4_0, Q4_1, Q4_K, Q5_K and Q6_K
blocks multiplied as they are, against the `gguf` package's dequantization (shared with this code by nothing but the
block layout).

The portable forms dequantize and quantize bit for bit as `gguf` does. The kernels (`kvwise::quant_matvec` for
decode rows, `kvwise::quant_mm` for prefill rows, `kvwise::quant_rows` for embedding lookups) give the float product
with the dequantized matrix, up to the order of the sums, on random blocks and on the real SmolLM2 file's tensors;
the decode kernel of the AVX2 and AVX-512 builds multiplies in integers by x rounded to 16 bits a block (as
llama.cpp's, which rounds to 8), so it gives that product with x so rounded (`decode_product`), which lies within
half a step of x's rounding (Σ|d·q|·dx/2) of the float product. `test_cpu_kernels.py` runs this module again in a
process per capability (AVX-512, AVX2 and the portable build), so each path this CPU executes is checked. The real
file is Q4_1 and Q8_0 only: the K-quants are checked on random blocks, and a GGUF file holding them is loaded and
served from its blocks.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize, quantize
from safetensors.torch import load_file

from local_backend import Engine, SamplingParams
from local_backend._constants import QUANT_MATVEC_MAX_ROWS
from local_backend.kernels import cpu_kernels, ops
from local_backend.kernels.quantized import (
    QUANTIZATION_AUTO,
    QUANTIZATION_NONE,
    QUANTIZATION_Q8_0,
    QuantizedWeight,
    QuantType,
    dequantize_rows,
    quantize_q8_0,
)
from local_backend.model.gguf_file import read_gguf
from local_backend.model.model_names import open_checkpoint, resolve_model
from tests.local_backend.model.test_gguf_loader import DEFAULT, MESSAGES, gguf_name, write_gguf

ROWS = [1, 2, 3, 4, 5, 8, 9, 33]
"""Rows of x: each remainder of the kernels' groups of four, and prefill-sized batches."""
X_CODE_MAX = 32767
"""The integer decode kernels round x to int16 codes (`csrc/quant_linear.cpp`'s X_CODE_MAX)."""
X_BLOCK = 32
"""The integer decode kernels round x a block of 32 at a time: a legacy block, a K-quant's sub-block."""
K_QUANTS = [QuantType.Q4_K, QuantType.Q5_K, QuantType.Q6_K]

HALVES = {
    QuantType.Q8_0: {0: 0.02},
    QuantType.Q4_0: {0: 0.02},
    QuantType.Q4_1: {0: 0.02, 2: -0.1},
    QuantType.Q4_K: {0: 0.002, 2: 0.002},
    QuantType.Q5_K: {0: 0.002, 2: 0.002},
    QuantType.Q6_K: {208: 0.002},
}
"""Each type's fp16 fields, by byte offset in its block, and their scale (negative: of either sign): d, Q4_1's m,
the K-quants' dmin."""
OFFSET_CODES = {
    QuantType.Q4_0: slice(2, 18),
    QuantType.Q4_1: slice(4, 20),
    QuantType.Q4_K: slice(16, 144),
    QuantType.Q5_K: slice(16, 176),
}
"""The code bytes of the types whose kernels add an offset m per 32 weights (a block's weight with code 0); the
others' kernels take signed codes (Q8_0's, Q6_K's q − 32) and no offset."""


def random_blocks(kind: QuantType, out: int, width: int, seed: int) -> np.ndarray:
    """`[out, width]` weights of `kind` as uint8 rows of blocks: random codes, scales and offsets as a file's are
    (random bytes, finite fp16 fields)."""
    gen = np.random.default_rng(seed)
    count = width // kind.block_weights
    blocks = gen.integers(0, 256, size=(out, count, kind.block_bytes), dtype=np.uint8)
    for start, scale in HALVES[kind].items():
        values = gen.standard_normal((out, count, 1)) * abs(scale)
        blocks[..., start : start + 2] = (values if scale < 0 else np.abs(values)).astype(np.float16).view(np.uint8)
    return blocks.reshape(out, -1)


def reference(kind: QuantType, blocks: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(dequantize(blocks, Q(int(kind))), dtype=np.float32))


def integer_decode() -> bool:
    """Whether this process's decode kernel multiplies in integers (every build but the portable one)."""
    kernels = cpu_kernels.loaded()
    assert kernels is not None
    return kernels.capability != "DEFAULT"


def decode_product(kind: QuantType, blocks: np.ndarray, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What `quant_matvec` gives for float32 `x`, in float64, and how far that may lie from the float product.

    Portable build: x @ Wᵀ, the bound 0. Integer builds: each 32-weight block of x rounded to 16 bits as the kernel
    rounds it, in float32 (dx = max|x| / 32767, qx = x · (1 / dx) rounded half away from zero), multiplied by the
    codes' part of W (d·q), plus each block's offset m (the weight its code 0 gives) times the block's exact Σ x;
    the bound is Σ|d·q|·dx/2, half a rounding step.
    """
    dense = reference(kind, blocks).double()
    if not integer_decode():
        return x.double() @ dense.T, torch.zeros(x.shape[0], dense.shape[0], dtype=torch.float64)
    rows, width = x.shape
    offsets = torch.zeros_like(dense)
    if kind in OFFSET_CODES:
        zeroed = blocks.reshape(blocks.shape[0], -1, kind.block_bytes).copy()
        zeroed[..., OFFSET_CODES[kind]] = 0
        offsets = reference(kind, zeroed.reshape(blocks.shape)).double()
    codes_part = dense - offsets  # d·q
    xb = x.float().reshape(rows, -1, X_BLOCK)
    dx = xb.abs().amax(dim=2, keepdim=True) / X_CODE_MAX
    scaled = xb * torch.where(dx == 0, 0.0, 1 / dx)
    qx = scaled.sign() * (scaled.abs() + 0.5).floor()
    rounded = (qx.double() * dx.double()).reshape(rows, width)
    product = rounded @ codes_part.T + x.double() @ offsets.T
    bound = (dx.double() / 2).expand(-1, -1, X_BLOCK).reshape(rows, width) @ codes_part.abs().T
    return product, bound


def assert_decode(got: torch.Tensor, kind: QuantType, blocks: np.ndarray, x: torch.Tensor, bias, dtype) -> None:
    """`quant_matvec`'s answer is `decode_product`'s (as `assert_product` holds it), and that lies within its bound
    of the float product with the dequantized matrix."""
    product, bound = decode_product(kind, blocks, x.float())
    b = bias.double() if bias is not None else 0
    assert_product(got, (product + b).float(), dtype)
    exact = x.double() @ reference(kind, blocks).double().T
    assert ((product - exact).abs() <= bound * (1 + 1e-6) + 1e-9).all()


def native() -> ops.NativeOps:
    kernels = cpu_kernels.load()
    assert kernels is not None
    return ops.NativeOps(64, kernels.choices)


def assert_product(got: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    """float32: the float product up to the order of its sums; bfloat16: within its rounding of the result."""
    scale = expected.abs().max().item()
    if dtype == torch.float32:
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5 * scale)
    else:
        torch.testing.assert_close(got.float(), expected, rtol=1e-2, atol=1e-2 * scale)


@pytest.mark.parametrize("kind", list(QuantType), ids=lambda kind: kind.name)
def test_the_portable_dequantization_is_gguf_s_bit_for_bit(kind: QuantType) -> None:
    blocks = random_blocks(kind, 40, 3 * kind.block_weights, seed=int(kind))
    weight = QuantizedWeight(kind, torch.from_numpy(blocks))
    assert (weight.out_features, weight.in_features) == (40, 3 * kind.block_weights)
    expected = reference(kind, blocks)
    assert torch.equal(weight.dequantize().view(torch.int32), expected.view(torch.int32))  # zeros' signs too
    assert torch.equal(
        dequantize_rows(kind, torch.from_numpy(blocks[7])).view(torch.int32), expected[7].view(torch.int32)
    )


def test_q8_0_quantization_is_gguf_s_and_so_llama_cpp_s_bit_for_bit() -> None:
    weight = torch.randn(48, 128, generator=torch.Generator().manual_seed(0))
    weight[3] = 0  # a block of zeros has the scale 0 and the codes 0
    weight[5, :32] *= 1e4
    got = quantize_q8_0(weight)
    assert got.kind == QuantType.Q8_0 and (got.out_features, got.in_features) == (48, 128)
    assert np.array_equal(got.blocks.numpy(), quantize(weight.numpy(), Q.Q8_0))
    assert (got.dequantize() - weight).abs().max() <= weight.abs().max() / 127


@pytest.mark.parametrize("kind", list(QuantType), ids=lambda kind: kind.name)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("bias", [False, True])
def test_the_kernels_multiply_random_blocks_as_the_dequantized_matrix(
    kind: QuantType, dtype: torch.dtype, bias: bool
) -> None:
    form = native()
    out, width = 72, 5 * kind.block_weights  # an odd count of blocks (the K-quants' 40 sub-blocks, in pairs)
    blocks = random_blocks(kind, out, width, seed=10 + int(kind))
    weight = QuantizedWeight(kind, torch.from_numpy(blocks))
    dense = reference(kind, blocks)
    gen = torch.Generator().manual_seed(1)
    b = torch.randn(out, generator=gen).to(dtype) if bias else None
    for rows in ROWS:
        x = torch.randn(rows, width, generator=gen).to(dtype)
        xf, bf = x.float(), (b.float() if b is not None else 0)
        # the decode kernel multiplies by the blocks' exact values; the prefill one by a tile of them in x's dtype
        assert_decode(torch.ops.kvwise.quant_matvec(x, weight.blocks, int(kind), b), kind, blocks, x, b, dtype)
        tile = dense.to(dtype).float()
        assert_product(torch.ops.kvwise.quant_mm(x, weight.blocks, int(kind), b), xf @ tile.T + bf, dtype)
        got = form.quantized_linear(x, weight, b)
        assert got.dtype == dtype and got.shape == (rows, out)
        if rows <= QUANT_MATVEC_MAX_ROWS:
            assert_decode(got, kind, blocks, x, b, dtype)
        else:
            assert_product(got, xf @ tile.T + bf, dtype)
        assert_product(ops.TORCH.quantized_linear(x, weight, b), xf @ tile.T + bf, dtype)
    ids = torch.tensor([[5, 0], [71, 5]])
    assert torch.equal(form.quantized_rows(weight, ids, torch.float32), dense[ids])
    assert torch.equal(form.quantized_rows(weight, ids, torch.bfloat16), dense[ids].bfloat16())
    assert torch.equal(ops.TORCH.quantized_rows(weight, ids, torch.float32), dense[ids])


def test_the_kernels_refuse_what_is_not_whole_blocks_or_ids_past_the_rows() -> None:
    native()
    blocks = torch.zeros(4, 35, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match="row of 35 bytes is not whole 34-byte blocks"):
        torch.ops.kvwise.quant_matvec(torch.zeros(1, 32), blocks, int(QuantType.Q8_0), None)
    with pytest.raises(RuntimeError, match="ggml type 10 is not one of"):  # Q2_K: dequantized at load
        torch.ops.kvwise.quant_mm(torch.zeros(9, 32), blocks, int(Q.Q2_K), None)
    with pytest.raises(RuntimeError, match="id 4 is not a row of 4"):
        torch.ops.kvwise.quant_rows(
            torch.zeros(4, 34, dtype=torch.uint8), int(QuantType.Q8_0), torch.tensor([4]), torch.float32
        )
    with pytest.raises(ValueError, match="whole 20-byte Q4_1 blocks"):
        QuantizedWeight(QuantType.Q4_1, blocks)


@pytest.mark.parametrize("kind", K_QUANTS, ids=lambda kind: kind.name)
def test_a_k_quant_tensor_of_a_wrong_byte_count_is_refused(kind: QuantType) -> None:
    native()
    blocks = torch.from_numpy(random_blocks(kind, 4, 2 * kind.block_weights, seed=3))
    short = blocks[:, 1:].contiguous()  # a byte short of two super-blocks: one and a fragment
    with pytest.raises(ValueError, match=f"whole {kind.block_bytes}-byte {kind.name} blocks"):
        QuantizedWeight(kind, short)
    with pytest.raises(ValueError, match=f"whole {kind.block_bytes}-byte {kind.name} blocks"):
        QuantizedWeight(kind, torch.zeros(4, QuantType.Q8_0.block_bytes, dtype=torch.uint8))  # a legacy row
    with pytest.raises(RuntimeError, match=f"not whole {kind.block_bytes}-byte blocks"):
        torch.ops.kvwise.quant_matvec(torch.zeros(1, 2 * kind.block_weights), short, int(kind), None)
    with pytest.raises(RuntimeError, match=f"not whole {kind.block_bytes}-byte blocks"):
        torch.ops.kvwise.quant_rows(short, int(kind), torch.tensor([0]), torch.float32)


SMOLLM2_TENSORS = ["token_embd.weight", "blk.0.attn_q.weight", "blk.7.attn_k.weight", "blk.29.ffn_down.weight"]
"""The real file's Q8_0 embedding (its tied lm_head) and Q4_1 projections of every shape class."""


@pytest.fixture(scope="module")
def smollm2() -> Path:
    return resolve_model("smollm2-135m-instruct")


@pytest.mark.parametrize("name", SMOLLM2_TENSORS)
def test_the_kernels_multiply_the_real_file_s_tensors_as_their_dequantized_matrix(smollm2: Path, name: str) -> None:
    form = native()
    file = read_gguf(smollm2)
    [tensor] = [t for t in file.tensors if t.name == name]
    assert tensor.kind in (Q.Q4_1, Q.Q8_0)
    raw = np.array(file.raw(tensor))
    weight = QuantizedWeight(QuantType(int(tensor.kind)), torch.from_numpy(raw))
    dense = torch.from_numpy(np.array(dequantize(raw, tensor.kind), dtype=np.float32))
    assert torch.equal(weight.dequantize(), dense)
    gen = torch.Generator().manual_seed(2)
    for rows in (1, 4, 6, 40):
        x = torch.randn(rows, weight.in_features, generator=gen)
        x[:, 3] *= 100  # an outlier channel, as SmolLM2's activations have: its blocks round the others coarsely
        got = form.quantized_linear(x, weight, None)
        if rows <= QUANT_MATVEC_MAX_ROWS:
            assert_decode(got, weight.kind, raw, x, None, torch.float32)
        else:
            assert_product(got, x @ dense.T, torch.float32)
    ids = torch.randint(0, weight.out_features, (16,), generator=gen)
    assert torch.equal(form.quantized_rows(weight, ids, torch.float32), dense[ids])


def test_a_bfloat16_engine_takes_logits_from_the_file_s_lm_head_blocks_in_float32(smollm2: Path) -> None:
    native()
    engine = Engine.from_pretrained(smollm2, device="cpu", dtype="bfloat16", max_model_len=256, kv_cache_memory=2**21)
    try:
        model = engine.core.runner.model
        lm_head = model.lm_head.quantized
        assert lm_head is not None
        hidden = torch.randn(3, lm_head.in_features, generator=torch.Generator().manual_seed(5)).bfloat16()
        logits = model.logits(hidden)
        assert logits.dtype == torch.float32
        product = torch.ops.kvwise.quant_matvec(hidden.float(), lm_head.blocks, int(lm_head.kind), None)
        assert torch.equal(logits, product)
        assert not torch.equal(logits, logits.bfloat16().float())  # not rounded through bfloat16 on the way
    finally:
        engine.close()


K_TENSORS = {
    "blk.0.attn_q.weight": Q.Q4_K,
    "blk.0.attn_k.weight": Q.Q4_K,
    "blk.0.attn_v.weight": Q.Q4_K,
    "blk.0.attn_output.weight": Q.Q5_K,
    "blk.1.ffn_gate.weight": Q.Q6_K,
    "blk.1.ffn_up.weight": Q.Q6_K,
    "token_embd.weight": Q.Q6_K,
}
"""The bundled model's tensors written as K-quants (those 256 wide: ffn_down's 704 is no whole super-block); the
embedding is the tied lm_head too."""


def row_blocks(kind: QuantType, values: np.ndarray) -> np.ndarray:
    """K-quant blocks standing for `values [out, in]`: random, each row's seeded by that row's values, so a
    permutation of the rows (llama.cpp's of q and k) permutes the blocks alike. (`gguf` quantizes no K-quant.)"""
    rows = [random_blocks(kind, 1, values.shape[1], seed=zlib.crc32(row.tobytes())) for row in values]
    return np.concatenate(rows)


def test_a_gguf_file_s_k_quant_tensors_are_kept_as_their_blocks_and_served_from_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    native()
    quantize_as_gguf = gguf.quants.quantize
    monkeypatch.setattr(
        gguf.quants,
        "quantize",
        lambda values, kind: (
            row_blocks(QuantType(int(kind)), values) if kind in K_TENSORS.values() else quantize_as_gguf(values, kind)
        ),
    )
    path = write_gguf(tmp_path / "k_quants.gguf", types=K_TENSORS)
    monkeypatch.undo()
    assert {t.name: t.tensor_type for t in gguf.GGUFReader(path).tensors if t.name in K_TENSORS} == K_TENSORS
    loaded = dict(open_checkpoint(str(path)).tensors())
    for hf_name, original in load_file(DEFAULT / "model.safetensors").items():
        kind = K_TENSORS.get(gguf_name(hf_name))
        if kind is not None:  # as the file holds it, q's and k's rows back in Hugging Face's order
            ours = loaded[hf_name]
            assert isinstance(ours, QuantizedWeight) and ours.kind.name == kind.name
            assert np.array_equal(ours.blocks.numpy(), row_blocks(QuantType(int(kind)), original.float().numpy()))
    answers: dict[str, list[int]] = {}
    kept_types = {QUANTIZATION_NONE: "", QUANTIZATION_AUTO: "Q4_K,Q5_K,Q6_K", QUANTIZATION_Q8_0: "Q8_0"}
    for quantization, kept in kept_types.items():
        engine = Engine.from_pretrained(
            path, device="cpu", dtype="float32", max_model_len=256, kv_cache_memory=2**21, quantization=quantization
        )
        try:
            assert engine.stats().quantized_types == kept
            prompt = engine.tokenizer.chat_prompt(MESSAGES[0])
            [out] = engine.generate([prompt], SamplingParams(max_tokens=8, temperature=0, ignore_eos=True))
            answers[quantization] = list(out.token_ids)
        finally:
            engine.close()
    assert answers[QUANTIZATION_AUTO] == answers[QUANTIZATION_NONE]  # the kernels' product is the dequantized weights'
