"""A weight kept as a GGUF file's quantized blocks (Q8_0, Q4_0, Q4_1), and the engine's `--quantization` choices.

A decode step streams every weight once, so its speed is the weights' bytes: SmolLM2's Q4_1 file holds
5 bits a weight where float32 takes 32. `QuantizedWeight` keeps a matrix as the file stores it, `[out, in]`
in rows of 32-weight blocks (llama.cpp's `block_q8_0`, `block_q4_0`, `block_q4_1`: an fp16 scale d, in
Q4_1 an fp16 offset m, then the codes q; a weight is d·q + m, Q4_0's m being −8d), and the native kernels
multiply by the blocks directly (`csrc/quant_linear.cpp`, reached through `ops`). Here are the portable
forms: `dequantize` (bit for bit the `gguf` package's `dequantize`, in torch) and `quantize_q8_0` (the
`gguf` package's, and so llama.cpp's, `quantize_row_q8_0`: d = max|x| / 127, q = round(x / d) half away
from zero), which `--quantization q8_0` applies to a float checkpoint's weights at load.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

import torch

QUANTIZATION_AUTO: Final = "auto"
"""Keep the file's own Q8_0, Q4_0 and Q4_1 weights as they are (vLLM's default reads the checkpoint's scheme)."""
QUANTIZATION_NONE: Final = "none"
"""Dequantize every weight to the engine's dtype at load."""
QUANTIZATION_Q8_0: Final = "q8_0"
"""Every projection and the embedding as Q8_0: a float weight quantized at load, another type's requantized."""
QUANTIZATIONS: Final = (QUANTIZATION_AUTO, QUANTIZATION_NONE, QUANTIZATION_Q8_0)
"""`--quantization`'s values (vLLM's flag, with llama.cpp's type names)."""

BLOCK_WEIGHTS: Final = 32
"""Weights per block, in every legacy type."""


class QuantType(enum.IntEnum):
    """The block types kept quantized, by ggml's type ids (`gguf.GGMLQuantizationType`), as the kernels take them."""

    Q4_0 = 2
    Q4_1 = 3
    Q8_0 = 8

    @property
    def block_bytes(self) -> int:
        """Bytes of one block: the fp16 scale (and Q4_1's fp16 offset), then 32 codes of 8 or 4 bits."""
        return {QuantType.Q4_0: 18, QuantType.Q4_1: 20, QuantType.Q8_0: 34}[self]


@dataclass(frozen=True, slots=True)
class QuantizedWeight:
    """A `[out_features, in_features]` matrix as rows of blocks: `blocks` is uint8 `[out, in / 32 · block_bytes]`.

    `QuantizedWeight(QuantType.Q4_1, blocks)` over a GGUF tensor's bytes; `.dequantize()` gives its floats.
    """

    kind: QuantType
    blocks: torch.Tensor

    def __post_init__(self) -> None:
        if self.blocks.dtype != torch.uint8 or self.blocks.dim() != 2 or self.blocks.shape[1] % self.kind.block_bytes:
            raise ValueError(f"QuantizedWeight.blocks must be uint8 [out, whole {self.kind.block_bytes}-byte "
                             f"{self.kind.name} blocks], got {self.blocks.dtype} "
                             f"{list(self.blocks.shape)}")  # fmt: skip

    @property
    def out_features(self) -> int:
        return self.blocks.shape[0]

    @property
    def in_features(self) -> int:
        return self.blocks.shape[1] // self.kind.block_bytes * BLOCK_WEIGHTS

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
    """float32 weights of uint8 rows of `kind` blocks (`[..., row bytes]` → `[..., weights]`), as `gguf` gives them."""
    *lead, row_bytes = blocks.shape
    split = blocks.reshape(-1, kind.block_bytes)
    d = split[:, :2].contiguous().view(torch.float16).float()
    if kind == QuantType.Q8_0:
        values = split[:, 2:].contiguous().view(torch.int8).float() * d
    else:
        codes = split[:, -BLOCK_WEIGHTS // 2 :]
        q = torch.cat((codes & 0x0F, codes >> 4), dim=1).to(torch.int8)
        if kind == QuantType.Q4_0:
            values = (q - 8).float() * d
        else:
            values = d * q.float() + split[:, 2:4].contiguous().view(torch.float16).float()
    return values.reshape(*lead, row_bytes // kind.block_bytes * BLOCK_WEIGHTS)


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
