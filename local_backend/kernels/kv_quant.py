"""The KV cache's storage formats: the model's dtype, or 8 bits with one float scale per (token, kv head).

`--kv-cache-dtype int8` stores each token's key and value of each kv head as `head_dim` int8 codes
followed by that row's float32 scale, bit for bit, in the same tensor: a slot is
`[2, kv_heads, head_dim + SCALE_BYTES]` bytes, as llama.cpp's q8_0 block keeps its scale beside its
codes. One tensor per layer, so every layer, kernel and gather reads a slot where it lies, codes
and scale together. Symmetric absmax: scale = absmax(row) / 127, code = round(x · 127 / absmax)
(half to even, both factors computed once per row in float32, as the native kernels compute them),
value = code · scale. `fp8_e4m3` (where torch converts to float8 on the device) keeps the same
layout with float8 codes and 448, its largest finite value, for 127.

    KV bytes per token = 2 × layers × kv_heads × (head_dim × bytes_per_elem + scale bytes)
"""

from __future__ import annotations

from typing import Final

import torch

KV_CACHE_DTYPES: Final = ("auto", "int8", "fp8_e4m3")
"""`--kv-cache-dtype` values (vLLM's option): `auto` stores the model's dtype."""

SCALE_BYTES: Final = 4
"""One float32 scale per stored row, after its codes."""

CODE_DTYPES: Final = {"int8": torch.int8, "fp8_e4m3": getattr(torch, "float8_e4m3fn", None)}
"""The torch dtype of each quantized format's codes (None where this torch has no float8)."""

CODE_MAX: Final = {torch.int8: 127.0, CODE_DTYPES["fp8_e4m3"]: 448.0}
"""The largest code of each codes dtype: a row's absmax maps onto it."""


def supports(kv_cache_dtype: str, device: torch.device) -> bool:
    """Whether torch stores and reads this format on `device` (float8 needs a torch that converts to it there)."""
    codes = CODE_DTYPES.get(kv_cache_dtype)
    if kv_cache_dtype in ("auto", "int8"):
        return True
    if codes is None:
        return False
    try:
        torch.ones(SCALE_BYTES, device=device).to(codes).float()
    except (RuntimeError, TypeError):
        return False
    return True


def storage_dtype(kv_cache_dtype: str, model_dtype: torch.dtype) -> torch.dtype:
    """The cache tensor's dtype: the model's for `auto`, else the format's codes."""
    codes = CODE_DTYPES.get(kv_cache_dtype)
    return model_dtype if codes is None else codes


def is_quantized(kv_cache: torch.Tensor) -> bool:
    """Whether the cache holds codes and scales (its dtype is one of the codes dtypes)."""
    return kv_cache.dtype in CODE_MAX


def row_bytes(head_dim: int, dtype: torch.dtype) -> int:
    """Bytes of one stored row (one token's key or value of one kv head)."""
    return head_dim + SCALE_BYTES if dtype in CODE_MAX else head_dim * dtype.itemsize


def bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
    """2 × layers × kv_heads × (head_dim × bytes_per_elem + scale bytes, for a quantized cache)."""
    return 2 * layers * kv_heads * row_bytes(head_dim, dtype)


def describe_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> str:
    """`bytes_per_token` written out term by term, for the startup log."""
    scales = f" + {SCALE_BYTES} B scale" if dtype in CODE_MAX else ""
    total = bytes_per_token(layers, kv_heads, head_dim, dtype)
    return (
        f"2 x {layers} layers x {kv_heads} kv heads x ({head_dim} x {dtype.itemsize} B{scales}) = {total} B per token"
    )


def allocate(
    layers: int, slots: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """A zeroed cache `[layers, slots, 2, kv_heads, row]`: row = head_dim, or head_dim codes + the scale's bytes."""
    width = head_dim + SCALE_BYTES if dtype in CODE_MAX else head_dim
    return torch.zeros(layers, slots, 2, kv_heads, width, dtype=dtype, device=device)


def quantize(x: torch.Tensor, codes: torch.dtype) -> torch.Tensor:
    """Rows `[..., D]` as stored rows `[..., D + SCALE_BYTES]` of `codes`: codes, then the float32 scale's bytes."""
    top = CODE_MAX[codes]
    absmax = x.abs().amax(-1, keepdim=True).float()
    inverse = torch.where(absmax > 0, torch.full_like(absmax, top) / absmax, torch.zeros_like(absmax))
    scaled = (x.float() * inverse).clamp_(-top, top)
    quantized = scaled.round_().to(codes) if codes == torch.int8 else scaled.to(codes)
    scale = (absmax / torch.full_like(absmax, top)).view(codes)
    return torch.cat((quantized, scale), dim=-1)


def dequantize(stored: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Stored rows `[..., D + SCALE_BYTES]` back to `[..., D]` of `dtype`: code × scale."""
    width = stored.shape[-1] - SCALE_BYTES
    scale = stored[..., width:].contiguous().view(torch.float32)
    return (stored[..., :width].float() * scale).to(dtype)


def store(kv_cache: torch.Tensor, kv: torch.Tensor, slots: torch.Tensor) -> None:
    """Write keys and values `[T, 2, kv_heads, D]` into their slots of one layer's cache, quantized if it is."""
    if not is_quantized(kv_cache):
        kv_cache.index_copy_(0, slots, kv)
        return
    kv_cache.view(torch.int8).index_copy_(0, slots, quantize(kv, kv_cache.dtype).view(torch.int8))


def gather(kv_cache: torch.Tensor, slots: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """One layer's keys and values at `slots`, `[len(slots), 2, kv_heads, D]` in `dtype` (dequantized if stored so)."""
    if not is_quantized(kv_cache):
        return kv_cache.index_select(0, slots)
    stored = kv_cache.view(torch.int8).index_select(0, slots).view(kv_cache.dtype)
    return dequantize(stored, dtype)
