"""Where the memories live: one small interface, and its implementation in this process.

The four memories of a wrapped client (`sdk.prompt.families`, `sdk.decode.adaptive_caps`, `sdk.cache.fanout`, the prefix
tracker of `sdk.cache.fingerprint`) hold their rules; a `Store` holds their records and answers the few
operations they need. A feature that owns its record type says how it is kept (a `Codec`: its kind,
and its text, read back checked); the rest (`sdk.memory.records`) the store still knows by name.
`LocalStore` keeps them in this process, bounded (LRU) and locked; `sdk.memory.redis_store.RedisStore`
keeps them in Redis or Valkey, shared by a fleet, and falls back to a `LocalStore` of its own whenever
the store fails, so every operation always answers.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from sdk._constants import ADAPTIVE_CAP_WINDOW, ADAPTIVE_CAP_WORKLOADS, STATE_LOCAL_VALUES, VOLATILE_FAMILIES
from sdk.memory.records import Leader, Seen, WindowsKey
from sdk.memory.values import checked_value

R = TypeVar("R")

Held = str
"""What `Store.held` counts: "workload", "leader", or a `Codec`'s kind of records ("family")."""


class Codec(Protocol[R]):
    """How a feature's records of one `kind` are kept in a store outside the process: as a short
    text (`encode`) of hashes and counts, read back by `decode`, checked with `sdk.memory.values`'
    checks (naming `kind`), since another process or kvwise may have written it. The kind names the
    records' keys (`sdk.memory.sqlite_link`, `sdk.memory.redis_store`): it is part of the stored layout."""

    @property
    def kind(self) -> str: ...

    def encode(self, record: R) -> str: ...

    def decode(self, stored: bytes) -> R: ...


class Store(Protocol):
    """The operations the memories need of the place they live (see the module)."""

    def update_record(self, codec: Codec[R], key: bytes, update: Callable[[R | None], R]) -> R:
        """Replace the record of `codec`'s kind under `key` (None: none yet) by `update(record)`,
        atomically; return the new one. `update` may be called more than once."""
        ...

    def update_value(self, kind: str, key: bytes, update: Callable[[str | None], str | None]) -> str | None:
        """Replace the text kept under `kind` and `key` (None: none) by `update(text)` (None: drop it),
        atomically; return it. For what a memory outside `sdk.memory.records` learns (a model's
        context limit, say): a short text of hashes and counts (at most `STATE_MAX_VALUE_BYTES`) that
        its reader checks, since another process or kvwise may have written it. `update` may be
        called more than once; what it returns unchanged is not written again."""
        ...

    def lengths(self, workload: WindowsKey) -> list[int]:
        """The output lengths of the workload's recent answers, at most `ADAPTIVE_CAP_WINDOW`."""
        ...

    def push_answer(self, workload: WindowsKey, length: int | None, cut: bool | None) -> int:
        """Add an answer to the workload's windows: its output `length` (None: not learnt) and whether
        it was `cut` at its adaptive cap (None: it had none); return how many of the window's adaptively
        capped answers were cut."""
        ...

    def forget(self, workload: WindowsKey) -> None:
        """Drop the workload's windows: it is learnt again."""
        ...

    def exchange_seen(self, api: str, seen: Seen) -> tuple[Seen | None, Seen | None]:
        """Remember `seen` as the last call of its API and model, and as its API's latest; return what
        was remembered before: `(last of this API and model, latest of this API)`. A shared store keeps
        hashes only, and may replace `seen`'s segments by the stored ones that did not change."""
        ...

    def join(self, key: bytes, span_id: str | None) -> tuple[Leader | None, Leader | None]:
        """`(leader to wait for, None)` when a call with this fan-out key is in flight, else `(None, the
        new leader)`, whose span is `span_id`."""
        ...

    def release(self, leader: Leader) -> None:
        """Let the leader's followers go (once: a second release does nothing)."""
        ...

    def wait(self, leader: Leader, timeout: float) -> None:
        """Block this thread until `leader` is released, at most `timeout` seconds."""
        ...

    async def await_release(self, leader: Leader, timeout: float) -> None:
        """Wait in this event loop until `leader` is released, at most `timeout` seconds."""
        ...

    def outage(self) -> str | None:
        """Why the store is failing now (None: it is not)."""
        ...

    def held(self, kind: Held) -> int:
        """How many records of `kind` this process holds (for tests and diagnostics)."""
        ...


