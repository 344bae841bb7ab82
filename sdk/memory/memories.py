"""A wrapped client's four memories, on the store they live in: a SQLite file on this machine (the
default, `sdk.memory.sqlite_store`), this process's (`state="memory"`), or Redis / Valkey's (`sdk.memory.redis_store`);
the two outside the process are shared by every process that wraps a client with the same credentials.

    state / $KVWISE_STATE_URL     where
    (neither)                     $XDG_CACHE_HOME/kvwise/state.sqlite3, else ~/.cache/kvwise/state.sqlite3
    "memory"                      this process
    "sqlite:///path/to/file"      that file ("sqlite://": the default one)
    "redis://host:6379/0"         Redis or Valkey (rediss://, valkey://, valkeys://, unix:// too)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from time import time
from typing import Any
from urllib.parse import unquote, urlsplit

from sdk._constants import STATE_CACHE_ENV, STATE_MEMORY, STATE_SQLITE_FILE, STATE_URL_ENV
from sdk.cache.fanout import FanOut, credentials_hash
from sdk.cache.fingerprint import PrefixTracker
from sdk.decode.adaptive_caps import AdaptiveCaps
from sdk.memory.redis_store import RedisStore
from sdk.memory.sqlite_store import SqliteStore
from sdk.memory.store import LocalStore, Store
from sdk.policy import Policy
from sdk.prompt.families import FamilyMemory


@dataclass(frozen=True, slots=True)
class Memories:
    """A wrapped client's memories, wherever they live; `outage()` says why their store failed this
    thread's call (None: it did not), and is None itself for memories in this process, which cannot fail."""

    tracker: PrefixTracker
    families: FamilyMemory
    caps: AdaptiveCaps | None
    fanout: FanOut | None
    outage: Callable[[], str | None] | None
    store: Store  # where they live, for what a memory outside them learns (`Store.update_value`)


def memories_for(client: Any, policy: Policy, state: str | None) -> Memories:
    """The memories of a client wrapped under `policy`, in the store `state` names (else
    $KVWISE_STATE_URL, else the default SQLite file): see the module."""
    url = state if state is not None else os.environ.get(STATE_URL_ENV) or "sqlite://"
    if url == STATE_MEMORY:
        return local_memories(policy)
    tenant = credentials_hash(client)
    if url.startswith("sqlite:"):
        sqlite = SqliteStore(sqlite_path(url), tenant)
        tracker = PrefixTracker(sqlite, clock=time)  # the wall clock: the processes' monotonic clocks differ
        return _on(sqlite, policy, tracker, sqlite.link.outages.degraded)
    store = RedisStore(url, f"kvwise:{tenant}", policy.fanout_wait_seconds)
    tracker = PrefixTracker(store, clock=time)
    return _on(store, policy, tracker, store.link.outages.degraded)


def sqlite_path(url: str) -> Path:
    """The file a "sqlite://" URL names: its path ("sqlite:///tmp/kvwise.sqlite3"), else the default one
    under the user's cache directory ($XDG_CACHE_HOME where it is an absolute path, else ~/.cache)."""
    parts = urlsplit(url)
    if parts.netloc or parts.query or parts.fragment:
        raise ValueError(f"state must be sqlite:///path/to/file (an absolute path) or sqlite://, got {url!r}")
    if parts.path:
        return Path(unquote(parts.path))
    cache = os.environ.get(STATE_CACHE_ENV, "")
    return (Path(cache) if os.path.isabs(cache) else Path.home() / ".cache") / STATE_SQLITE_FILE


def local_memories(policy: Policy) -> Memories:
    """The memories of a client wrapped under `policy`, in this process (the default)."""
    store = LocalStore()
    return _on(store, policy, PrefixTracker(store), None)


def _on(store: Store, policy: Policy, tracker: PrefixTracker, outage: Callable[[], str | None] | None) -> Memories:
    """The memories `policy` asks for, on `store`."""
    caps = AdaptiveCaps(store) if policy.adaptive_caps else None
    fanout = FanOut(store) if policy.fanout == "warm" else None
    return Memories(tracker, FamilyMemory(store), caps, fanout, outage, store)
