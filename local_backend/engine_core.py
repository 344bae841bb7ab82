"""The engine's stepping core: synchronous, single-threaded, and never left inconsistent by an error.

`EngineCore` owns the block pool, the scheduler and the model runner, and the requests it was
given. `step()` plans one batch, runs it and delivers what it produced. Whatever raises inside a
step fails only what that step was working on, with `finish_reason="error"` and the error's text:
the batch, when the model or sampler raised; the one sequence being planned, when scheduling raised
(the scheduler leaves its queues consistent); the one request, when delivering its token raised.
The core then goes on serving. Threads, queues and aborts from other threads belong to the front
(`engine.Engine`, vLLM's `AsyncLLM` to this `EngineCore`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import torch

from local_backend import ops
from local_backend.block_manager import BlockManager
from local_backend.config import ModelConfig
from local_backend.model import CausalLM
from local_backend.model_runner import ModelRunner
from local_backend.outputs import FinishReason
from local_backend.request import Request
from local_backend.sampler import Sampler
from local_backend.scheduler import ScheduleFailed, Scheduler
from local_backend.sequence import Sequence
from local_backend.tokenizer import TextTokenizer

logger = logging.getLogger(__name__)


def describe(exc: BaseException) -> str:
    """What a failed step tells its requests: the error's type and message."""
    return f"engine step failed: {type(exc).__name__}: {exc}"


class EngineCore:
    """Requests in (`add`, `abort`), one batch per `step()`; each request finishes exactly once.

    num_blocks = min(kv_cache_memory ÷ (block_size × kv_bytes_per_token),
    max_num_seqs × ⌈max_model_len ÷ block_size⌉): never more blocks than a full batch can use.
    """

    def __init__(
        self,
        cfg: ModelConfig,
        tokenizer: TextTokenizer,
        model: CausalLM,
        *,
        kv_cache_memory: int,
        block_size: int,
        max_num_seqs: int,
        max_model_len: int,
        max_num_batched_tokens: int,
    ):
        param = next(model.parameters())
        dtype, device = param.dtype, param.device
        self.config = cfg
        self.kv_bytes_per_token = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * dtype.itemsize
        usable = max_num_seqs * -(-max_model_len // block_size)
        num_blocks = min(kv_cache_memory // (block_size * self.kv_bytes_per_token), usable)
        self.block_manager = BlockManager(num_blocks, block_size)
        self.max_model_len = min(max_model_len, num_blocks * block_size)
        self.scheduler = Scheduler(self.block_manager, max_num_seqs, max(max_num_batched_tokens, max_num_seqs))
        sampler = Sampler(cfg.vocab_size, tokenizer.ids_containing, ops.select(device, torch.float32, cfg.head_dim))
        self.runner = ModelRunner(model, cfg, sampler, num_blocks, block_size, self.max_model_len)
        self.eos = frozenset(cfg.eos_token_ids) | (
            {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
        )
        self.requests: dict[Sequence, Request] = {}
        self.prompt_tokens = self.generation_tokens = 0

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def add(self, request: Request) -> None:
        self.requests[request.seq] = request
        self.prompt_tokens += request.seq.num_prompt_tokens
        self.scheduler.add(request.seq)

    def abort(self, request: Request) -> None:
        """Finish the request with "abort" (no-op once it has finished: aborts are by object, not id)."""
        if request.seq in self.requests:
            self.finish(request, "abort")

    def finish_all(self, reason: FinishReason, error: str | None = None) -> None:
        """Finish every request not yet finished (closing, or a failure outside any one step)."""
        self.fail(list(self.requests), reason, error)

    def step(self) -> None:
        """Plan one batch, run it, and deliver its tokens; a failure fails only what it touched."""
        if not self.scheduler.has_unfinished():
            return
        try:
            batch = self.scheduler.schedule()
        except ScheduleFailed as exc:
            logger.error("scheduling failed; failing %s", exc.seq, exc_info=exc.__cause__)
            culprit = [exc.seq] if exc.seq is not None else []
            self.fail(culprit, "error", describe(exc.__cause__ or exc))
            return
        if not batch.seqs:
            return
        try:
            tokens = self.runner.run(batch)
            sampled = self.scheduler.update(batch)
        except Exception as exc:
            logger.exception("engine step failed; failing its batch of %d", len(batch.seqs))
            self.fail(batch.seqs, "error", describe(exc))
            return
        for seq, token in zip(sampled, tokens):
            request = self.requests.get(seq)
            if request is None:
                continue
            try:
                self._on_token(request, token)
            except Exception as exc:
                logger.exception("delivering a token of %s failed", seq.request_id)
                if seq in self.requests:
                    self.fail([seq], "error", describe(exc))

    def fail(self, seqs: Iterable[Sequence], reason: FinishReason, error: str | None) -> None:
        for seq in seqs:
            request = self.requests.get(seq)
            if request is not None:
                self.finish(request, reason, error=error)

    def finish(
        self, request: Request, reason: FinishReason, new_tokens: tuple[int, ...] = (), error: str | None = None
    ) -> None:
        """Take the request out of the scheduler, then hand its last delta to its sink."""
        seq = request.seq
        del self.requests[seq]
        try:
            self.scheduler.finish(seq)
        finally:
            request.finish(reason, new_tokens, error)

    def _on_token(self, request: Request, token: int) -> None:
        self.generation_tokens += 1
        reason = request.add_token(token, self.eos, self.max_model_len)
        if reason is not None:
            self.finish(request, reason, (token,))