@dataclass(slots=True)
class _Windows:
    lengths: deque[int] = field(default_factory=lambda: deque(maxlen=ADAPTIVE_CAP_WINDOW))
    cuts: deque[bool] = field(default_factory=lambda: deque(maxlen=ADAPTIVE_CAP_WINDOW))
    """For each adaptively capped answer of the window: whether it reached the cap."""


class LocalStore:
    """A `Store` in this process: at most `records` records (`update_record`, of every kind together)
    and `workloads` workloads, least recently used dropped first; every operation locked (concurrent
    calls of one client are safe)."""

    def __init__(self, records: int = VOLATILE_FAMILIES, workloads: int = ADAPTIVE_CAP_WORKLOADS) -> None:
        for name, size in (("records", records), ("workloads", workloads)):
            if size < 1:
                raise ValueError(f"LocalStore {name} size must be at least 1, got {size!r}")
        self._records_size, self._workloads_size = records, workloads
        self._records: OrderedDict[tuple[str, bytes], Any] = OrderedDict()  # by (kind, key)
        self._values: OrderedDict[tuple[str, bytes], str] = OrderedDict()
        self._workloads: OrderedDict[WindowsKey, _Windows] = OrderedDict()
        self._last: dict[tuple[str, str], Seen] = {}  # by (API, model)
        self._latest: dict[str, Seen] = {}
        self._leaders: dict[bytes, Leader] = {}
        self._lock = threading.Lock()

    def update_record(self, codec: Codec[R], key: bytes, update: Callable[[R | None], R]) -> R:
        with self._lock:
            record = update(self._records.pop((codec.kind, key), None))  # re-inserted: the most recently used
            self._records[(codec.kind, key)] = record
            if len(self._records) > self._records_size:
                self._records.popitem(last=False)
        return record

    def update_value(self, kind: str, key: bytes, update: Callable[[str | None], str | None]) -> str | None:
        with self._lock:
            value = update(self._values.pop((kind, key), None))  # re-inserted: the most recently used
            if value is not None:
                self._values[(kind, key)] = checked_value(value)
                if len(self._values) > STATE_LOCAL_VALUES:
                    self._values.popitem(last=False)
        return value

    def lengths(self, workload: WindowsKey) -> list[int]:
        with self._lock:
            found = self._workloads.get(workload)
            if found is None:
                return []
            self._workloads.move_to_end(workload)
            return list(found.lengths)

    def push_answer(self, workload: WindowsKey, length: int | None, cut: bool | None) -> int:
        with self._lock:
            found = self._workloads.pop(workload, None) or _Windows()
            self._workloads[workload] = found  # the most recently used
            if len(self._workloads) > self._workloads_size:
                self._workloads.popitem(last=False)
            if length is not None:
                found.lengths.append(length)
            if cut is not None:
                found.cuts.append(cut)
            return sum(found.cuts)

    def forget(self, workload: WindowsKey) -> None:
        with self._lock:
            self._workloads.pop(workload, None)

    def exchange_seen(self, api: str, seen: Seen) -> tuple[Seen | None, Seen | None]:
        with self._lock:
            previous = self._last.get((api, seen.model))
            latest = self._latest.get(api)
            self._last[(api, seen.model)] = self._latest[api] = seen
        return previous, latest

    def join(self, key: bytes, span_id: str | None) -> tuple[Leader | None, Leader | None]:
        with self._lock:
            found = self._leaders.get(key)
            if found is not None:
                return found, None
            mine = self._leaders[key] = Leader(key, span_id)
            return None, mine

    def release(self, leader: Leader) -> None:
        with self._lock:
            if leader.released.is_set():
                return
            leader.released.set()
            if self._leaders.get(leader.key) is leader:
                del self._leaders[leader.key]
            futures, leader.futures = leader.futures, []
        for loop, future in futures:
            try:
                loop.call_soon_threadsafe(_resolve, future)
            except RuntimeError:  # that loop is closed: nobody waits there any more
                pass

    def wait(self, leader: Leader, timeout: float) -> None:
        leader.released.wait(timeout)

    async def await_release(self, leader: Leader, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if leader.released.is_set():
                future.set_result(None)
            else:
                leader.futures.append((loop, future))
        try:
            await asyncio.wait_for(future, timeout)
        except TimeoutError:
            pass  # the leader is slow: go without the cache
        finally:
            with self._lock:
                if (loop, future) in leader.futures:
                    leader.futures.remove((loop, future))

    def outage(self) -> str | None:
        return None  # in this process, a store cannot fail

    def held(self, kind: Held) -> int:
        with self._lock:
            if kind == "workload":
                return len(self._workloads)
            if kind == "leader":
                return len(self._leaders)
            return sum(1 for stored, _ in self._records if stored == kind)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
