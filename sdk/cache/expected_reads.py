"""Expected against read: what the provider should have read from its cache, and why it read less.

A low hit ratio on a span says nothing about whose fault it is. kvwise knows what it sent before,
so for each call it computes the tokens the provider should read: the longest prefix this client
sent before to the same provider and model, counted from that earlier call's reported usage
(its input tokens, shared in proportion to the bytes of the prompt they cover, at whole items:
tools, system parts, turns), within the provider's rules as kvwise knows them:

- OpenAI: from `sdk.providers.openai.MIN_CACHEABLE_TOKENS` on, in its `CACHE_STEP_TOKENS` steps;
- Anthropic: only up to a breakpoint the earlier call wrote and this one reads at (a breakpoint
  of this call at or after it), from the model's minimum cacheable length on;
- other OpenAI-compatible servers: as OpenAI (their block caches read at least that much; many
  servers stand in for OpenAI's own API).

A call that reads fewer (by more than `CACHE_MISS_TOLERANCE_SHARE` of the expectation: token counts
here are estimates) gets the expected and missed tokens and a `MissCause` on its span, and the missed
tokens are counted. The cause is the first that applies: the prefix went to another base URL or key
(`other_endpoint`); the earlier call is older than the cache lifetime kvwise knows (the policy's
TTL, else the provider's shortest documented retention: `lifetime_passed`); the shared prefix is
within `CACHE_UNDER_MINIMUM_MARGIN` of the provider's minimum, so the provider's count may fall
under it (`under_minimum`); the request carried breakpoints and the answer shows neither a cache
write nor a read (`breakpoint_ignored`: a gateway stripped them); else the provider dropped the
prefix (`evicted`: eviction, a replica that never saw it). On a healthy run nothing is recorded.

The memory is per wrapped client, bounded (`SENT_PREFIXES_REMEMBERED` calls) and keeps hashes and
sizes only: no prompt text.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from time import monotonic

from sdk._constants import CACHE_MISS_TOLERANCE_SHARE, CACHE_UNDER_MINIMUM_MARGIN, SENT_PREFIXES_REMEMBERED
from sdk.call import Call, Expectation, Miss, Usage
from sdk.lifecycle import CallEnd
from sdk.providers import facts_for
from sdk.semconv import MissCause

_MARK = '"cache_control"'  # an item carrying an Anthropic breakpoint, as its JSON reads
_Key = tuple[str, str, int]  # (provider, model, chained hash of the items up to one)
MAX_TOKENS_PER_CHAR = 4  # a character is at most 4 UTF-8 bytes, a byte-level token at least one byte
FRAME_CHARS = 16  # what a container adds to the serialised prompt beyond its strings (keys, punctuation), at most
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode


@dataclass(slots=True)
class _Sent:
    """One call as remembered: where it went, when, its items' cumulative sizes and breakpoints, and
    (once its answer came) its input tokens."""

    endpoint: object
    at: float
    sizes: list[int]
    marks: frozenset[int]
    keys: list[_Key]
    input_tokens: int = 0

    def tokens_at(self, index: int) -> int:
        """The input tokens of this call's items up to `index`, in proportion to their bytes."""
        return self.input_tokens * self.sizes[index] // max(self.sizes[-1], 1)


def miss_of(expectation: Expectation, usage: Usage) -> Miss | None:
    """The miss of a call that read `usage.cache_read_tokens` against `expectation` (None: no miss)."""
    read = usage.cache_read_tokens
    missed = expectation.tokens - read
    if missed <= CACHE_MISS_TOLERANCE_SHARE * expectation.tokens:
        return None
    cause = expectation.cause
    if cause is None:
        ignored = expectation.explicit and not read and not usage.cache_write_tokens
        cause = (MissCause.BREAKPOINT_IGNORED if ignored else MissCause.EVICTED).value
    return Miss(expectation.tokens, missed, cause)


