"""The engine's ops: each in its torch form, with its native CPU form beside it, chosen once at load.

As vLLM's `CustomOp` picks `forward_native` or `forward_cpu` when a layer is built, `select` picks,
once per engine, the set of ops its tensors run: `NativeOps` (the kernels `cpu_kernels` builds) on
CPU in float32 or bfloat16 (`NATIVE_DTYPES`) when they build, else `TorchOps`. The model's layers,
attention, the model runner and the sampler hold the set they were given and call `ops.<name>(...)`;
none asks whether a kernel is there. A native op takes its torch form for inputs its kernel does not
read, or reads slower (more rows or keys than its `KernelChoices` say, a non-contiguous input, a
head size that is not a multiple of `cpu_kernels.HEAD_DIM_MULTIPLE`); both forms give the same
tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import torch
import torch.nn.functional as F

from local_backend._constants import (
    BF16_PREFILL_KERNEL_MIN_QUERIES,
    BF16_WIDENED_PREFILL_MIN_QUERIES,
    ONEDNN_MIN_ROWS,
    QUANT_MATVEC_MAX_ROWS,
    SAMPLER_CHUNK,
)
from local_backend.kernels import cpu_kernels, kv_quant
from local_backend.kernels.kernel_choices import KernelChoices
from local_backend.kernels.quantized import QuantizedWeight


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x·cos + rotate_half(x)·sin with `x [T, heads, D]`, `cos`/`sin` `[T, 1, D]`."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def chunk_sums(w: torch.Tensor) -> torch.Tensor:
    """Σw over each chunk of `SAMPLER_CHUNK` tokens of each row (float64; the last chunk may be short).

    Each chunk is summed in float32 (exact enough for a chunk this short, and much faster than in
    float64), the chunks' sums are kept in float64.
    """
    size = min(SAMPLER_CHUNK, w.shape[1])
    whole = w.shape[1] // size
    return torch.cat((w.unfold(1, size, size).sum(-1), w[:, whole * size :].sum(-1, True)), dim=1).double()


def heavier_mass(w: torch.Tensor, chosen: torch.Tensor, scratch: torch.Tensor) -> torch.Tensor:
    """Σ of each row's weights above its `chosen` one (`[rows, 1]`), the top-p test's mass.

    Computed as c · Σ threshold(w / c, 1): two float passes and a sum, where a comparison into a
    mask and a `where` take longer (a bool-producing comparison against a per-row value does not
    vectorise on CPU). A drawn token has c > 0; `tiny` keeps 0 / 0 out regardless.
    """
    c = chosen.clamp(min=torch.finfo(w.dtype).tiny)
    return torch.threshold_(torch.div(w, c, out=scratch), 1.0, 0.0).sum(-1) * c[:, 0]


def draw(w: torch.Tensor, uniforms: torch.Tensor, sums: torch.Tensor | None = None) -> torch.Tensor:
    """Token ids drawn from w / Σw per row by inverse CDF, one uniform in [0, 1) per row.

    Σ over chunks (`chunk_sums`, given or computed here) picks the chunk, a cumulative sum inside it
    the token: one pass over w, in float64 where it is summed.
    """
    rows, vocab = w.shape
    size = min(SAMPLER_CHUNK, vocab)
    sums = chunk_sums(w) if sums is None else sums
    cdf = sums.cumsum(-1)
    target = (uniforms * cdf[:, -1])[:, None]
    chunk = torch.searchsorted(cdf, target, right=True).clamp_(max=sums.shape[1] - 1)
    offset = target - (cdf.gather(1, chunk) - sums.gather(1, chunk))
    cols = chunk * size + torch.arange(size, device=w.device)
    part = w.gather(1, cols.clamp(max=vocab - 1)).double() * (cols < vocab)
    inside = part.cumsum(-1)
    last = (inside < inside[:, -1:]).sum(-1, keepdim=True)  # the chunk's last token of weight > 0
    pick = torch.minimum(torch.searchsorted(inside, offset, right=True), last)
    return (chunk * size + pick).squeeze(1)


def apply_penalties(values: torch.Tensor, offsets: torch.Tensor, repetition: torch.Tensor) -> torch.Tensor:
    """vLLM penalties on the logits of seen tokens (prompt or output), one entry per token, in place.

    logit / r if logit > 0 else logit × r; then minus the entry's offset (frequency × output count
    + presence × [output count > 0]). `offsets` and `repetition` are given per entry. `values` is
    used up: the comparison and the quotient are taken before its in-place product.
    """
    return torch.where(values > 0, values / repetition, values.mul_(repetition)).sub_(offsets)


FLOAT_WEIGHT: Final = -1
"""`LayerStack.kinds`' name for a float `weight_t [in, out]` (a kept weight's kind is its `QuantType` id)."""


@dataclass(frozen=True, slots=True)
class LayerStack:
    """Every decoder layer's weights in the flat lists `NativeOps.decode_layers` reads, layer after layer: two
    norms (input, post-attention) and four projections (qkv, o, gate_up, down) a layer, each projection a
    weight (blocks, or a float `weight_t`), its kind and its bias. `llama.CausalLM.layer_stack` builds it."""

    norms: list[torch.Tensor]
    weights: list[torch.Tensor]
    kinds: list[int]
    biases: list[torch.Tensor | None]
    q_size: int
    kv_size: int
    head_dim: int
    eps: float


class TorchOps:
    """The portable forms (vLLM's `forward_native`): torch ops on any device and dtype.

    `paged_decodes`: whether decode attention reads the cache in place by block table (the model
    runner lays decodes out for it); these forms gather contexts into SDPA groups instead.
    `onednn_min_rows`: rows from which a projection multiplies by oneDNN's prepacked weight.
    """

    paged_decodes = False
    onednn_min_rows = ONEDNN_MIN_ROWS

    def linear(
        self, x: torch.Tensor, weight_t: torch.Tensor, bias: torch.Tensor | None, packed: torch.Tensor | None
    ) -> torch.Tensor:
        """x·W + b with `weight_t [in, out]`; oneDNN's prepacked W (`packed`) for batches of rows."""
        if packed is not None and x.shape[0] >= self.onednn_min_rows:
            return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
        if bias is None:
            return x @ weight_t
        return torch.addmm(bias, x, weight_t)

    def quantized_linear(self, x: torch.Tensor, weight: QuantizedWeight, bias: torch.Tensor | None) -> torch.Tensor:
        """x·Wᵀ + b with W kept as quantized blocks; this form dequantizes all of W on every call (no engine
        keeps blocks without the native kernels: the loader dequantizes them at load instead)."""
        return F.linear(x, weight.dequantize().to(x.dtype), bias)

    def quantized_rows(self, weight: QuantizedWeight, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The rows of W at `ids` (an embedding's lookups), dequantized to `dtype`: `[*ids.shape, in]`."""
        return weight.rows(ids.reshape(-1)).dequantize().to(dtype).reshape(*ids.shape, -1)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """x / √(mean(x²) + eps) · weight."""
        return F.rms_norm(x, weight.shape, weight, eps)

    def add_rms_norm(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(rms_norm(x + residual), x + residual): a layer's residual add and the next norm. Both inputs
        are the step's own; a form may overwrite them with the results."""
        summed = x + residual
        return self.rms_norm(summed, weight, eps), summed

    def rotary_embedding(
        self, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """q and k rotated by position (`apply_rope`); a form may rotate them in place."""
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin)

    def silu_and_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        """silu(gate) · up of `[T, 2 × size]` rows, gate first."""
        gate, up = gate_up.chunk(2, dim=-1)
        return F.silu(gate) * up

    def write_kv(self, kv_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor) -> None:
        """Store each token's key and value (`[T, kv_heads, D]`) in its slot of `kv_cache` (quantized if it is)."""
        kv_quant.store(kv_cache, torch.stack((k, v), dim=1), slots)

    def read_kv(self, kv_cache: torch.Tensor, slots: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The cache's `[len(slots), 2, kv_heads, D]` keys and values at `slots`, in `dtype` (dequantized)."""
        return kv_quant.gather(kv_cache, slots, dtype)

    def prefill_attention(
        self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None, scale: float
    ) -> torch.Tensor:
        """Causal attention of a chunk's queries `[n, H, D]` over its context → `[n, H × D]`.

        `mask` (`[n, context]`) shifts the causal mask by the tokens cached before the chunk; None:
        the chunk is the whole context.
        """
        out = F.scaled_dot_product_attention(
            q.transpose(0, 1).unsqueeze(0),
            keys.transpose(0, 1).unsqueeze(0),
            values.transpose(0, 1).unsqueeze(0),
            attn_mask=mask,
            is_causal=mask is None,
            scale=scale,
            enable_gqa=True,
        )
        return out[0].transpose(0, 1).reshape(len(q), -1)

    def decode_layers(
        self,
        x: torch.Tensor,
        stack: LayerStack,
        cos: torch.Tensor,
        sin: torch.Tensor,
        kv_cache: torch.Tensor,
        paged: tuple[torch.Tensor, torch.Tensor, torch.Tensor, int],
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Every layer of a step of decodes alone in one call: (the last layer's MLP output, the residual stream
        before it), as `llama.DecoderLayer` gives them; `paged` is the step's (slot_mapping, block_tables,
        context_lens, block_size). None where no single kernel serves the step: the model runs its layers."""
        return None

    def paged_decode_attention(
        self,
        q: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        context_lens: torch.Tensor,
        block_size: int,
        scale: float,
    ) -> torch.Tensor:
        """Single-token queries `[rows, H, D]` over their contexts, found by block table → `[rows, H × D]`.

        This form gathers every row's context, padded to the longest and masked, into one SDPA call.
        """
        rows = len(q)
        offsets = torch.arange(block_size, device=q.device)
        longest = int(context_lens.max())
        slots = (block_tables[:, :, None] * block_size + offsets).view(rows, -1)[:, :longest]
        kv = self.read_kv(kv_cache, slots.reshape(-1), q.dtype)
        kv = kv.view(rows, longest, *kv.shape[1:])
        mask = (torch.arange(longest, device=q.device)[None, :] < context_lens[:, None])[:, None, None, :]
        out = F.scaled_dot_product_attention(
            q.unsqueeze(2),
            kv[:, :, 0].transpose(1, 2),
            kv[:, :, 1].transpose(1, 2),
            attn_mask=mask,
            scale=scale,
            enable_gqa=True,
        )
        return out.reshape(rows, -1)

    def tempered_weights(self, logits: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """w = 2^((logit − max) · scale) per row, in place, and its `chunk_sums`."""
        w = logits.sub_(logits.amax(dim=-1, keepdim=True)).mul_(scale[:, None]).exp2_()
        return w, chunk_sums(w)

    def heavier_mass(self, w: torch.Tensor, chosen: torch.Tensor, scratch: Callable[[], torch.Tensor]) -> torch.Tensor:
        """`heavier_mass` of each row above its `chosen` weight (`[rows, 1]`); `scratch()` lends a
        `[rows, vocab]` work buffer."""
        return heavier_mass(w, chosen, scratch())

    def draw(self, w: torch.Tensor, sums: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
        """`draw`: one token per row of w by inverse CDF over its chunk sums."""
        return draw(w, uniforms, sums)

    def argmax(self, logits: torch.Tensor) -> torch.Tensor:
        """Each row's first index of its largest logit (a NaN counts as the largest): greedy rows' tokens."""
        return logits.argmax(dim=-1)

    def apply_penalties(
        self, logits: torch.Tensor, index: torch.Tensor, offsets: torch.Tensor, repetition: torch.Tensor
    ) -> None:
        """`apply_penalties` on the entries of `logits` at flat `index`, in place (each index once)."""
        flat = logits.view(-1)
        flat.index_copy_(0, index, apply_penalties(flat.index_select(0, index), offsets, repetition))


class NativeOps(TorchOps):
    """The native CPU forms (vLLM's `forward_cpu`): `torch.ops.kvwise.*`, built by `cpu_kernels`, reading and
    writing float32 or bfloat16 and summing in float32. bfloat16 prefill chunks of `BF16_PREFILL_KERNEL_MIN_QUERIES`
    queries or more after cached tokens attend in `kvwise::prefill_attention` on brgemm where oneDNN has it for
    bfloat16 (`bf16_prefill`), whole prompts and shorter chunks in SDPA (torch's flash kernel, on AMX tiles where the
    CPU has them); where the CPU has AVX512-BF16 dot products but no AMX (`bf16_dots`), every chunk in the kernel on
    them (as fast as SDPA or faster from 1 query to 2048, with or without cached tokens); where neither, chunks of
    `BF16_WIDENED_PREFILL_MIN_QUERIES` queries or more in the float32 kernel on widened copies (up to
    `prefill_kernel_max_context` keys, as float32 chunks),
    and rows past `matvec_max_rows` multiply in oneDNN (likewise, by the weight prepacked at load where oneDNN
    multiplies bfloat16 natively: `kernel_choices.onednn_prepacks`).

    Decode rows stream the weights through `matvec`, or a quantized weight's blocks through `quant_matvec` (up to
    `QUANT_MATVEC_MAX_ROWS` rows; more rows multiply by tiles of it dequantized in cache, `quant_mm`);
    RMSNorm (with the residual add before it), rope, silu·up, the kv write, attention
    and the sampler's passes over the logits are single kernels (`csrc/`); a step of decodes alone that each of them
    serves runs every layer in one call (`decode_layers`, the same kernels looped in C++). Attention's kernels need a
    head size that is a multiple of `cpu_kernels.HEAD_DIM_MULTIPLE` (`attends`); `choices` (measured
    for the loaded library) say up to which sizes each kernel beats its torch form.
    """

    def __init__(self, head_dim: int, choices: KernelChoices, dtype: torch.dtype = torch.float32):
        self.attends = head_dim % cpu_kernels.HEAD_DIM_MULTIPLE == 0
        self.bf16_prefill = dtype == torch.bfloat16 and bool(torch.ops.kvwise.packs_bf16(head_dim))
        self.bf16_dots = dtype == torch.bfloat16 and bool(torch.ops.kvwise.dots_bf16(head_dim))
        self.paged_decodes = self.attends
        self.choices = choices
        self.matvec_max_rows, self.onednn_min_rows = choices.rows(dtype)  # the crossovers of this engine's dtype

    def linear(
        self, x: torch.Tensor, weight_t: torch.Tensor, bias: torch.Tensor | None, packed: torch.Tensor | None
    ) -> torch.Tensor:
        if x.shape[0] <= self.matvec_max_rows and x.dim() == 2 and x.is_contiguous():
            return torch.ops.kvwise.matvec(x, weight_t, bias)
        return super().linear(x, weight_t, bias, packed)

    def quantized_linear(self, x: torch.Tensor, weight: QuantizedWeight, bias: torch.Tensor | None) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1]).contiguous()
        if len(rows) <= QUANT_MATVEC_MAX_ROWS:
            y = torch.ops.kvwise.quant_matvec(rows, weight.blocks, int(weight.kind), bias)
        else:
            y = torch.ops.kvwise.quant_mm(rows, weight.blocks, int(weight.kind), bias)
        return y.view(*x.shape[:-1], y.shape[-1])  # a chunk that keeps no row for the logits has 0 rows

    def quantized_rows(self, weight: QuantizedWeight, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return torch.ops.kvwise.quant_rows(weight.blocks, int(weight.kind), ids, dtype)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        if x.is_contiguous():
            return torch.ops.kvwise.rms_norm(x, weight, eps)
        return super().rms_norm(x, weight, eps)

    def add_rms_norm(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if x.is_contiguous() and residual.is_contiguous():
            torch.ops.kvwise.add_rms_norm_(x, residual, weight, eps)  # the sum into residual, its norm into x
            return x, residual
        return super().add_rms_norm(x, residual, weight, eps)

    def rotary_embedding(
        self, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        torch.ops.kvwise.rotary_embedding_(q, k, cos, sin)  # in place, in the step's own qkv buffer
        return q, k

    def silu_and_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        return torch.ops.kvwise.silu_and_mul(gate_up)

    def write_kv(self, kv_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor) -> None:
        if self.attends and kv_cache.dtype in _NATIVE_CACHE_DTYPES:
            torch.ops.kvwise.write_kv_(kv_cache, k, v, slots)  # one copy, from the step's qkv rows
        else:
            super().write_kv(kv_cache, k, v, slots)

    def read_kv(self, kv_cache: torch.Tensor, slots: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        if self.attends and kv_cache.dtype == torch.int8:
            return torch.ops.kvwise.gather_kv(kv_cache, slots).to(dtype)  # codes widened and scaled where they lie
        return super().read_kv(kv_cache, slots, dtype)

    def prefill_attention(
        self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None, scale: float
    ) -> torch.Tensor:
        if self.bf16_dots and q.dtype == torch.bfloat16:
            return torch.ops.kvwise.prefill_attention(q, keys, values, scale)
        if self.attends and len(keys) <= self.choices.prefill_kernel_max_context:
            if q.dtype == torch.float32:
                return torch.ops.kvwise.prefill_attention(q, keys, values, scale)
            if q.dtype == torch.bfloat16 and not self.bf16_prefill and len(q) >= BF16_WIDENED_PREFILL_MIN_QUERIES:
                widened = torch.ops.kvwise.prefill_attention(q.float(), keys.float(), values.float(), scale)
                return widened.to(torch.bfloat16)
        if (
            self.bf16_prefill
            and mask is not None
            and q.dtype == torch.bfloat16
            and len(q) >= BF16_PREFILL_KERNEL_MIN_QUERIES
        ):
            return torch.ops.kvwise.prefill_attention(q, keys, values, scale)
        return super().prefill_attention(q, keys, values, mask, scale)

    def decode_layers(
        self,
        x: torch.Tensor,
        stack: LayerStack,
        cos: torch.Tensor,
        sin: torch.Tensor,
        kv_cache: torch.Tensor,
        paged: tuple[torch.Tensor, torch.Tensor, torch.Tensor, int],
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        # Only where each op of the loop would take its kernel: the same kernels in the same order, the same bits.
        most_rows = min(self.matvec_max_rows if kind == FLOAT_WEIGHT else QUANT_MATVEC_MAX_ROWS for kind in stack.kinds)
        if not self.attends or kv_cache.dtype not in _NATIVE_CACHE_DTYPES or len(x) > most_rows:
            return None
        slot_mapping, block_tables, context_lens, block_size = paged
        hidden, residual = torch.ops.kvwise.decode_layers(
            x.contiguous(),
            stack.norms,
            stack.weights,
            stack.kinds,
            stack.biases,
            cos,
            sin,
            kv_cache,
            slot_mapping,
            block_tables,
            context_lens,
            block_size,
            1 / math.sqrt(stack.head_dim),
            stack.q_size,
            stack.kv_size,
            stack.head_dim,
            stack.eps,
        )
        return hidden, residual

    def paged_decode_attention(
        self,
        q: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        context_lens: torch.Tensor,
        block_size: int,
        scale: float,
    ) -> torch.Tensor:
        if kv_cache.dtype not in _NATIVE_CACHE_DTYPES:
            return super().paged_decode_attention(q, kv_cache, block_tables, context_lens, block_size, scale)
        queries = q.contiguous()  # the rope wrote q in place, a view into the step's qkv rows
        out = torch.ops.kvwise.paged_decode_attention(queries, kv_cache, block_tables, context_lens, block_size, scale)
        return out.view(len(q), -1)

    def tempered_weights(self, logits: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return logits, torch.ops.kvwise.tempered_weights_(logits, scale, SAMPLER_CHUNK)

    def heavier_mass(self, w: torch.Tensor, chosen: torch.Tensor, scratch: Callable[[], torch.Tensor]) -> torch.Tensor:
        return torch.ops.kvwise.heavier_mass(w, chosen[:, 0].contiguous())

    def draw(self, w: torch.Tensor, sums: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
        return torch.ops.kvwise.draw(w, sums, uniforms, SAMPLER_CHUNK)

    def apply_penalties(
        self, logits: torch.Tensor, index: torch.Tensor, offsets: torch.Tensor, repetition: torch.Tensor
    ) -> None:
        torch.ops.kvwise.apply_penalties_(logits, index, offsets, repetition)

    def argmax(self, logits: torch.Tensor) -> torch.Tensor:
        if logits.dim() != 2 or logits.dtype != torch.float32 or not logits.is_contiguous() or logits.shape[-1] == 0:
            return super().argmax(logits)
        return torch.ops.kvwise.argmax_rows(logits)


NATIVE_DTYPES: Final = (torch.float32, torch.bfloat16)
"""The model dtypes the native kernels compute in: float32, and bfloat16 read and written as such, summed in float32."""

_NATIVE_CACHE_DTYPES: Final = (*NATIVE_DTYPES, torch.int8)
"""The caches the native kernels read and write: the model's dtype, and int8 codes with scales (`kv_quant`)."""

TORCH = TorchOps()
"""The portable set: stateless, so every engine without the kernels shares it."""


def select(device: torch.device, dtype: torch.dtype, head_dim: int) -> TorchOps:
    """The ops an engine's tensors of this device and dtype run, chosen once (building the kernels on first ask).

    `NativeOps` with the loaded library's choices on CPU in float32 or bfloat16 when `cpu_kernels.load()` succeeds,
    else `TORCH`.
    """
    kernels = cpu_kernels.load() if device.type == "cpu" and dtype in NATIVE_DTYPES else None
    return TORCH if kernels is None else NativeOps(head_dim, kernels.choices, dtype)
