"""Attention over the paged KV cache with `scaled_dot_product_attention` (CPU and CUDA alike).

The cache of one layer is a flat array of slots, `[num_blocks * block_size, 2, kv_heads, head_dim]`
(key and value side by side, so one copy stores both and one gather reads both);
slot = block_id × block_size + offset. Each step writes the new tokens' keys and values into their
slots, then attends:

- decodes (one query token each) on CPU in float32 go to the native kernel
  (`cpu_kernels`, `PagedDecodes`), which reads each context where it lies in the cache;
- other decodes gather every sequence's context by slot index and, ordered by context length, are
  batched into a few SDPA calls:
  a group is padded to its longest context with a boolean mask, and a new group starts where
  padding would add more than `_constants.DECODE_PADDING_SHARE` to the group's gathered context (so one long
  context no longer makes every short one in the batch gather and attend over its length);
- each prefill chunk attends causally, shifted by the tokens already cached: on CPU in float32, up to
  `_constants.PREFILL_KERNEL_MAX_CONTEXT` keys, in the native kernel (`kvwise::prefill_attention`:
  grouped heads in large GEMMs), else in one SDPA call with that mask.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from local_backend import cpu_kernels
from local_backend._constants import PREFILL_KERNEL_MAX_CONTEXT


@dataclass(frozen=True, slots=True)
class PrefillSegment:
    """One prefill chunk: query rows `start:end` of the step, attending to `slots` (its context).

    `slots is None` means the chunk is the whole context (nothing cached before it): plain causal
    attention over the chunk's own keys, no gather.
    """

    start: int
    end: int
    slots: torch.Tensor | None
    mask: torch.Tensor | None


@dataclass(frozen=True, slots=True)
class DecodeGroup:
    """Single-token queries in rows `start:end`, attending to `slots` (`[rows, longest context]`),
    masked by `mask` when their context lengths differ."""

    start: int
    end: int
    slots: torch.Tensor
    mask: torch.Tensor | None


@dataclass(frozen=True, slots=True)
class PagedDecodes:
    """Single-token queries in rows `0:len(context_lens)`, read in place by the native kernel:
    `block_tables [rows, most blocks]` (padded with block 0, never read past a row's length)."""

    block_tables: torch.Tensor
    context_lens: torch.Tensor
    block_size: int


@dataclass(frozen=True, slots=True)
class AttentionMetadata:
    """Per-step layout shared by every layer: where tokens go in the cache and what each attends to.

    The step's first rows are the decodes' single-token queries (`paged_decodes`, else `decodes`);
    `prefills` follow.
    """

    slot_mapping: torch.Tensor
    decodes: tuple[DecodeGroup, ...]
    prefills: tuple[PrefillSegment, ...]
    paged_decodes: PagedDecodes | None = None


def paged_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor, meta: AttentionMetadata
) -> torch.Tensor:
    """Store `k`, `v` in their slots of `kv_cache`, then attend: `q [T, H, D]` → `[T, H × D]`.

    softmax(q·kᵀ / √D + mask) · v per sequence, grouped-query heads shared via `enable_gqa`.
    """
    native = cpu_kernels.serves(kv_cache.device, kv_cache.dtype, kv_cache.shape[-1])
    if native:
        torch.ops.kvwise.write_kv_(kv_cache, k, v, meta.slot_mapping)  # one copy, from the step's qkv rows
    else:
        kv_cache.index_copy_(0, meta.slot_mapping, torch.stack((k, v), dim=1))
    outputs = []
    scale = 1 / math.sqrt(q.shape[-1])
    if (paged := meta.paged_decodes) is not None:
        rows = len(paged.context_lens)
        queries = q[:rows].contiguous()  # the rope wrote q in place, a view into the step's qkv rows
        out = torch.ops.kvwise.paged_decode_attention(
            queries, kv_cache, paged.block_tables, paged.context_lens, paged.block_size, scale
        )
        outputs.append(out.view(rows, -1))
    for group in meta.decodes:
        batch, context = group.slots.shape
        kv = kv_cache.index_select(0, group.slots.view(-1)).view(batch, context, *kv_cache.shape[1:])
        out = F.scaled_dot_product_attention(
            q[group.start : group.end].unsqueeze(2),
            kv[:, :, 0].transpose(1, 2),
            kv[:, :, 1].transpose(1, 2),
            attn_mask=group.mask,
            enable_gqa=True,
        )
        outputs.append(out.reshape(batch, -1))
    for seg in meta.prefills:
        if seg.slots is None:
            keys, values = k[seg.start : seg.end], v[seg.start : seg.end]
        else:
            kv = kv_cache.index_select(0, seg.slots)
            keys, values = kv[:, 0], kv[:, 1]
        if native and len(keys) <= PREFILL_KERNEL_MAX_CONTEXT:
            outputs.append(torch.ops.kvwise.prefill_attention(q[seg.start : seg.end], keys, values, scale))
            continue
        out = F.scaled_dot_product_attention(
            q[seg.start : seg.end].transpose(0, 1).unsqueeze(0),
            keys.transpose(0, 1).unsqueeze(0),
            values.transpose(0, 1).unsqueeze(0),
            attn_mask=seg.mask,
            is_causal=seg.mask is None,
            enable_gqa=True,
        )
        outputs.append(out[0].transpose(0, 1).reshape(seg.end - seg.start, -1))
    return outputs[0] if len(outputs) == 1 else torch.cat(outputs)