class _Learn:
    """The call's listener: its answer's input tokens, for the calls after it to count from, and the
    call's `read_miss` (which its telemetry, told after the listeners, records)."""

    __slots__ = ("_call", "_sent")

    def __init__(self, call: Call, sent: _Sent) -> None:
        self._call, self._sent = call, sent

    def first_chunk(self) -> None:
        pass

    def ended(self, end: CallEnd) -> None:
        usage = end.usage_to_learn
        if usage is None:
            return
        self._sent.input_tokens = usage.input_tokens
        if self._call.decided.expected_read is not None:
            self._call.decided.read_miss = miss_of(self._call.decided.expected_read, usage)


class SentPrefixes:
    """Per wrapped client: the prefixes it sent (hashes and sizes), to tell what a call should read."""

    def __init__(self, size: int = SENT_PREFIXES_REMEMBERED) -> None:
        self._size = size
        self._calls: OrderedDict[int, _Sent] = OrderedDict()
        self._index: dict[_Key, tuple[_Sent, int]] = {}
        self._lock = threading.Lock()

    def expect(self, call: Call, ttl_seconds: float | None) -> tuple[Expectation | None, _Learn | None]:
        """Remember `call` as sent (its breakpoints placed); return what it should read, and the
        listener that learns its answer's input tokens (None for a prompt too short ever to be
        cached: no call after it can share enough of it, so it is not remembered)."""
        items = (call.tools, call.system, call.messages)
        facts = facts_for(call.provider)
        if _chars(items) * MAX_TOKENS_PER_CHAR < facts.min_cacheable_tokens(call.model):
            return None, None
        texts = [_dumps(item) for tier in items for item in tier]
        sizes, total = [], 0
        for text in texts:
            total += len(text)
            sizes.append(total)
        at_marks = facts.breakpoints_only
        marks = frozenset(index for index, text in enumerate(texts) if _MARK in text) if at_marks else frozenset()
        chain, keys = 0, []
        for text in texts:
            chain = hash((chain, text))
            keys.append((str(call.provider), call.model, chain))
        sent = _Sent(call.endpoint, monotonic(), sizes, marks, keys)
        with self._lock:
            found: tuple[_Sent, int] | None = None
            for key in keys:
                hit = self._index.get(key)
                if hit is None:
                    break
                found = hit
            self._remember(sent)
        expectation = _expectation(call, sent, found, ttl_seconds) if found is not None else None
        return expectation, _Learn(call, sent)

    def _remember(self, sent: _Sent) -> None:
        self._calls[id(sent)] = sent
        for index, key in enumerate(sent.keys):
            self._index[key] = (sent, index)
        if len(self._calls) > self._size:
            _, oldest = self._calls.popitem(last=False)
            for key in oldest.keys:
                if self._index.get(key, (None, 0))[0] is oldest:
                    del self._index[key]


def _expectation(call: Call, sent: _Sent, found: tuple[_Sent, int], ttl_seconds: float | None) -> Expectation | None:
    before, shared = found
    if not before.input_tokens:
        return None  # its answer is not in (in flight, or failed): nothing to count from
    facts = facts_for(call.provider)
    if facts.breakpoints_only:
        written = [index for index in before.marks if index <= shared and any(mark >= index for mark in sent.marks)]
        if not written:
            return None
        tokens = before.tokens_at(max(written))
    else:
        tokens = before.tokens_at(shared)
    minimum = facts.min_cacheable_tokens(call.model)
    tokens -= tokens % facts.cache_step_tokens
    if tokens < minimum:
        return None
    lifetime = ttl_seconds if ttl_seconds is not None else facts.shortest_retention_seconds
    cause: str | None = None
    if before.endpoint != sent.endpoint:
        cause = MissCause.OTHER_ENDPOINT.value
    elif lifetime is not None and sent.at - before.at > lifetime:
        cause = MissCause.LIFETIME_PASSED.value
    elif tokens < minimum * (1 + CACHE_UNDER_MINIMUM_MARGIN):
        cause = MissCause.UNDER_MINIMUM.value
    return Expectation(tokens, cause, bool(sent.marks))


def _chars(value: object) -> int:
    """A cheap upper bound's base for a prompt's size: its strings' characters, `FRAME_CHARS` a container
    (keys and punctuation), without serialising it. A loop over a stack, not a recursion: this runs on
    every call, and a Python call per node costs more than the node's own work."""
    total, pending = 0, [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            total += len(item)
            continue
        total += FRAME_CHARS
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
    return total
