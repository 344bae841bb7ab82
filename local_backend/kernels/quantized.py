"""A weight kept as a GGUF file's quantized blocks (Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K), and the engine's
`--quantization` choices.

A decode step streams every weight once, so its speed is the weights' bytes: SmolLM2's Q4_1 file holds
5 bits a weight where float32 takes 32. `QuantizedWeight` keeps a matrix as the file stores it, `[out, in]`
in rows of blocks, as llama.cpp's `ggml-common.h` lays them out:
- the legacy types, 32 weights a block (`block_q8_0`, `block_q4_0`, `block_q4_1`): an fp16 scale d, in Q4_1 an
  fp16 offset m, then the codes q; a weight is d·q + m, Q4_0's m being −8d;
- the K-quants, super-blocks of 256 weights (`block_q4_K`, `block_q5_K`, `block_q6_K`): Q4_K and Q5_K an fp16 d
  and dmin, then eight 6-bit scales sc and mins mn packed in 12 bytes, then 4-bit codes (Q5_K's fifth bits in
  32 bytes of their own); a weight of sub-block j (32 weights) is d·sc_j·q − dmin·mn_j. Q6_K: 4-bit low and
  2-bit high codes, sixteen int8 scales (one per 16 weights) and a closing fp16 d; a weight is d·sc·(q − 32).
The native kernels multiply by the blocks directly (`csrc/quant_linear.cpp`, reached through `ops`). Here are
the portable forms: `dequantize` (bit for bit the `gguf` package's `dequantize`, in torch) and `quantize_q8_0`
(the `gguf` package's, and so llama.cpp's, `quantize_row_q8_0`: d = max|x| / 127, q = round(x / d) half away
from zero), which `--quantization q8_0` applies to a float checkpoint's weights at load.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import torch

QUANTIZATION_AUTO: Final = "auto"
"""Keep the file's own blocks of the `QuantType` types as they are (vLLM's default reads the checkpoint's scheme)."""
QUANTIZATION_NONE: Final = "none"
"""Dequantize every weight to the engine's dtype at load."""
QUANTIZATION_Q8_0: Final = "q8_0"
"""Every projection and the embedding as Q8_0: a float weight quantized at load, another type's requantized."""
QUANTIZATIONS: Final = (QUANTIZATION_AUTO, QUANTIZATION_NONE, QUANTIZATION_Q8_0)
"""`--quantization`'s values (vLLM's flag, with llama.cpp's type names)."""

BLOCK_WEIGHTS: Final = 32
"""Weights per block of the legacy types (Q8_0's, so the width `quantize_q8_0` takes a multiple of), and per
sub-block of a K-quant."""
SUPER_BLOCK_WEIGHTS: Final = 256
"""Weights per super-block of a K-quant (ggml's `QK_K`)."""


class QuantType(enum.IntEnum):
    """The block types kept quantized, by ggml's type ids (`gguf.GGMLQuantizationType`), as the kernels take them."""

    Q4_0 = 2
    Q4_1 = 3
    Q8_0 = 8
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14

    @property
    def block_bytes(self) -> int:
        """Bytes of one block (`ggml-common.h`'s `sizeof(block_…)`)."""
        return {
            QuantType.Q4_0: 18,
            QuantType.Q4_1: 20,
            QuantType.Q8_0: 34,
            QuantType.Q4_K: 144,
            QuantType.Q5_K: 176,
            QuantType.Q6_K: 210,
        }[self]

    @property
    def block_weights(self) -> int:
        """Weights of one block: 32 in the legacy types, 256 in the K-quants' super-blocks."""
        return SUPER_BLOCK_WEIGHTS if self >= QuantType.Q4_K else BLOCK_WEIGHTS


@dataclass(frozen=True, slots=True)
class QuantizedWeight:
    """A `[out_features, in_features]` matrix as rows of blocks: `blocks` is uint8
    `[out, in / block_weights · block_bytes]`.

    `QuantizedWeight(QuantType.Q4_1, blocks)` over a GGUF tensor's bytes; `.dequantize()` gives its floats.
    """

    kind: QuantType
    blocks: torch.Tensor

    def __post_init__(self) -> None:
        if self.blocks.dtype != torch.uint8 or self.blocks.dim() != 2 or self.blocks.shape[1] % self.kind.block_bytes:
            raise ValueError(
                f"QuantizedWeight.blocks must be uint8 [out, whole {self.kind.block_bytes}-byte "
                f"{self.kind.name} blocks], got {self.blocks.dtype} "
                f"{list(self.blocks.shape)}"
            )

    @property
    def out_features(self) -> int:
        return self.blocks.shape[0]

    @property
    def in_features(self) -> int:
        return self.blocks.shape[1] // self.kind.block_bytes * self.kind.block_weights

    def dequantize(self) -> torch.Tensor:
        """The float32 `[out, in]` matrix (the portable form; the native one is `kvwise::quant_rows`)."""
        return dequantize_rows(self.kind, self.blocks)

    def rows(self, order: torch.Tensor) -> QuantizedWeight:
        """The same weight with its rows (outputs) taken in `order`, e.g. a permutation of a head's rows."""
        return QuantizedWeight(self.kind, self.blocks[order].contiguous())

    @staticmethod
    def stack(parts: list[QuantizedWeight]) -> QuantizedWeight:
        """Matrices of one type and input width, their rows one after another (q, k and v into one projection)."""
        kinds = {(part.kind, part.in_features) for part in parts}
        if len(kinds) != 1:
            raise ValueError(f"QuantizedWeight.stack: parts of one type and width, got {sorted(kinds)}")
        return QuantizedWeight(parts[0].kind, torch.cat([part.blocks for part in parts]))


