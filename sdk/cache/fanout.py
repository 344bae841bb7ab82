"""Fan-out warm-up: concurrent calls with one cacheable prefix let the first one write the cache.

A provider writes its prompt cache once a request's prefill has run. N calls sent at once with a
shared long prefix (sub-agents, parallel tool planning, map steps) all prefill it and pay N writes;
held until the first one's prefill is done, the other N-1 read it at a tenth of the price.

Under `Policy.fanout="warm"` a wrapped client keeps its in-flight "leaders" by cacheable prefix: the
stable prefix's fingerprint up to the last cache breakpoint (Anthropic), or the whole stable prefix
(automatic caches: OpenAI and OpenAI-compatible servers), long enough to be cached, together with the
API, model, base URL and credentials (so never across tenants or keys). A call whose prefix has an
in-flight leader waits until the leader's first chunk, its answer or its failure, at most
`Policy.fanout_wait_seconds`, then goes; a call that finds none is the leader of the next ones.
Waiting works from threads and from any number of event loops (asyncio's or trio's); the leader is
released once.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import sniffio

from sdk.cache.fingerprint import segments
from sdk.cache.hints import count_breakpoints
from sdk.call import Call
from sdk.lifecycle import CallEnd
from sdk.memory.place import credentials_hash
from sdk.memory.records import Leader
from sdk.memory.store import LocalStore, Store
from sdk.providers import facts_for
from sdk.tokens import estimate_tokens

_ANTHROPIC_MARK = "cache_control"


def _stable_values(call: Call) -> Iterator[Any]:
    """The stable segments' native values, in the order `sdk.cache.fingerprint.segments` chains them."""
    yield from call.tools
    yield from call.system
    yield from call.messages[: call.history_end]


def cacheable_prefix(call: Call) -> str | None:
    """The chain hash of `call`'s cacheable prefix, or None when it has none long enough to cache."""
    chain = segments(call)
    if not chain:
        return None
    values = list(_stable_values(call))
    end = len(chain)
    facts = facts_for(call.provider)
    if facts.breakpoints_only and count_breakpoints(call.params, _ANTHROPIC_MARK) == 0:
        marked = [i for i, value in enumerate(values) if count_breakpoints(value, _ANTHROPIC_MARK)]
        if not marked:
            return None  # Anthropic caches nothing before a breakpoint
        end = marked[-1] + 1
    minimum = facts.min_cacheable_tokens(call.model)
    if sum(estimate_tokens(segment.content or "") for segment in chain[:end]) < minimum:
        return None
    return chain[end - 1].chain


def fanout_key(call: Call, client: Any) -> bytes | None:
    """Who may wait for whom: the cacheable prefix with the API, model, server and credentials."""
    prefix = cacheable_prefix(call)
    if prefix is None:
        return None
    digest = hashlib.blake2b(digest_size=16)
    for part in (str(call.api), call.model, prefix, credentials_hash(client)):
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return digest.digest()


@dataclass(frozen=True, slots=True)
class Waited:
    """What a follower waited for: `leader` (its span id, if known) and for how long, in milliseconds."""

    leader_span_id: str | None
    waited_ms: float


class FanOut:
    """Per wrapped client: the in-flight leaders by fan-out key (see the module), on `store` (by
    default one in this process)."""

    def __init__(self, store: Store | None = None) -> None:
        self._store = store if store is not None else LocalStore()
        self._lock = threading.Lock()
        self._waiting = 0

    def join(self, key: bytes, span_id: str | None = None) -> tuple[Leader | None, Leader | None]:
        """`(leader to wait for, None)` when a call with this key is in flight, else `(None, the new
        leader)`, whose span is `span_id`."""
        return self._store.join(key, span_id)

    def release(self, leader: Leader) -> None:
        """The leader's first chunk, answer or failure arrived: let its followers go (once)."""
        self._store.release(leader)

    def wait(self, leader: Leader, timeout: float) -> Waited:
        """Block this thread until `leader` is released, at most `timeout` seconds."""
        start = perf_counter()
        with self._counted():
            self._store.wait(leader, timeout)
        return Waited(leader.span_id, (perf_counter() - start) * 1000.0)

    async def await_release(self, leader: Leader, timeout: float) -> Waited:
        """Wait in this event loop until `leader` is released, at most `timeout` seconds: the store's
        own wait under asyncio, a worker thread's under any other async library (trio: the clients
        run on both, through anyio)."""
        start = perf_counter()
        with self._counted():
            if sniffio.current_async_library() == "asyncio":
                await self._store.await_release(leader, timeout)
            else:
                from anyio import to_thread  # (the clients' own dependency, imported only off asyncio)

                await to_thread.run_sync(self._store.wait, leader, timeout, abandon_on_cancel=True)
        return Waited(leader.span_id, (perf_counter() - start) * 1000.0)

    @contextmanager
    def _counted(self) -> Iterator[None]:
        """One call waiting for a leader, while it waits."""
        with self._lock:
            self._waiting += 1
        try:
            yield
        finally:
            with self._lock:
                self._waiting -= 1

    def outage(self) -> str | None:
        """Why the store the leaders live in is failing (None: it is not)."""
        return self._store.outage()

    def in_flight(self) -> int:
        """How many leaders of this process have not been released yet (for tests and diagnostics)."""
        return self._store.held("leader")

    def waiting(self) -> int:
        """How many calls wait for a leader right now (for tests and diagnostics)."""
        with self._lock:
            return self._waiting


@dataclass(frozen=True, slots=True)
class LeaderRelease:
    """Lets the followers of `leader` go at its first content chunk or its end, whichever comes first
    (a `CallListener`; `FanOut.release` is idempotent)."""

    fanout: FanOut
    leader: Leader

    def first_chunk(self) -> None:
        self.fanout.release(self.leader)

    def ended(self, end: CallEnd) -> None:
        self.fanout.release(self.leader)
