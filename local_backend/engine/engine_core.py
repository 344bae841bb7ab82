"""The engine's stepping core: synchronous, single-threaded, and never left inconsistent by an error.

`EngineCore` owns the block pool, the scheduler and the model runner, and the requests it was
given. `step()` plans one batch, runs it, delivers what it produced and returns a `StepOutput` (the
tokens, the finished requests, the stats after it), so the front never reads the core's state.
After the runner, one call does a step's bookkeeping, as in vLLM v1's `EngineCore.step`:
`Scheduler.update_from_output` appends each sampled token, checks the stops and frees the blocks of
what ended; the core then hands each ended request's completion over (`_deliver`). An abort or an
error ends a request through `_finish`, which takes it out of the scheduler first.

Whatever raises inside a step fails only what that step was working on, with
`finish_reason="error"` and the error's text: the batch, when the model or sampler raised; the
one sequence being planned, when scheduling raised (the scheduler leaves its queues consistent);
the one request, when delivering its token raised. The core then goes on serving. Threads,
queues and aborts from other threads belong to the front (`engine.Engine`, vLLM's `AsyncLLM` to
this `EngineCore`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import torch

from local_backend.engine.block_manager import BlockManager
from local_backend.engine.model_runner import ModelRunner
from local_backend.engine.outputs import EngineStats, FinishReason, StepOutput
from local_backend.engine.request import Request
from local_backend.engine.scheduler import ScheduleFailed, Scheduler
from local_backend.engine.sequence import Sequence
from local_backend.engine.speculative import NgramProposer, SpeculativeConfig
from local_backend.kernels import kv_quant, ops
from local_backend.kernels.quantized import QUANTIZATION_NONE
from local_backend.model import dtype_choice
from local_backend.model.config import ModelConfig
from local_backend.model.llama import CausalLM
from local_backend.model.tokenizer import TextTokenizer
from local_backend.sampling.sampler import Sampler

logger = logging.getLogger(__name__)


def describe(exc: BaseException) -> str:
    """What a failed step tells its requests: the error's type and message."""
    return f"engine step failed: {type(exc).__name__}: {exc}"


