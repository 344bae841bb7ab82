"""A wrapped client's four memories, each a feature's own, on the one store they live in (`sdk.memory.place`).

The store knows no feature; this module, above the steps, is where they are put together.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from time import time
from typing import Any

from sdk.cache.fanout import FanOut
from sdk.cache.fingerprint import PrefixTracker
from sdk.decode.adaptive_caps import AdaptiveCaps
from sdk.memory.place import Place, place_for
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
    $KVWISE_STATE_URL, else the default SQLite file: `sdk.memory.place`)."""
    place = place_for(client, state, policy.fanout_wait_seconds)
    shared = place.outage is not None  # timed by the wall clock: the processes' monotonic clocks differ
    return _on(place, policy, PrefixTracker(place.store, clock=time if shared else None))


def local_memories(policy: Policy) -> Memories:
    """The memories of a client wrapped under `policy`, in this process (the default)."""
    store = LocalStore()
    return _on(Place(store, None), policy, PrefixTracker(store))


def _on(place: Place, policy: Policy, tracker: PrefixTracker) -> Memories:
    """The memories `policy` asks for, on `place`'s store."""
    store = place.store
    caps = AdaptiveCaps(store) if policy.adaptive_caps else None
    fanout = FanOut(store) if policy.fanout == "warm" else None
    return Memories(tracker, FamilyMemory(store), caps, fanout, place.outage, store)
