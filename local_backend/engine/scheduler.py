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

After each step `update_from_output` (vLLM v1's shape) does the rest of a step's bookkeeping in one
place: it records the computed tokens (`update`), appends each sampled token, checks the stops
(after each of a speculating step's tokens, dropping those after a stop) and takes an ended
sequence out with its blocks freed; the core only delivers the completions it reports.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from local_backend.engine.block_manager import BlockManager
from local_backend.engine.outputs import FinishReason
from local_backend.engine.request import Request
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


@dataclass(frozen=True, slots=True)
class Ended:
    """A sequence `update_from_output` ended: by a stop (`new_tokens`: the token that stopped it), or
    by an `error` raised while delivering its tokens (then it is still in the queues, for the core to fail)."""

    seq: Sequence
    reason: FinishReason
    new_tokens: tuple[int, ...] = ()
    error: Exception | None = None


@dataclass(slots=True)
class UpdateOutput:
    """What one step's tokens did: each sequence's tokens of the step so far, how many were generated,
    and the sequences that ended, in step order."""

    new_token_ids: dict[str, tuple[int, ...]] = field(default_factory=dict)
    num_generated: int = 0
    ended: list[Ended] = field(default_factory=list)


class ScheduleFailed(Exception):
    """`schedule()` raised while planning `seq` (None: before any); the queues are still consistent."""

    def __init__(self, seq: Sequence | None):
        super().__init__(f"scheduling {seq.request_id if seq else 'the step'} failed")
        self.seq = seq


class Scheduler:
    """Queues and the step plan; `add`, `schedule`, `update_from_output` after the step, `finish`.

    `eos` and `max_model_len` are the stop rules every sequence shares (see `stop_reason`).

    `num_drafts` counts the steps that verified drafts, `num_draft_tokens` / `num_accepted_tokens`
    the drafts proposed and those kept (vLLM's spec-decode counters).
    """

    def __init__(
        self,
        block_manager: BlockManager,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        proposer: NgramProposer | None = None,
        *,
        eos: frozenset[int] = frozenset(),
        max_model_len: int | None = None,
    ):
        self.block_manager = block_manager
        self.eos = eos
        self.max_model_len = max_model_len
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

    def update_from_output(
        self, batch: ScheduledBatch, produced: Mapping[Sequence, Seq[int]], requests: Mapping[Sequence, Request]
    ) -> UpdateOutput:
        """After a step: record it (`update`), then deliver each sequence's tokens in order, ending it
        (out of the queues, its blocks freed) at the first that stops it.

        A speculating step's accepted drafts are in the sequence already (`update`); the last token
        is appended here. A stop inside the run drops the tokens after it. A sequence whose delivery
        raises is reported with the error and left for the caller to fail; the others go on.
        """
        out = UpdateOutput()
        for seq in self.update(batch, produced):
            request = requests.get(seq)
            if request is None:
                continue
            try:
                tokens = produced[seq]
                seq.append_token(tokens[-1])
                start = len(seq) - len(tokens)
                for i, token in enumerate(tokens):
                    out.num_generated += 1
                    out.new_token_ids[seq.request_id] = tuple(tokens[: i + 1])
                    reason = self.stop_reason(request, token, start + i + 1)
                    if reason is None:
                        request.emit(token)
                        continue
                    seq.truncate(start + i + 1)
                    self.finish(seq)
                    out.ended.append(Ended(seq, reason, (token,)))
                    break
            except Exception as exc:
                out.ended.append(Ended(seq, "error", error=exc))
        return out

    def stop_reason(self, request: Request, token: int, length: int) -> FinishReason | None:
        """Why the request ends at `token`, the sequence's `length`-th, or None to go on.

        In order: `stop_token_ids`, or EOS unless `ignore_eos` → "stop" (the token is in
        `token_ids`, its text is not in the text, as in vLLM); a stop string → "stop";
        `max_tokens` output tokens or `max_model_len` in all → "length".
        """
        seq, params = request.seq, request.seq.params
        if token in params.stop_token_ids or (token in self.eos and not params.ignore_eos):
            return "stop"
        if request.detokenizer.add(token):
            return "stop"
        if length - seq.num_prompt_tokens >= params.max_tokens:
            return "length"
        if self.max_model_len is not None and length >= self.max_model_len:
            return "length"
        return None

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