class EngineCore:
    """Requests in (`add`, `abort`), one batch per `step()`; each request finishes exactly once.

    num_blocks = min(kv_cache_memory ÷ (block_size × kv_bytes_per_token),
    max_num_seqs × ⌈max_model_len ÷ block_size⌉): never more blocks than a full batch can use;
    kv_bytes_per_token = 2 × layers × kv_heads × (head_dim × bytes_per_elem + scale bytes), the scales
    only for a quantized `kv_cache_dtype` (`kv_quant`).
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
        enable_prefix_caching: bool = True,
        speculative_config: SpeculativeConfig | None = None,
        kv_cache_dtype: str = "auto",
        quantization: str = QUANTIZATION_NONE,
    ):
        param = next(model.parameters())
        device = param.device
        kv_dtype = kv_quant.storage_dtype(kv_cache_dtype, param.dtype)
        self.config = cfg
        self.dtype = dtype_choice.explain(device.type, str(param.dtype).removeprefix("torch."))
        self.quantization = quantization
        self.quantized_types = model.quantized_types()
        self.kv_bytes_per_token = kv_quant.bytes_per_token(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, kv_dtype)
        usable = max_num_seqs * -(-max_model_len // block_size)
        num_blocks = min(kv_cache_memory // (block_size * self.kv_bytes_per_token), usable)
        self.block_manager = BlockManager(num_blocks, block_size, enable_prefix_caching)
        self.max_model_len = min(max_model_len, num_blocks * block_size)
        proposer = NgramProposer(speculative_config, self.max_model_len) if speculative_config else None
        self.eos = frozenset(cfg.eos_token_ids) | (
            {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
        )
        self.scheduler = Scheduler(
            self.block_manager,
            max_num_seqs,
            max(max_num_batched_tokens, max_num_seqs),
            proposer,
            eos=self.eos,
            max_model_len=self.max_model_len,
        )
        sampler = Sampler(cfg.vocab_size, tokenizer.ids_containing, ops.select(device, torch.float32, cfg.head_dim))
        self.runner = ModelRunner(model, cfg, sampler, num_blocks, block_size, self.max_model_len, kv_dtype)
        per_token = kv_quant.describe_bytes_per_token(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, kv_dtype)
        logger.info(
            "KV cache %s: %s; %d blocks of %d: %d tokens",
            kv_cache_dtype,
            per_token,
            num_blocks,
            block_size,
            num_blocks * block_size,
        )
        self.requests: dict[Sequence, Request] = {}
        self.prompt_tokens = self.generation_tokens = 0
        self._finished: list[tuple[str, FinishReason]] = []

    def add(self, request: Request) -> None:
        self.requests[request.seq] = request
        self.prompt_tokens += request.seq.num_prompt_tokens
        self.scheduler.add(request.seq)

    def abort(self, request: Request) -> None:
        """Finish the request with "abort" (no-op once it has finished: aborts are by object, not id)."""
        if request.seq in self.requests:
            self._finish(request, "abort")

    def finish_all(self, reason: FinishReason, error: str | None = None) -> None:
        """Finish every request not yet finished (closing, or a failure outside any one step)."""
        self._fail(list(self.requests), reason, error)

    def stats(self) -> EngineStats:
        """The block pool, the queues and the token counts now (on the stepping thread)."""
        bm, scheduler = self.block_manager, self.scheduler
        return EngineStats(
            num_blocks=bm.num_blocks,
            max_num_seqs=scheduler.max_num_seqs,
            blocks_used=bm.num_used,
            blocks_free=bm.num_free,
            blocks_cached=bm.num_cached,
            block_size=bm.block_size,
            kv_bytes_per_token=self.kv_bytes_per_token,
            kv_cache_bytes=bm.num_blocks * bm.block_size * self.kv_bytes_per_token,
            num_running=len(scheduler.running),
            num_waiting=len(scheduler.waiting),
            num_preemptions=scheduler.num_preemptions,
            prompt_tokens=self.prompt_tokens,
            prefix_cache_hit_tokens=bm.hit_tokens,
            generation_tokens=self.generation_tokens,
            spec_decode_drafts=scheduler.num_drafts,
            spec_decode_draft_tokens=scheduler.num_draft_tokens,
            spec_decode_accepted_tokens=scheduler.num_accepted_tokens,
            dtype=self.dtype.name,
            dtype_reason=self.dtype.reason,
            quantization=self.quantization,
            quantized_types=",".join(self.quantized_types),
        )

    def step(self) -> StepOutput:
        """Plan one batch, run it, and deliver its tokens; a failure fails only what it touched."""
        new_token_ids: dict[str, tuple[int, ...]] = {}
        if self.scheduler.has_unfinished():
            self._step(new_token_ids)
        finished, self._finished = tuple(self._finished), []
        return StepOutput(new_token_ids, finished, self.stats())

    def _step(self, new_token_ids: dict[str, tuple[int, ...]]) -> None:
        try:
            batch = self.scheduler.schedule()
        except ScheduleFailed as exc:
            logger.error("scheduling failed; failing %s", exc.seq, exc_info=exc.__cause__)
            culprit = [exc.seq] if exc.seq is not None else []
            self._fail(culprit, "error", describe(exc.__cause__ or exc))
            return
        if not batch.seqs:
            return
        try:
            produced = self.runner.run(batch)
            update = self.scheduler.update_from_output(batch, produced, self.requests)
        except Exception as exc:
            logger.exception("engine step failed; failing its batch of %d", len(batch.seqs))
            self._fail(batch.seqs, "error", describe(exc))
            return
        self.generation_tokens += update.num_generated
        new_token_ids.update(update.new_token_ids)
        for ended in update.ended:
            try:
                if ended.error is not None:
                    raise ended.error
                self._deliver(self.requests[ended.seq], ended.reason, ended.new_tokens)
            except Exception as exc:
                logger.exception("delivering a token of %s failed", ended.seq.request_id)
                self._fail([ended.seq], "error", describe(exc))

    def _fail(self, seqs: Iterable[Sequence], reason: FinishReason, error: str | None) -> None:
        for seq in seqs:
            request = self.requests.get(seq)
            if request is not None:
                self._finish(request, reason, error=error)

    def _finish(self, request: Request, reason: FinishReason, error: str | None = None) -> None:
        """End the request (an abort, an error): out of the scheduler with its blocks freed, then its completion."""
        try:
            self.scheduler.finish(request.seq)
        finally:
            self._deliver(request, reason, error=error)

    def _deliver(
        self, request: Request, reason: FinishReason, new_tokens: tuple[int, ...] = (), error: str | None = None
    ) -> None:
        """Hand over the completion of a request already out of the scheduler.

        Text held back as a possibly incomplete character is flushed first; if it ends at a stop
        string, a "length" finish becomes "stop".
        """
        seq = request.seq
        del self.requests[seq]
        if request.detokenizer.flush() and reason == "length":
            reason = "stop"
        self._finished.append((seq.request_id, reason))
        request.complete(reason, new_tokens, error)
