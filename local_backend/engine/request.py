"""One request after admission: its sequence, its text so far, and where its deltas and completion go."""

from __future__ import annotations

import time
from collections.abc import Callable
from collections.abc import Sequence as Seq

from local_backend.engine.detokenizer import Detokenizer
from local_backend.engine.outputs import Completion, FinishReason, StreamDelta, Timings
from local_backend.engine.sequence import Sequence
from local_backend.model.tokenizer import TextTokenizer
from local_backend.sampling.sampling_params import SamplingParams

Prompt = str | Seq[int]
"""A prompt is text (encoded with the checkpoint's BOS) or token ids taken as they are."""

Sink = Callable[[StreamDelta], None]
"""Where a request's deltas go: a stream's queue, or generate()'s collector."""


def prompt_token_ids(
    prompt: Prompt,
    params: SamplingParams | None,
    tokenizer: TextTokenizer,
    vocab_size: int,
    max_model_len: int,
) -> list[int]:
    """The prompt's token ids, or a `ValueError` saying what is wrong with the request."""
    if params is not None and not isinstance(params, SamplingParams):
        raise ValueError(f"params must be SamplingParams, got {type(params).__name__}")
    if isinstance(prompt, str):
        ids = tokenizer.encode(prompt) if prompt else []
    else:
        ids = list(prompt)
        bad = [t for t in ids if not isinstance(t, int) or not 0 <= t < vocab_size]
        if bad:
            raise ValueError(f"prompt has unknown token ids {bad[:5]}; valid: 0..{vocab_size - 1}")
    if not ids:
        raise ValueError("prompt is empty: give at least one token")
    if len(ids) >= max_model_len:
        raise ValueError(f"prompt has {len(ids)} tokens; max_model_len={max_model_len} leaves no room to generate")
    stop_ids = params.stop_token_ids if params else ()
    if any(t >= vocab_size for t in stop_ids):
        raise ValueError(f"stop_token_ids {stop_ids} exceed the vocabulary ({vocab_size})")
    return ids


class Request:
    """A sequence, its detokenizer and its sink: turns what the core decided into deltas.

    The core decides when a request ends (`EngineCore` finishes every request in one place); the
    request only reports: a delta per token that does not end it (`emit`), then the last delta
    with the `Completion` (`complete`).
    """

    __slots__ = ("seq", "detokenizer", "sink")

    def __init__(self, seq: Sequence, detokenizer: Detokenizer, sink: Sink):
        self.seq, self.detokenizer, self.sink = seq, detokenizer, sink

    @property
    def is_finished(self) -> bool:
        return self.seq.is_finished

    def emit(self, token: int) -> None:
        """Deliver the text `token` made safe to show (the token is in the sequence and the detokenizer)."""
        self.sink(self._delta(self.detokenizer.take_delta(final=False), (token,)))

    def complete(self, reason: FinishReason, new_tokens: tuple[int, ...] = (), error: str | None = None) -> None:
        """Deliver the last delta with the `Completion` (the sequence is already out of the queues,
        the detokenizer flushed)."""
        seq = self.seq
        now = seq.finished_time = time.perf_counter()
        scheduled = seq.scheduled_time or now
        first = seq.first_token_time or now
        completion = Completion(
            request_id=seq.request_id,
            prompt_token_ids=tuple(seq.prompt_token_ids),
            token_ids=tuple(seq.output_token_ids),
            text=self.detokenizer.text,
            finish_reason=reason,
            cached_tokens=seq.num_cached_tokens,
            cache_written_tokens=seq.num_cache_written_tokens,
            stop_string=self.detokenizer.stop_string,
            timings=Timings(scheduled - seq.arrival_time, first - scheduled, now - first),
            error=error,
            draft_tokens=seq.num_draft_tokens,
            accepted_draft_tokens=seq.num_accepted_tokens,
        )
        self.sink(self._delta(self.detokenizer.take_delta(final=True), new_tokens, completion))

    def _delta(self, text: str, token_ids: tuple[int, ...], completion: Completion | None = None) -> StreamDelta:
        seq = self.seq
        return StreamDelta(text, token_ids, seq.num_cached_tokens, seq.num_cache_written_tokens, completion)
