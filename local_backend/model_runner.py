"""The only place that touches tensors: the KV cache, one forward per step, and sampling.

A step's sequences are laid out as one flat batch of tokens: first every single-token query
(decodes) so their attention is one batched call, then each prefill chunk. Logits are computed only
for the rows that end a sequence's uncomputed tokens, i.e. the ones that sample.
"""

from __future__ import annotations

import torch

from local_backend.attention import AttentionMetadata, PrefillSegment
from local_backend.config import ModelConfig
from local_backend.model import CausalLM, rope_tables
from local_backend.sampler import Sampler
from local_backend.scheduler import ScheduledBatch
from local_backend.sequence import Sequence


class ModelRunner:
    """Owns the model, the `[layers, slots, 2, kv_heads, head_dim]` KV cache and the rope tables."""

    def __init__(
        self,
        model: CausalLM,
        cfg: ModelConfig,
        sampler: Sampler,
        num_blocks: int,
        block_size: int,
        max_model_len: int,
    ):
        param = next(model.parameters())
        self.model = model
        self.sampler = sampler
        self.device = param.device
        self.block_size = block_size
        self.kv_cache = torch.zeros(
            cfg.num_layers, num_blocks * block_size, 2, cfg.num_kv_heads, cfg.head_dim,
            dtype=param.dtype, device=self.device,
        )  # fmt: skip
        self.cos, self.sin = rope_tables(cfg.rope, cfg.head_dim, max_model_len, self.device, param.dtype)
        self._block_offsets = torch.arange(block_size, device=self.device)

    @torch.inference_mode()
    def run(self, batch: ScheduledBatch) -> list[int]:
        """Compute the batch's tokens; return one sampled token per sequence that completes."""
        order = sorted(range(len(batch.seqs)), key=lambda i: batch.num_new_tokens[i] != 1)
        seqs = [batch.seqs[i] for i in order]
        counts = [batch.num_new_tokens[i] for i in order]
        ids: list[int] = []
        positions: list[int] = []
        for seq, n in zip(seqs, counts):
            start = seq.num_computed_tokens
            ids.extend(seq.token_ids[start : start + n])
            positions.extend(range(start, start + n))
        pos = torch.tensor(positions, device=self.device)
        meta = self._metadata(seqs, counts, pos)
        cos, sin = self.cos[pos].unsqueeze(1), self.sin[pos].unsqueeze(1)
        input_ids = torch.tensor(ids, device=self.device)
        hidden = self.model(input_ids, cos, sin, meta, self.kv_cache)
        rows, sampling = [], []
        end = 0
        for seq, n in zip(seqs, counts):
            end += n
            if seq.num_computed_tokens + n == len(seq):
                rows.append(end - 1)
                sampling.append(seq)
        if not rows:
            return []
        tokens = self.sampler(self.model.logits(hidden[rows]), sampling)
        by_seq = {id(seq): token for seq, token in zip(sampling, tokens)}
        return [by_seq[id(seq)] for seq in batch.seqs if id(seq) in by_seq]

    def _slots(self, seq: Sequence, length: int) -> torch.Tensor:
        """Cache slots of the sequence's first `length` tokens."""
        table = torch.tensor(seq.block_table[: -(-length // self.block_size)], device=self.device)
        return (table[:, None] * self.block_size + self._block_offsets).view(-1)[:length]

    def _metadata(self, seqs: list[Sequence], counts: list[int], pos: torch.Tensor) -> AttentionMetadata:
        num_decodes = sum(1 for n in counts if n == 1)
        slot_parts = []
        decode_slots = decode_mask = None
        if num_decodes:
            lengths = [seq.num_computed_tokens + 1 for seq in seqs[:num_decodes]]
            longest = max(lengths)
            blocks = -(-longest // self.block_size)
            padded = [(s.block_table + [0] * blocks)[:blocks] for s in seqs[:num_decodes]]
            tables = torch.tensor(padded, device=self.device)
            grid = (tables[:, :, None] * self.block_size + self._block_offsets).view(num_decodes, -1)
            decode_slots = grid[:, :longest].contiguous()
            ctx = torch.tensor(lengths, device=self.device)
            slot_parts.append(decode_slots.gather(1, (ctx - 1)[:, None]).view(-1))
            if min(lengths) != longest:
                mask = torch.arange(longest, device=self.device)[None, :] < ctx[:, None]
                decode_mask = mask[:, None, None, :]
        prefills = []
        start = num_decodes
        for seq, n in zip(seqs[num_decodes:], counts[num_decodes:]):
            done = seq.num_computed_tokens
            slots = self._slots(seq, done + n)
            slot_parts.append(slots[done:])
            mask = None
            if done:
                query_pos = pos[start : start + n]
                mask = torch.arange(done + n, device=self.device)[None, :] <= query_pos[:, None]
            prefills.append(PrefillSegment(start, start + n, slots if done else None, mask))
            start += n
        slot_mapping = slot_parts[0] if len(slot_parts) == 1 else torch.cat(slot_parts)
        return AttentionMetadata(slot_mapping, num_decodes, decode_slots, decode_mask, tuple(prefills))
