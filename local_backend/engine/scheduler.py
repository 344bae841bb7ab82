"""Which sequences run in the next step, and how many of their tokens (continuous batching).

Each step has a token budget. Running sequences go first, oldest first: a decode costs one token,
an unfinished prefill takes a chunk of what is left. Then waiting sequences are admitted while the
budget, `max_num_seqs` and the block pool allow, their first chunk in the same step. When a running
sequence needs a block and none is left, the newest running sequence is preempted: its blocks are
released (the full ones stay cached) and it waits at the front to be recomputed later.

With a proposer (speculative decoding), a decoding sequence may also compute drafts: its step is
its last token and up to k proposed tokens, within the budget and only where the pool has their
blocks without preempting anyone; `update` keeps the drafts the model agreed with, counts only
their positions as computed, and frees the blocks that held nothing else.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from collections.abc import Sequence as Seq
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from local_backend.engine.block_manager import BlockManager
from local_backend.engine.sequence import Sequence, Status
from local_backend.engine.speculative import NgramProposer

NOTHING: Final[Mapping[Sequence, Seq[int]]] = MappingProxyType({})
"""`update`'s default: a step with no drafts needs no produced tokens."""


@dataclass(frozen=True, slots=True)
class ScheduledBatch:
    """Sequences of one step and how many new tokens each computes (in step order).

    `draft_token_ids[i]` are the speculative drafts of sequence i, counted in its new tokens after
    its last token (empty for a sequence that does not speculate; all empty when not given).
    """

    seqs: tuple[Sequence, ...]
    num_new_tokens: tuple[int, ...]
    draft_token_ids: tuple[tuple[int, ...], ...] = ()

    def __post_init__(self) -> None:
        if not self.draft_token_ids:
            object.__setattr__(self, "draft_token_ids", ((),) * len(self.seqs))

    @property
    def num_tokens(self) -> int:
        return sum(self.num_new_tokens)


class ScheduleFailed(Exception):
    """`schedule()` raised while planning `seq` (None: before any); the queues are still consistent."""

    def __init__(self, seq: Sequence | None):
        super().__init__(f"scheduling {seq.request_id if seq else 'the step'} failed")
        self.seq = seq


class Scheduler:
    """Queues and the step plan; `add`, `schedule`, `update` after the step, `finish`.

    `num_drafts` counts the steps that verified drafts, `num_draft_tokens` / `num_accepted_tokens`
    the drafts proposed and those kept (vLLM's spec-decode counters).
    """

    def __init__(
        self,
        block_manager: BlockManager,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        proposer: NgramProposer | None = None,
    ):
        self.block_manager = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.proposer = proposer
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0
        self.num_drafts = self.num_draft_tokens = self.num_accepted_tokens = 0

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def schedule(self) -> ScheduledBatch:
        """Plan the next step; on an error, `ScheduleFailed` names the sequence being planned.

        Every mutation leaves the queues consistent first (a sequence leaves `waiting` only once
        its blocks are allocated), so whatever raises, each sequence is in exactly one queue.
        """
        budget = self.max_num_batched_tokens
        seqs: list[Sequence] = []
        counts: list[int] = []
        drafts: list[tuple[int, ...]] = []
        preempted = False
        seq: Sequence | None = None
        try:
            i = 0
            while i < len(self.running) and budget > 0:
                seq = self.running[i]
                while not self.block_manager.can_append(seq):
                    preempted = True
                    self._preempt(self.running[-1])
                    if seq.status is Status.WAITING:
                        break
                if seq.status is Status.WAITING:
                    break
                draft = self._drafts(seq, budget)
                self.block_manager.append(seq, len(draft))
                n = min(seq.num_uncomputed_tokens, budget) + len(draft)
                seqs.append(seq)
                counts.append(n)
                drafts.append(draft)
                budget -= n
                i += 1
            while (
                not preempted
                and self.waiting
                and budget > 0
                and len(self.running) < self.max_num_seqs
                and self.block_manager.can_allocate(self.waiting[0])
            ):
                seq = self.waiting[0]
                reused = self.block_manager.allocate(seq)
                self.waiting.popleft()
                if seq.num_preemptions == 0:
                    seq.num_cached_tokens = reused
                    seq.scheduled_time = time.perf_counter()
                seq.num_computed_tokens = reused
                seq.status = Status.RUNNING
                self.running.append(seq)
                n = min(seq.num_uncomputed_tokens, budget)
                seqs.append(seq)
                counts.append(n)
                drafts.append(())
                budget -= n
        except Exception as exc:
            raise ScheduleFailed(seq) from exc
        return ScheduledBatch(tuple(seqs), tuple(counts), tuple(drafts))

    def _drafts(self, seq: Sequence, budget: int) -> tuple[int, ...]:
        """The drafts a decoding sequence verifies this step: those its blocks fit without preempting."""
        if self.proposer is None or seq.num_uncomputed_tokens != 1:
            return ()
        draft = self.proposer.propose(seq, budget - 1)
        return draft if draft and self.block_manager.can_append(seq, len(draft)) else ()

    def update(self, batch: ScheduledBatch, produced: Mapping[Sequence, Seq[int]] = NOTHING) -> list[Sequence]:
        """Record the computed tokens; return the sequences whose step ends in sampled tokens.

        `produced` (the runner's) gives a speculating sequence's tokens: its accepted drafts, then
        the token sampled after them. Those drafts join the sequence; the refused ones' positions
        stay uncomputed and the blocks past the tokens are freed, so only accepted tokens are
        ever named in the prefix cache.
        """
        sampling = []
        for seq, n, drafts in zip(batch.seqs, batch.num_new_tokens, batch.draft_token_ids):
            before = seq.num_computed_tokens
            if drafts:
                accepted = len(produced[seq]) - 1
                seq.accept_drafts(drafts, accepted)
                self.num_drafts += 1
                self.num_draft_tokens += len(drafts)
                self.num_accepted_tokens += accepted
                n -= len(drafts) - accepted
            seq.num_computed_tokens += n
            self.block_manager.commit(seq, before)
            if drafts:
                self.block_manager.release_tail(seq)
            if seq.num_uncomputed_tokens == 0:
                sampling.append(seq)
        return sampling

    def finish(self, seq: Sequence) -> None:
        """Take a sequence out of whichever queue holds it and release its blocks (finished or aborted)."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        if seq.block_table:
            self.block_manager.deallocate(seq)
        seq.status = Status.FINISHED

    def _preempt(self, seq: Sequence) -> None:
        self.block_manager.deallocate(seq)
        self.running.remove(seq)
        seq.num_computed_tokens = 0
        seq.num_preemptions += 1
        seq.status = Status.WAITING
        self.waiting.appendleft(seq)
        self.num_preemptions += 1
