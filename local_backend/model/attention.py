"""Attention over the paged KV cache: the step's cache writes, then each sequence's attention, through the model's ops.

The cache of one layer is a flat array of slots, `[num_blocks * block_size, 2, kv_heads, head_dim]`
(key and value side by side, so one copy stores both and one gather reads both);
slot = block_id × block_size + offset; a quantized cache (`--kv-cache-dtype int8`) stores each row as
8-bit codes and its scale (`kv_quant`), quantized on write and dequantized where the ops read it,
and every query, a fresh prompt's included, attends over those stored keys and values, so a prefix
read from the cache gives what computing it would. Each step writes the new tokens' keys and values into their
slots, then attends:

- decodes (one query token each) laid out as `PagedDecodes` (where the ops read the cache in place,
  `ops.NativeOps`) go to `ops.paged_decode_attention`, which reads each context where it lies;
- other decodes gather every sequence's context by slot index and, ordered by context length, are
  batched into a few SDPA calls:
  a group is padded to its longest context with a boolean mask, and a new group starts where
  padding would add more than `_constants.DECODE_PADDING_SHARE` to the group's gathered context (so one long
  context no longer makes every short one in the batch gather and attend over its length);
- each prefill chunk attends causally, shifted by the tokens already cached
  (`ops.prefill_attention`: natively, grouped heads in large GEMMs, else one SDPA call with that mask).

The last layer is asked only for the rows whose hidden states are read (`OutputRows`, llama.cpp's
output ids): every row's keys and values are still stored, but only those rows attend.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from local_backend.kernels.ops import TorchOps


@dataclass(frozen=True, slots=True)
class PrefillSegment:
    """One prefill chunk: query rows `start:end` of the step, attending to `slots` (its context).

    `slots is None` means the chunk is the whole context (nothing cached before it) and the cache
    stores keys as computed: plain causal attention over the chunk's own keys, no gather.
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

    @property
    def paged_only(self) -> PagedDecodes | None:
        """The step's `paged_decodes` where they are all its rows (no other decode, no prefill), else None."""
        return self.paged_decodes if not self.decodes and not self.prefills else None


@dataclass(frozen=True, slots=True)
class OutputRows:
    """The step's rows whose hidden states are read (they sample or verify drafts), ascending in `rows`.

    A prompt's chunk samples from its last row alone, so in the last layer the other rows' attention,
    o_proj and MLP are work nobody reads. Each sequence keeps a suffix of its rows: `decodes` indexes
    the decode rows kept, `suffixes[i]` counts how many of prefill chunk i's last rows are.
    """

    rows: torch.Tensor
    decodes: torch.Tensor
    suffixes: tuple[int, ...]


def _suffix_mask(seg: PrefillSegment, kept: int, context: int, device: torch.device) -> torch.Tensor:
    """The causal mask of a chunk's last `kept` queries over its `context` keys."""
    if seg.mask is not None:
        return seg.mask[-kept:]
    return (
        torch.arange(context, device=device)[None, :] <= torch.arange(context - kept, context, device=device)[:, None]
    )


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    kv_cache: torch.Tensor,
    meta: AttentionMetadata,
    ops: TorchOps,
    kept: OutputRows | None = None,
) -> torch.Tensor:
    """Store `k`, `v` in their slots of `kv_cache`, then attend: `q [T, H, D]` → `[T, H × D]`, or
    `[len(kept.rows), H × D]` for the `kept` rows alone.

    softmax(q·kᵀ / √D + mask) · v per sequence, grouped-query heads shared via `enable_gqa`.
    """
    ops.write_kv(kv_cache, k, v, meta.slot_mapping)
    outputs = []
    scale = 1 / math.sqrt(q.shape[-1])
    if (paged := meta.paged_decodes) is not None:
        rows = len(paged.context_lens)
        outputs.append(
            ops.paged_decode_attention(
                q[:rows], kv_cache, paged.block_tables, paged.context_lens, paged.block_size, scale
            )
        )
    for group in meta.decodes:
        batch, context = group.slots.shape
        kv = ops.read_kv(kv_cache, group.slots.view(-1), q.dtype)
        kv = kv.view(batch, context, *kv.shape[1:])
        out = F.scaled_dot_product_attention(
            q[group.start : group.end].unsqueeze(2),
            kv[:, :, 0].transpose(1, 2),
            kv[:, :, 1].transpose(1, 2),
            attn_mask=group.mask,
            enable_gqa=True,
        )
        outputs.append(out.reshape(batch, -1))
    if kept is not None and outputs:
        outputs = [(outputs[0] if len(outputs) == 1 else torch.cat(outputs))[kept.decodes]]
    for i, seg in enumerate(meta.prefills):
        rows = seg.end - seg.start if kept is None else kept.suffixes[i]
        if rows == 0:
            continue
        if seg.slots is None:
            keys, values = k[seg.start : seg.end], v[seg.start : seg.end]
        else:
            kv = ops.read_kv(kv_cache, seg.slots, q.dtype)
            keys, values = kv[:, 0], kv[:, 1]
        mask = seg.mask if rows == seg.end - seg.start else _suffix_mask(seg, rows, len(keys), q.device)
        outputs.append(ops.prefill_attention(q[seg.end - rows : seg.end], keys, values, mask, scale))
    if not outputs:
        return q.new_empty(0, q.shape[1] * q.shape[2])
    return outputs[0] if len(outputs) == 1 else torch.cat(outputs)
