"""The only place that touches tensors: the KV cache, one forward per step, and sampling.

A step's sequences are laid out as one flat batch of tokens: first every single-token query
(decodes), shortest context first, so their attention is one call that reads the cache in place
(`PagedDecodes`, where the model's ops do: `ops.TorchOps.paged_decodes`) or a few batched SDPA calls
(`decode_groups`); then each prefill chunk. Logits are computed only for the rows that end a
sequence's uncomputed tokens, i.e. the ones that sample, and the last layer computes only those rows
(`attention.OutputRows`). A speculating sequence's last token and its drafts are a chunk over its
cached context (the prefill path) with logits for every row, which `Sampler.verify` checks the
drafts by.
"""

from __future__ import annotations

import itertools

import torch

from local_backend._constants import DECODE_PADDING_SHARE
from local_backend.engine.scheduler import ScheduledBatch
from local_backend.engine.sequence import Sequence
from local_backend.kernels import kv_quant
from local_backend.model.attention import AttentionMetadata, DecodeGroup, OutputRows, PagedDecodes, PrefillSegment
from local_backend.model.config import ModelConfig
from local_backend.model.llama import CausalLM, rope_tables
from local_backend.sampling.sampler import Sampler


class ModelRunner:
    """Owns the model, the `[layers, slots, 2, kv_heads, row]` KV cache and the rope tables.

    row = head_dim values of `kv_dtype` (the model's dtype by default), or for a quantized cache
    head_dim codes and their scale's bytes (`kv_quant`).
    """

    def __init__(
        self,
        model: CausalLM,
        cfg: ModelConfig,
        sampler: Sampler,
        num_blocks: int,
        block_size: int,
        max_model_len: int,
        kv_dtype: torch.dtype | None = None,
    ):
        param = next(model.parameters())
        self.model = model
        self.sampler = sampler
        self.device = param.device
        self.block_size = block_size
        self.kv_cache = kv_quant.allocate(
            cfg.num_layers,
            num_blocks * block_size,
            cfg.num_kv_heads,
            cfg.head_dim,
            kv_dtype or param.dtype,
            self.device,
        )
        self._quantized = kv_quant.is_quantized(self.kv_cache)  # prompts attend over the stored keys too
        self.cos, self.sin = rope_tables(cfg.rope, cfg.head_dim, max_model_len, self.device, param.dtype)
        self._block_offsets = torch.arange(block_size, device=self.device)
        self.paged_decodes = model.ops.paged_decodes

    @torch.inference_mode()
    def run(self, batch: ScheduledBatch) -> dict[Sequence, list[int]]:
        """Compute the batch's tokens; return, in batch order, the tokens of each sequence that
        completes: one sampled token, or a speculating sequence's accepted drafts and one more."""

        def place(i: int) -> tuple[bool, int]:  # decodes first, shortest context first; then prefills
            decode = batch.num_new_tokens[i] == 1
            return not decode, batch.seqs[i].num_computed_tokens if decode else 0

        order = sorted(range(len(batch.seqs)), key=place)
        seqs = [batch.seqs[i] for i in order]
        counts = [batch.num_new_tokens[i] for i in order]
        drafts = [batch.draft_token_ids[i] for i in order]
        ids: list[int] = []
        positions: list[int] = []
        for seq, n, draft in zip(seqs, counts, drafts):
            start = seq.num_computed_tokens
            ids.extend(seq.token_ids[start : start + n])
            ids.extend(draft)  # a speculating chunk: its last token, then its drafts
            positions.extend(range(start, start + n))
        pos = torch.tensor(positions, device=self.device)
        meta = self._metadata(seqs, counts, pos)
        cos, sin = self.cos[pos].unsqueeze(1), self.sin[pos].unsqueeze(1)
        input_ids = torch.tensor(ids, device=self.device)
        rows: list[int] = []
        spec_rows: list[int] = []
        sampling: list[Sequence] = []
        speculating: list[tuple[Sequence, tuple[int, ...]]] = []
        kept: list[int] = []  # of each sequence's rows, how many at its end are read
        end = 0
        for seq, n, draft in zip(seqs, counts, drafts):
            end += n
            if draft:
                spec_rows.extend(range(end - 1 - len(draft), end))
                speculating.append((seq, draft))
                kept.append(len(draft) + 1)
            elif seq.num_computed_tokens + n == len(seq):
                rows.append(end - 1)
                sampling.append(seq)
                kept.append(1)
            else:
                kept.append(0)
        read = rows + spec_rows
        if len(read) == end:  # every row is read (decodes): nothing to leave out
            hidden = self.model(input_ids, cos, sin, meta, self.kv_cache)
        else:
            outputs = self._output_rows(counts, kept)
            hidden = self.model(input_ids, cos, sin, meta, self.kv_cache, outputs)
            index = {row: i for i, row in enumerate(outputs.rows.tolist())}
            read = [index[row] for row in read]
        produced: dict[Sequence, list[int]] = {}
        if read:
            # every row in order (a step of decodes): hidden as it is, where indexing copies it in an OpenMP region
            logits = self.model.logits(hidden if read == list(range(len(hidden))) else hidden[read])
        if rows:
            tokens = self.sampler(logits[: len(rows)] if spec_rows else logits, sampling)
            produced.update((seq, [token]) for seq, token in zip(sampling, tokens))
        if spec_rows:
            verified = self.sampler.verify(
                logits[len(rows) :], [s for s, _ in speculating], [d for _, d in speculating]
            )
            produced.update((seq, tokens) for (seq, _), tokens in zip(speculating, verified))
        return {seq: produced[seq] for seq in batch.seqs if seq in produced}

    def _output_rows(self, counts: list[int], kept: list[int]) -> OutputRows:
        """The rows the last layer computes: the last `kept[i]` of sequence i's `counts[i]` rows, in step order."""
        num_decodes = sum(1 for n in counts if n == 1)
        ends = itertools.accumulate(counts)
        rows = [row for end, k in zip(ends, kept) for row in range(end - k, end)]
        decodes = [i for i in range(num_decodes) if kept[i]]
        return OutputRows(
            torch.tensor(rows, device=self.device, dtype=torch.long),
            torch.tensor(decodes, device=self.device, dtype=torch.long),
            tuple(kept[num_decodes:]),
        )

    def _slots(self, seq: Sequence, length: int) -> torch.Tensor:
        """Cache slots of the sequence's first `length` tokens."""
        table = torch.tensor(seq.block_table[: -(-length // self.block_size)], device=self.device)
        return (table[:, None] * self.block_size + self._block_offsets).view(-1)[:length]

    def _metadata(self, seqs: list[Sequence], counts: list[int], pos: torch.Tensor) -> AttentionMetadata:
        num_decodes = sum(1 for n in counts if n == 1)
        slot_parts = []
        decodes = []
        paged = None
        lengths = [seq.num_computed_tokens + 1 for seq in seqs[:num_decodes]]
        if num_decodes and self.paged_decodes:
            paged = self._paged_decodes(seqs[:num_decodes], lengths)
            slot_parts.append(self._last_slots(paged))
        for start, end in decode_groups(lengths) if paged is None else ():
            group = lengths[start:end]
            longest = group[-1]
            blocks = -(-longest // self.block_size)
            padded = [(s.block_table + [0] * blocks)[:blocks] for s in seqs[start:end]]
            tables = torch.tensor(padded, device=self.device)
            grid = (tables[:, :, None] * self.block_size + self._block_offsets).view(end - start, -1)
            slots = grid[:, :longest].contiguous()
            ctx = torch.tensor(group, device=self.device)
            slot_parts.append(slots.gather(1, (ctx - 1)[:, None]).view(-1))
            mask = None
            if group[0] != longest:
                mask = (torch.arange(longest, device=self.device)[None, :] < ctx[:, None])[:, None, None, :]
            decodes.append(DecodeGroup(start, end, slots, mask))
        prefills = []
        start = num_decodes
        for seq, n in zip(seqs[num_decodes:], counts[num_decodes:]):
            done = seq.num_computed_tokens
            slots = self._slots(seq, done + n)
            slot_parts.append(slots[done:])
            prefill_mask = None
            if done:
                query_pos = pos[start : start + n]
                prefill_mask = torch.arange(done + n, device=self.device)[None, :] <= query_pos[:, None]
            prefills.append(PrefillSegment(start, start + n, slots if done or self._quantized else None, prefill_mask))
            start += n
        slot_mapping = slot_parts[0] if len(slot_parts) == 1 else torch.cat(slot_parts)
        return AttentionMetadata(slot_mapping, tuple(decodes), tuple(prefills), paged)

    def _paged_decodes(self, seqs: list[Sequence], lengths: list[int]) -> PagedDecodes:
        blocks = -(-max(lengths) // self.block_size)
        tables = torch.tensor([(s.block_table + [0] * blocks)[:blocks] for s in seqs], device=self.device)
        return PagedDecodes(tables, torch.tensor(lengths, device=self.device), self.block_size)

    def _last_slots(self, paged: PagedDecodes) -> torch.Tensor:
        """The slot of each decode's new token (its context's last)."""
        last = paged.context_lens - 1
        block = paged.block_tables.gather(1, (last // self.block_size)[:, None])[:, 0]
        return block * self.block_size + last % self.block_size


def decode_groups(lengths: list[int]) -> list[tuple[int, int]]:
    """Row ranges of decode groups over ascending context lengths: a group grows while padding
    every row to its newest (longest) length adds at most `DECODE_PADDING_SHARE` to what it gathers."""
    groups: list[tuple[int, int]] = []
    start, total = 0, 0
    for i, length in enumerate(lengths):
        if i > start and (i - start + 1) * length > (1 + DECODE_PADDING_SHARE) * (total + length):
            groups.append((start, i))
            start, total = i, 0
        total += length
    if lengths:
        groups.append((start, len(lengths)))
    return groups
