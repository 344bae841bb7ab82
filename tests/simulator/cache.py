"""Prompt caches that count hits the way the hosted APIs do.

Both remember prefixes as digests of a hash chain over the prompt's tokens (seeded with the model
name, as caches are per model), so a lookup costs one pass over the prompt whatever the history.

- `PrefixCache` (OpenAI, automatic): a hit is the longest previously seen prefix, counted in
  128-token steps and only from 1024 tokens on:
  `cached = floor(common_prefix / 128) * 128 if common_prefix >= 1024 else 0`;
  `cache_write = floor(prompt / 128) * 128 - cached` for prompts of 1024 tokens or more.
- `BreakpointCache` (Anthropic, explicit): entries are written only at `cache_control` breakpoints
  whose prefix reaches the minimum length; a request reads the longest entry found at a content-block
  boundary at or up to 20 blocks before one of its breakpoints; it writes up to its last cacheable
  breakpoint (`cache_creation = written_end - read`), and `input_tokens` counts the tokens after
  `max(read, written_end)`. An entry lives for its breakpoint's TTL (5 minutes, or 1 hour) from its
  last use, read or written; the clock is the store's `clock` (the simulator can move it on).

`lookup` never changes the cache; `commit` stores what the request wrote (and refreshes what it
read), once it was served.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .constants import (
    ANTHROPIC_CACHE_TTL_SECONDS,
    ANTHROPIC_LOOKBACK_BLOCKS,
    OPENAI_CACHE_MIN_TOKENS,
    OPENAI_CACHE_STEP_TOKENS,
)
from .tokens import RenderedPrompt


@dataclass(frozen=True, slots=True)
class CacheUse:
    """What one request read from and wrote to a cache, in tokens.

    `written_1h` is the part of `written` whose breakpoint asked for the one-hour TTL.
    `uncached_tail` is the number of prompt tokens after the last read or written position.
    """

    read: int
    written: int
    uncached_tail: int
    written_1h: int = 0
    entries: frozenset[bytes] = field(default=frozenset(), repr=False)
    lifetimes: Mapping[bytes, float] = field(default_factory=dict, repr=False)
    """Seconds each entry (written or read) lives from now; an entry not named here never expires."""


def prefix_digests(seed: str, tokens: Sequence[str], positions: Iterable[int]) -> dict[int, bytes]:
    """Digest of `tokens[:p]` for each `p` in `positions`, from one incremental hash chain."""
    chain = hashlib.blake2b(seed.encode(), digest_size=16)
    digests: dict[int, bytes] = {}
    start = 0
    for end in sorted(set(positions)):
        if end > start:
            chain.update(("\x00".join(tokens[start:end]) + "\x00").encode())
            start = end
        digests[end] = chain.copy().digest()
    return digests


def _lifetime(ttl: str) -> float:
    return ANTHROPIC_CACHE_TTL_SECONDS.get(ttl, ANTHROPIC_CACHE_TTL_SECONDS["5m"])


class _DigestStore:
    """A thread-safe set of prefix digests shared by the server's request threads."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._expiry: dict[bytes, float] = {}
        self.clock = clock

    def _known(self, digest: bytes) -> bool:
        with self._lock:
            return self._expiry.get(digest, -math.inf) > self.clock()

    def commit(self, use: CacheUse) -> None:
        """Remember the prefixes a served request wrote; restart the TTL of those it used."""
        now = self.clock()
        with self._lock:
            for digest in use.entries | use.lifetimes.keys():
                self._expiry[digest] = now + use.lifetimes.get(digest, math.inf)

    def clear(self) -> None:
        with self._lock:
            self._expiry.clear()


class PrefixCache(_DigestStore):
    """OpenAI's automatic prompt cache (Chat Completions and Responses share it)."""

    def lookup(self, model: str, prompt: RenderedPrompt) -> CacheUse:
        if len(prompt) < OPENAI_CACHE_MIN_TOKENS:
            return CacheUse(read=0, written=0, uncached_tail=len(prompt))
        steps = range(OPENAI_CACHE_STEP_TOKENS, len(prompt) + 1, OPENAI_CACHE_STEP_TOKENS)
        digests = prefix_digests(model, prompt.tokens, steps)
        hit = max((step for step in steps if self._known(digests[step])), default=0)
        read = hit if hit >= OPENAI_CACHE_MIN_TOKENS else 0
        cacheable = steps[-1]
        return CacheUse(
            read=read,
            written=cacheable - read,
            uncached_tail=len(prompt) - read,
            entries=frozenset(digests.values()),
        )


class BreakpointCache(_DigestStore):
    """Anthropic's explicit prompt cache, keyed at `cache_control` breakpoints."""

    def lookup(self, model: str, prompt: RenderedPrompt, min_tokens: int) -> CacheUse:
        ends = sorted(set(prompt.block_ends) | set(prompt.breakpoints))
        digests = prefix_digests(model, prompt.tokens, ends)
        read, read_ttl = 0, ANTHROPIC_CACHE_TTL_SECONDS["5m"]
        for breakpoint in prompt.breakpoints:
            at = ends.index(breakpoint)
            window = ends[max(0, at - ANTHROPIC_LOOKBACK_BLOCKS) : at + 1]
            hit = max((end for end in window if self._known(digests[end])), default=0)
            if hit > read:
                read, read_ttl = hit, _lifetime(prompt.breakpoints[breakpoint])
        writable = sorted(end for end in prompt.breakpoints if end >= min_tokens)
        written_end = max(writable, default=0)
        written_1h, previous = 0, read
        for end in writable:
            if end > previous and prompt.breakpoints[end] == "1h":
                written_1h += end - previous
            previous = max(previous, end)
        return CacheUse(
            read=read,
            written=max(written_end - read, 0),
            uncached_tail=len(prompt) - max(read, written_end),
            written_1h=written_1h,
            entries=frozenset(digests[end] for end in writable),
            lifetimes={
                **({digests[read]: read_ttl} if read else {}),
                **{digests[end]: _lifetime(prompt.breakpoints[end]) for end in writable},
            },
        )
