"""Attention over the paged KV cache with `scaled_dot_product_attention` (CPU and CUDA alike).

The cache of one layer is a flat array of slots, `[num_blocks * block_size, 2, kv_heads, head_dim]`
(key and value side by side, so one copy stores both and one gather reads both);
slot = block_id × block_size + offset. Each step writes the new tokens' keys and values into their
slots, then gathers every sequence's context by slot index and attends over it:

- decodes (one query token each) are batched into one SDPA call, padded to the longest context
  with a boolean mask;
- each prefill chunk is one SDPA call with a causal mask shifted by the tokens already cached.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


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
class AttentionMetadata:
    """Per-step layout shared by every layer: where tokens go in the cache and what each attends to.

    The step's first `num_decodes` rows are single-token queries whose contexts are `decode_slots`
    (`[batch, max_context]`, masked by `decode_mask` when lengths differ); `prefills` follow.
    """

    slot_mapping: torch.Tensor
    num_decodes: int
    decode_slots: torch.Tensor | None
    decode_mask: torch.Tensor | None
    prefills: tuple[PrefillSegment, ...]


def paged_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor, meta: AttentionMetadata
) -> torch.Tensor:
    """Store `k`, `v` in their slots of `kv_cache`, then attend: `q [T, H, D]` → `[T, H × D]`.

    softmax(q·kᵀ / √D + mask) · v per sequence, grouped-query heads shared via `enable_gqa`.
    """
    kv_cache.index_copy_(0, meta.slot_mapping, torch.stack((k, v), dim=1))
    outputs = []
    if meta.num_decodes:
        n = meta.num_decodes
        assert meta.decode_slots is not None
        batch, context = meta.decode_slots.shape
        kv = kv_cache.index_select(0, meta.decode_slots.view(-1)).view(batch, context, *kv_cache.shape[1:])
        out = F.scaled_dot_product_attention(
            q[:n].unsqueeze(2),
            kv[:, :, 0].transpose(1, 2),
            kv[:, :, 1].transpose(1, 2),
            attn_mask=meta.decode_mask,
            enable_gqa=True,
        )
        outputs.append(out.reshape(n, -1))
    for seg in meta.prefills:
        if seg.slots is None:
            keys, values = k[seg.start : seg.end], v[seg.start : seg.end]
        else:
            kv = kv_cache.index_select(0, seg.slots)
            keys, values = kv[:, 0], kv[:, 1]
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