def dequantize_rows(kind: QuantType, blocks: torch.Tensor) -> torch.Tensor:
    """float32 weights of uint8 rows of `kind` blocks (`[..., row bytes]` → `[..., weights]`), as `gguf` gives them.

    Each block is its codes times a scale per group of codes, plus an offset per group (or none); every product
    is exact in float32 (an fp16 scale times a code of at most 6 bits and a sub-scale of at most 8), so the one
    rounding is the offset's sum, as in `gguf`'s formulas.
    """
    *lead, row_bytes = blocks.shape
    split = blocks.reshape(-1, kind.block_bytes)
    codes, scales, offsets = _UNPACK[kind](split)
    groups = scales.shape[1]
    values = codes.float().reshape(-1, groups, kind.block_weights // groups) * scales.unsqueeze(-1)
    if offsets is not None:
        values = values + offsets.unsqueeze(-1)
    return values.reshape(*lead, row_bytes // kind.block_bytes * kind.block_weights)


Unpacked = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]
"""A type's blocks `[n, block bytes]` as codes `[n, weights]`, scales `[n, groups]` (float32) and offsets
`[n, groups]` (float32, or None): a weight is code · scale + offset."""


def _halves(split: torch.Tensor, start: int) -> torch.Tensor:
    """The fp16 at byte `start` of each block, as a float32 column."""
    return split[:, start : start + 2].contiguous().view(torch.float16).float()


def _nibbles(codes: torch.Tensor) -> torch.Tensor:
    """Rows of bytes in groups of g `[n, groups, g]` → `[n, groups · 2g]`: each group's low nibbles, then its high."""
    return torch.stack((codes & 0x0F, codes >> 4), dim=-2).reshape(codes.shape[0], -1)


def _legacy(kind: QuantType) -> Callable[[torch.Tensor], Unpacked]:
    """Q8_0's, Q4_0's or Q4_1's unpacking: one group a block, the codes after the fp16 d (and Q4_1's m)."""

    def unpack(split: torch.Tensor) -> Unpacked:
        d = _halves(split, 0)
        if kind == QuantType.Q8_0:
            return split[:, 2:].contiguous().view(torch.int8), d, None
        q = _nibbles(split[:, -BLOCK_WEIGHTS // 2 :].unsqueeze(1))
        if kind == QuantType.Q4_0:
            return q.to(torch.int8) - 8, d, None
        return q, d, _halves(split, 2)

    return unpack


def _k_scales(split: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_K's and Q5_K's d·sc_j and −dmin·mn_j `[n, 8]`: the 6-bit sc and mn of its 12 bytes (`get_scale_min_k4`)."""
    packed = split[:, 4:16]
    low, mid, high = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    sc = torch.cat((low & 0x3F, (high & 0x0F) | ((low >> 2) & 0x30)), dim=1)
    mn = torch.cat((mid & 0x3F, (high >> 4) | ((mid >> 2) & 0x30)), dim=1)
    return _halves(split, 0) * sc.float(), -(_halves(split, 2) * mn.float())


def _q4_k(split: torch.Tensor) -> Unpacked:
    return _nibbles(split[:, 16:].reshape(-1, 4, 32)), *_k_scales(split)


def _q5_k(split: torch.Tensor) -> Unpacked:
    high = split[:, 16:48].unsqueeze(1) >> torch.arange(8, dtype=torch.uint8).unsqueeze(1) & 1  # sub-block j: bit j
    return _nibbles(split[:, 48:].reshape(-1, 4, 32)) | (high.reshape(-1, SUPER_BLOCK_WEIGHTS) << 4), *_k_scales(split)


def _q6_k(split: torch.Tensor) -> Unpacked:
    low = _nibbles(split[:, :128].reshape(-1, 2, 64))
    high = split[:, 128:192].reshape(-1, 2, 1, 32) >> torch.tensor([0, 2, 4, 6], dtype=torch.uint8).view(4, 1) & 3
    q = (low | (high.reshape(-1, SUPER_BLOCK_WEIGHTS) << 4)).to(torch.int8) - 32
    return q, _halves(split, 208) * split[:, 192:208].contiguous().view(torch.int8).float(), None


_UNPACK: Final[dict[QuantType, Callable[[torch.Tensor], Unpacked]]] = {
    QuantType.Q8_0: _legacy(QuantType.Q8_0),
    QuantType.Q4_0: _legacy(QuantType.Q4_0),
    QuantType.Q4_1: _legacy(QuantType.Q4_1),
    QuantType.Q4_K: _q4_k,
    QuantType.Q5_K: _q5_k,
    QuantType.Q6_K: _q6_k,
}


def quantize_q8_0(weight: torch.Tensor) -> QuantizedWeight:
    """A float `[out, in]` matrix (in a multiple of 32) as Q8_0 blocks, as llama.cpp's `quantize_row_q8_0`."""
    out, width = weight.shape
    if width % BLOCK_WEIGHTS:
        raise ValueError(f"quantize_q8_0: rows of {width} weights are not whole {BLOCK_WEIGHTS}-weight blocks")
    values = weight.detach().float().reshape(-1, BLOCK_WEIGHTS)
    d = values.abs().amax(dim=1, keepdim=True) / 127
    inverse = torch.where(d == 0, 0.0, 1 / d)
    scaled = values * inverse
    q = (scaled.sign() * (scaled.abs() + 0.5).floor()).to(torch.int8)
    blocks = torch.cat((d.to(torch.float16).view(torch.uint8), q.view(torch.uint8)), dim=1)
    return QuantizedWeight(QuantType.Q8_0, blocks.reshape(out, -1))
