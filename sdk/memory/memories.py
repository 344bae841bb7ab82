"""A wrapped client's four memories, on the store they live in: this process's (the default), or
Redis / Valkey's, shared by every process that wraps a client with the same credentials
(`sdk.memory.redis_store`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from time import time
from typing import Any

from sdk._constants import STATE_URL_ENV
from sdk.cache.fanout import FanOut, credentials_hash
from sdk.cache.fingerprint import PrefixTracker
from sdk.decode.adaptive_caps import AdaptiveCaps
from sdk.memory.redis_store import RedisStore
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


def memories_for(client: Any, policy: Policy, state: str | None) -> Memories:
    """The memories of a client wrapped under `policy`: in the store at `state` (else $KVWISE_STATE_URL), or here."""
    url = state if state is not None else os.environ.get(STATE_URL_ENV) or None
    if url is None:
        return local_memories(policy)
    store = RedisStore(url, f"kvwise:{credentials_hash(client)}", policy.fanout_wait_seconds)
    tracker = PrefixTracker(store, clock=time)  # the wall clock: the processes' monotonic clocks differ
    return _on(store, policy, tracker, store.link.degraded)


def local_memories(policy: Policy) -> Memories:
    """The memories of a client wrapped under `policy`, in this process (the default)."""
    store = LocalStore()
    return _on(store, policy, PrefixTracker(store), None)


def _on(store: Store, policy: Policy, tracker: PrefixTracker, outage: Callable[[], str | None] | None) -> Memories:
    """The memories `policy` asks for, on `store`."""
    caps = AdaptiveCaps(store) if policy.adaptive_caps else None
    return Memories(tracker, FamilyMemory(store), caps, FanOut(store) if policy.fanout == "warm" else None, outage)
