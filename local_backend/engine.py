"""The engine: requests in, completions and stream deltas out, one scheduler step at a time.

Threading model: `step()` runs under a lock, so any thread may drive it. `generate()` drives steps
itself until its requests finish; `stream()` starts one background thread per engine that steps
while there is work, and hands deltas to each stream's asyncio queue. Requests and aborts from any
thread go through an inbox drained at the start of each step, so the scheduler is only ever
touched by the stepping thread.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from local_backend import _constants as C
from local_backend.block_manager import BlockManager
from local_backend.config import ModelConfig
from local_backend.detokenizer import Detokenizer
from local_backend.loader import (
    check_checkpoint,
    default_kv_cache_memory,
    load_model,
    resolve_device,
    resolve_directory,
)
from local_backend.model_runner import ModelRunner
from local_backend.outputs import Completion, EngineStats, FinishReason, StreamDelta
from local_backend.request import Prompt, Request, Sink, prompt_token_ids
from local_backend.sampler import Sampler
from local_backend.sampling_params import SamplingParams
from local_backend.scheduler import Scheduler
from local_backend.sequence import Sequence as Seq
from local_backend.tokenizer import TextTokenizer

logger = logging.getLogger(__name__)


class Engine:
    """A Llama-family model behind a paged KV cache with prefix caching and continuous batching.

        engine = Engine.from_pretrained("default")
        [out] = engine.generate(["What is prefill?"], SamplingParams(max_tokens=64, temperature=0))
        async for delta in engine.stream("Hi", SamplingParams(max_tokens=8)): print(delta.text)
    """

    def __init__(
        self,
        cfg: ModelConfig,
        tokenizer: TextTokenizer,
        model: torch.nn.Module,
        *,
        kv_cache_memory: int,
        block_size: int,
        max_num_seqs: int,
        max_model_len: int,
        max_num_batched_tokens: int,
    ):
        dtype = next(model.parameters()).dtype
        self.config = cfg
        self.tokenizer = tokenizer
        self.kv_bytes_per_token = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * dtype.itemsize
        num_blocks = kv_cache_memory // (block_size * self.kv_bytes_per_token)
        self.block_manager = BlockManager(num_blocks, block_size)
        self.max_model_len = min(max_model_len, num_blocks * block_size)
        self.scheduler = Scheduler(
            self.block_manager, max_num_seqs, max(max_num_batched_tokens, max_num_seqs)
        )
        sampler = Sampler(cfg.vocab_size, tokenizer.ids_containing)
        self.runner = ModelRunner(model, cfg, sampler, num_blocks, block_size, self.max_model_len)
        self._eos = frozenset(cfg.eos_token_ids) | (
            {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
        )
        self._requests: dict[str, Request] = {}
        self._live_ids: set[str] = set()
        self._inbox: list[tuple[str, Any]] = []
        self._ids = itertools.count()
        self._step_lock = threading.Lock()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._prompt_tokens = self._generation_tokens = 0

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        device: str | torch.device = "auto",
        dtype: str | torch.dtype = "auto",
        kv_cache_memory: int | None = None,
        block_size: int = C.DEFAULT_BLOCK_SIZE,
        max_num_seqs: int = C.DEFAULT_MAX_NUM_SEQS,
        max_model_len: int | None = None,
        max_num_batched_tokens: int = C.DEFAULT_MAX_NUM_BATCHED_TOKENS,
    ) -> Engine:
        """Load a Hugging Face checkpoint directory, or `"default"` for the bundled model.

        `device="auto"` is CUDA when available, else CPU; `dtype="auto"` is bf16 on CUDA, float32
        on CPU. `kv_cache_memory` (bytes) sizes the block pool: num_blocks = memory ÷ (block_size ×
        kv_bytes_per_token); by default 512 MiB on CPU, half the free memory on CUDA.
        `max_model_len` (prompt + output) defaults to min(8192, the model's limit) and is cut to
        what the pool holds; `max_num_seqs` caps the running batch; `max_num_batched_tokens` is
        the per-step token budget that chunks long prompts. Missing files raise
        `FileNotFoundError` naming them; an unsupported architecture raises `ValueError`.
        """
        directory = resolve_directory(path)
        check_checkpoint(directory)
        for name, value in (("block_size", block_size), ("max_num_seqs", max_num_seqs)):
            if value < 1:
                raise ValueError(f"{name}={value} must be >= 1")
        cfg = ModelConfig.from_file(directory / "config.json")
        limit = min(cfg.max_position_embeddings, cfg.sliding_window or cfg.max_position_embeddings)
        if max_model_len is not None and max_model_len > limit:
            raise ValueError(f"max_model_len={max_model_len} exceeds the model's limit of {limit}")
        dev, dtype = resolve_device(device, dtype)
        model = load_model(directory, cfg, dev, dtype)
        return cls(
            cfg,
            TextTokenizer.from_dir(directory),
            model,
            kv_cache_memory=default_kv_cache_memory(dev) if kv_cache_memory is None else kv_cache_memory,
            block_size=block_size,
            max_num_seqs=max_num_seqs,
            max_model_len=max_model_len or min(limit, C.DEFAULT_MAX_MODEL_LEN),
            max_num_batched_tokens=max_num_batched_tokens,
        )

    @property
    def kv_cache_bytes(self) -> int:
        """num_blocks × block_size × kv_bytes_per_token: the bytes of the KV pool."""
        return self.block_manager.num_blocks * self.block_manager.block_size * self.kv_bytes_per_token

    def chat_prompt(
        self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True
    ) -> list[int]:
        """Token ids of `messages` rendered with the checkpoint's chat template (pass to generate)."""
        return self.tokenizer.chat_prompt(messages, add_generation_prompt)

    def generate(
        self,
        prompts: Sequence[Prompt],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        cache_salt: str | None = None,
    ) -> list[Completion]:
        """Run every prompt (text or token ids) to completion; one `Completion` per prompt, in order.

        `cache_salt` (a tenant's id) keeps the prompts' prefix-cache blocks apart from those of
        other salts (see `stream`). Bad input raises `ValueError` before anything is queued.
        """
        if isinstance(prompts, str):
            raise ValueError("prompts must be a list of prompts, got one string")
        if isinstance(params, SamplingParams) or params is None:
            params = [params or SamplingParams()] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError(f"{len(params)} SamplingParams for {len(prompts)} prompts")
        prepared = [self._prepare(p, sp) for p, sp in zip(prompts, params)]
        done: dict[str, Completion] = {}

        def sink(delta: StreamDelta) -> None:
            if delta.completion is not None:
                done[delta.completion.request_id] = delta.completion

        ids = [self._submit(ids, sp, sink, None, cache_salt) for ids, sp in zip(prepared, params)]
        try:
            while len(done) < len(ids):
                self.step()
        finally:
            for request_id in ids:
                if request_id not in done:
                    self.abort(request_id)
        return [done[i] for i in ids]

    def stream(
        self,
        prompt: Prompt,
        params: SamplingParams | None = None,
        *,
        request_id: str | None = None,
        cache_salt: str | None = None,
    ) -> AsyncIterator[StreamDelta]:
        """Async iterator of `StreamDelta`s; the last one carries the `Completion`.

        Input is checked now (`ValueError`); the request starts at the first iteration and runs on
        the engine's background thread. Closing the iterator (`contextlib.aclosing`, or garbage
        collection of an abandoned one) aborts the request and frees its blocks. `cache_salt` is
        mixed into the first block's hash (vLLM's `cache_salt`): requests share prefix-cache blocks
        only with requests of the same salt (None is a salt of its own).
        """
        params = params or SamplingParams()
        return self._stream(self._prepare(prompt, params), params, request_id, cache_salt)

    async def _stream(
        self, token_ids: list[int], params: SamplingParams, request_id: str | None, cache_salt: str | None
    ) -> AsyncIterator[StreamDelta]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[StreamDelta] = asyncio.Queue()

        def sink(delta: StreamDelta) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, delta)
            except RuntimeError:  # the consumer's loop is gone
                pass

        rid = self._submit(token_ids, params, sink, request_id, cache_salt)
        self._start_loop()
        try:
            while True:
                delta = await queue.get()
                yield delta
                if delta.completion is not None:
                    return
        finally:
            self.abort(rid)

    def abort(self, request_id: str) -> None:
        """Stop a request (no-op when unknown or finished); its blocks return to the pool."""
        self._post("abort", request_id)
        if self._step_lock.acquire(blocking=False):
            try:
                self._drain_inbox()
            finally:
                self._step_lock.release()

    def stats(self) -> EngineStats:
        bm = self.block_manager
        return EngineStats(
            num_blocks=bm.num_blocks,
            max_num_seqs=self.scheduler.max_num_seqs,
            blocks_used=bm.num_used,
            blocks_free=bm.num_free,
            blocks_cached=bm.num_cached,
            block_size=bm.block_size,
            kv_bytes_per_token=self.kv_bytes_per_token,
            kv_cache_bytes=self.kv_cache_bytes,
            num_running=len(self.scheduler.running),
            num_waiting=len(self.scheduler.waiting),
            num_preemptions=self.scheduler.num_preemptions,
            prompt_tokens=self._prompt_tokens,
            prefix_cache_hit_tokens=bm.hit_tokens,
            generation_tokens=self._generation_tokens,
        )

    def reset_prefix_cache(self) -> None:
        """Forget all cached blocks (cold-start measurements)."""
        with self._step_lock:
            self.block_manager.reset_prefix_cache()

    def step(self) -> None:
        """Admit queued requests, run one scheduled batch, and deliver what it produced."""
        with self._step_lock:
            self._drain_inbox()
            if not self.scheduler.has_unfinished():
                return
            batch = self.scheduler.schedule()
            tokens = self.runner.run(batch) if batch.seqs else []
            for seq, token in zip(self.scheduler.update(batch), tokens):
                self._on_token(self._requests[seq.request_id], token)

    def close(self) -> None:
        """Stop the background loop, if one was started."""
        with self._wake:
            self._closed = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _prepare(self, prompt: Prompt, params: SamplingParams | None) -> list[int]:
        return prompt_token_ids(prompt, params, self.tokenizer, self.config.vocab_size, self.max_model_len)

    def _submit(
        self, token_ids: list[int], params: SamplingParams, sink: Sink, request_id: str | None, cache_salt: str | None
    ) -> str:
        rid = request_id or f"req-{next(self._ids)}"
        detokenizer = Detokenizer(self.tokenizer, token_ids, params.stop)
        request = Request(Seq(rid, token_ids, params, cache_salt), detokenizer, sink)
        with self._wake:
            if rid in self._live_ids:
                raise ValueError(f"request_id {rid!r} is already in use")
            self._live_ids.add(rid)
        self._post("add", request)
        return rid

    def _post(self, kind: str, item: Any) -> None:
        with self._wake:
            self._inbox.append((kind, item))
            self._wake.notify()

    def _drain_inbox(self) -> None:
        with self._wake:
            commands, self._inbox = self._inbox, []
        for kind, item in commands:
            if kind == "add":
                self._requests[item.seq.request_id] = item
                self._prompt_tokens += item.seq.num_prompt_tokens
                self.scheduler.add(item.seq)
            elif item in self._requests:
                self._finish(self._requests[item], "abort")

    def _on_token(self, request: Request, token: int) -> None:
        self._generation_tokens += 1
        reason = request.add_token(token, self._eos, self.max_model_len)
        if reason is not None:
            self._finish(request, reason, (token,))

    def _finish(self, request: Request, reason: FinishReason, new_tokens: tuple[int, ...] = ()) -> None:
        self.scheduler.finish(request.seq)
        del self._requests[request.seq.request_id]
        with self._wake:
            self._live_ids.discard(request.seq.request_id)
        request.finish(reason, new_tokens)

    def _start_loop(self) -> None:
        with self._wake:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._loop, name="kvwise-engine", daemon=True)
                self._thread.start()

    def _has_work(self) -> bool:
        return self._closed or bool(self._inbox) or self.scheduler.has_unfinished()

    def _loop(self) -> None:
        while True:
            with self._wake:
                self._wake.wait_for(self._has_work)
                if self._closed:
                    return
            try:
                self.step()
            except Exception:
                logger.exception("engine step failed; aborting its requests")
                with self._step_lock:
                    for request in list(self._requests.values()):
                        self._finish(request, "abort")
