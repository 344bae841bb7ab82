"""`logprobs` / `top_logprobs`: the model's log-probabilities of each output token, and of the most likely.

A `LogprobsRecorder` is the request's `logits_processor`: at each step it sees the raw logits
(vLLM's default "raw logprobs": before penalties, temperature and filters), so

    logprob(token) = log_softmax(logits)[token]

It keeps one step's row until the token sampled from it is known (the next step's output, or the
answer's end), never the whole answer's rows. The route reads the entries in output order with
`take`, on the server's thread while the engine's runs: a lock guards the hand-over.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]


class LogprobsRecorder:
    """A logits processor that records, per output token, its log-probability and the `top` best."""

    def __init__(self, top: int):
        self._top = top
        self._lock = threading.Lock()
        self._pending: tuple[int, torch.Tensor, tuple[tuple[int, float], ...]] | None = None
        self._done: dict[int, TokenLogprob] = {}
        self._next = 0

    def __call__(self, output_token_ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        row = torch.log_softmax(logits.float(), dim=-1)
        top = torch.topk(row, min(self._top, row.shape[-1])) if self._top else None
        best = tuple(zip(top.indices.tolist(), top.values.tolist())) if top is not None else ()
        with self._lock:
            if self._pending is not None and output_token_ids:
                self._resolve(output_token_ids[-1])
            self._pending = (len(output_token_ids), row, best)
        return logits

    def take(self, tokens: Sequence[int]) -> list[TokenLogprob]:
        """The entries of the next `len(tokens)` output tokens, in order (each is taken once)."""
        entries = []
        with self._lock:
            for token in tokens:
                if self._next not in self._done:
                    self._resolve(token)
                entries.append(self._done.pop(self._next))
                self._next += 1
        return entries

    def _resolve(self, token: int) -> None:
        assert self._pending is not None, "a token arrived before the step that sampled it"
        position, row, best = self._pending
        self._done[position] = TokenLogprob(token, row[token].item(), best)
        self._pending = None


Decode = Callable[[int], str]


def chat_logprobs(entries: Sequence[TokenLogprob], decode: Decode) -> dict[str, Any]:
    """Chat Completions' `choice.logprobs`: `{"content": [{token, logprob, bytes, top_logprobs}], "refusal"}`."""

    def item(token: int, logprob: float) -> dict[str, Any]:
        text = decode(token)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

    content = [{**item(e.token, e.logprob), "top_logprobs": [item(t, lp) for t, lp in e.top]} for e in entries]
    return {"content": content, "refusal": None}


def completion_logprobs(entries: Sequence[TokenLogprob], decode: Decode, offset: int) -> dict[str, Any]:
    """Legacy Completions' `choice.logprobs`; `offset` is where the first token's text starts in the text.

    `top_logprobs` maps text to logprob, so two top tokens with the same text (the end tokens both
    decode to '') share one key: the likelier one's logprob, never the other's (`e.top` is in
    descending order; vLLM's dict keeps the last, so its top can read lower than the chosen token).
    """
    tokens = [decode(e.token) for e in entries]
    offsets = []
    for text in tokens:
        offsets.append(offset)
        offset += len(text)
    return {
        "tokens": tokens,
        "token_logprobs": [e.logprob for e in entries],
        "top_logprobs": [{decode(t): lp for t, lp in reversed(e.top)} for e in entries],
        "text_offset": offsets,
    }
