"""Where a wrapped client's memories live: in this process (the default), or in Redis / Valkey,
shared by every process that wraps a client with the same credentials.

    sdk.wrap(client, state="redis://host:6379/0")      # or KVWISE_STATE_URL; rediss:// for TLS, valkey:// too

A fleet of workers then learns once what each worker would learn alone: which volatile bytes really
change (`sdk.families`: every worker sends a family in the same shape from its first call on), each
workload's output lengths (`sdk.adaptive_caps`: a cap appears once the fleet has enough answers),
who leads a fan-out (`sdk.fanout`: one cache write for the whole fleet), and the last fingerprint
that cache breaks are explained against (`sdk.fingerprint`: a break names its cause whichever worker
sent the call before). The memories' interface is
their in-process classes' methods; each shared class here is its in-process twin and keeps that twin
as its fallback. In the store, under one namespace per tenant (a hash of the client's credentials and
base URL, so one key never reads another's memories), only hashes and counts:

    kvwise:{tenant}:family:{family}       the family's last call: candidate hashes, changed flags, turns
    kvwise:{tenant}:lengths:{workload}    the workload's recent output lengths, newest first
    kvwise:{tenant}:cuts:{workload}       per adaptively capped answer, 1 if it reached its cap
    kvwise:{tenant}:lease:{prefix}        the fan-out leader's span id, expiring after the wait limit;
                                          `...:released:{prefix}` is the channel its release is told on
    kvwise:{tenant}:seen:{api, model}     the last call's fingerprint (`sdk.fingerprint`): per segment its
                                          key and hashes, the settings' hashes, when, its answer's id;
    kvwise:{tenant}:latest:{api}          the same for the API's latest call (break causes across processes)

Faults never reach the call. Every value read is checked (`sdk.state_values`): a malformed one is
dropped (deleted, or overwritten by this call's), logged, and the call goes on as if it had not been
there, its span saying `kvwise.state.degraded` and which kind of key held it. Each command is bounded (`STATE_TIMEOUT_SECONDS`, or the URL's
`?socket_timeout=`, which the `redis` client reads); a failure starts an
outage (logged once): calls go on with in-process state, their spans say `kvwise.state.degraded` and
why, and the store is tried again `STATE_RETRY_SECONDS` later. A leader that dies releases by expiry.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from time import monotonic, perf_counter, time
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit
from uuid import uuid4

from sdk._constants import ADAPTIVE_CAP_WINDOW, STATE_EXPIRY_SECONDS, STATE_RETRY_SECONDS, STATE_TIMEOUT_SECONDS, STATE_URL_ENV
from sdk.adaptive_caps import AdaptiveCaps, WorkloadKey, cut_too_often, quantile_of, reached_cap
from sdk.call import Usage
from sdk.families import Changes, FamilyMemory, FamilyRecord, next_record
from sdk.fanout import FanOut, Leader, Waited, credentials_hash
from sdk.fingerprint import PrefixTracker, Seen, Segment
from sdk.policy import Policy
from sdk.state_values import _Malformed, decode_cuts, decode_family, decode_lengths, decode_seen, encode_family, encode_seen

logger = logging.getLogger(__name__)

T = TypeVar("T")
_SCHEMES = {"valkey": "redis", "valkeys": "rediss"}
"""Valkey's URL schemes, which the `redis` client reads as its own."""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return redis.call('PUBLISH', KEYS[2], '1')
"""
"""End a lease only if it is still ours (it may have expired and been taken), and tell its waiters."""


@dataclass(frozen=True, slots=True)
class Memories:
    """A wrapped client's memories, wherever they live; `outage()` says why their store failed (None: it
    did not), and is None itself for memories in this process, which cannot fail."""

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
    store = Store(url)
    namespace = f"kvwise:{credentials_hash(client)}"
    return Memories(
        SharedTracker(store, namespace),
        SharedFamilies(store, namespace),
        SharedCaps(store, namespace) if policy.adaptive_caps else None,
        SharedFanOut(store, namespace, policy.fanout_wait_seconds) if policy.fanout == "warm" else None,
        store.degraded,
    )


def local_memories(policy: Policy) -> Memories:
    """The memories of a client wrapped under `policy`, in this process (the default)."""
    return Memories(PrefixTracker(), FamilyMemory(), AdaptiveCaps() if policy.adaptive_caps else None,
                    FanOut() if policy.fanout == "warm" else None, None)  # fmt: skip


class Store:
    """One Redis / Valkey client: every command bounded, a failure an outage (logged once) that
    keeps commands away for `STATE_RETRY_SECONDS`; the client reconnects by itself after it."""

    def __init__(self, url: str) -> None:
        try:  # only where a store is asked for: `sdk` imports without it
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError as missing:
            raise ImportError("sdk.wrap(state=...) needs the redis client: pip install 'kvwise[state]'") from missing

        parts = urlsplit(url)
        scheme = _SCHEMES.get(parts.scheme, parts.scheme)
        if scheme not in ("redis", "rediss", "unix"):
            raise ValueError(f"state must be a redis://, rediss://, valkey:// or unix:// URL, got scheme {parts.scheme!r}")
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        self.redis = redis.Redis.from_url(
            urlunsplit(parts._replace(scheme=scheme)),
            socket_timeout=STATE_TIMEOUT_SECONDS,
            socket_connect_timeout=STATE_TIMEOUT_SECONDS,
            retry=Retry(NoBackoff(), 0),  # a retry would wait past the bound: the call goes on without the store
        )
        self.where = f"{parts.hostname or parts.path}:{parts.port or ''}".rstrip(":")  # no credentials in logs
        self._outage: str | None = None
        self._retry_at = 0.0
        self._lock = threading.Lock()
        self._found = threading.local()  # `reason`: a malformed value this thread's call read (`degraded`)

    def run(self, command: Callable[[Any], T]) -> tuple[bool, T | None]:
        """`(True, command(redis))`, or `(False, None)` when the store failed or is in an outage."""
        if self._outage is not None and monotonic() < self._retry_at:
            return False, None
        try:
            result = command(self.redis)
        except self._errors as error:
            self._failed(error)
            return False, None
        if self._outage is not None:
            with self._lock:
                if self._outage is not None:
                    logger.warning("kvwise state: %s answers again; memories are shared again", self.where)
                    self._outage = None
        return True, result

    def _failed(self, error: BaseException) -> None:
        reason = f"{type(error).__name__}: {error}"[:200]
        with self._lock:
            if self._outage is None:
                logger.warning("kvwise state: %s failed (%s); calls go on with in-process state", self.where, reason)
            self._outage = reason
            self._retry_at = monotonic() + STATE_RETRY_SECONDS

    def outage(self) -> str | None:
        """Why the store is failing now (None: it is not)."""
        return self._outage

    def malformed(self, error: _Malformed, *, during_call: bool = True) -> None:
        """A value read was malformed (the caller drops it): logged, and told to this thread's call
        by `degraded` where it was read `during_call` (not at a call's end)."""
        logger.warning("kvwise state: %s held a %s; it is dropped", self.where, error)
        if during_call:
            self._found.reason = error.reason

    def degraded(self) -> str | None:
        """Why this thread's call could not use the store: an outage, or a malformed value it read."""
        found, self._found.reason = getattr(self._found, "reason", None), None
        return self._outage or found


def _digest(*parts: object) -> str:
    digest = hashlib.blake2b(digest_size=16)
    for part in parts:
        digest.update(str(part).encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return digest.hexdigest()


class SharedFamilies(FamilyMemory):
    """`FamilyMemory` in the store: each family's record read and written in one transaction."""

    def __init__(self, store: Store, namespace: str) -> None:
        super().__init__()
        self._store, self._namespace = store, namespace

    def observe(self, family: bytes, values: tuple[int, ...], conversation: bytes, turns: int = 1) -> Changes:
        key = f"{self._namespace}:family:{family.hex()}"
        found: list[FamilyRecord] = []
        malformed: list[_Malformed] = []

        def update(pipe: Any) -> None:
            stored = pipe.get(key)
            malformed.clear()
            try:
                last = decode_family(stored) if stored is not None else None
            except _Malformed as error:  # dropped: this call's record overwrites it
                malformed.append(error)
                last = None
            record = next_record(last, values, conversation, turns)
            pipe.multi()
            pipe.set(key, encode_family(record), ex=STATE_EXPIRY_SECONDS)
            found[:] = [record]

        done, _ = self._store.run(lambda redis: redis.transaction(update, key))
        if not done:
            return super().observe(family, values, conversation, turns)
        if malformed:
            self._store.malformed(malformed[0])
        return Changes(found[0].changed, found[0].within)


class SharedCaps(AdaptiveCaps):
    """`AdaptiveCaps` in the store: each workload's window a list of lengths, its cuts another."""

    def __init__(self, store: Store, namespace: str) -> None:
        super().__init__()
        self._store, self._namespace = store, namespace

    def _keys(self, workload: WorkloadKey) -> tuple[str, str]:
        name = _digest(*workload)
        return f"{self._namespace}:lengths:{name}", f"{self._namespace}:cuts:{name}"

    def quantile(self, workload: WorkloadKey) -> int | None:
        lengths_key, _ = self._keys(workload)
        done, stored = self._store.run(lambda redis: redis.lrange(lengths_key, 0, -1))
        if not done:
            return super().quantile(workload)
        try:
            return quantile_of(decode_lengths(stored or ()))
        except _Malformed as error:
            self._store.malformed(error)
            self._store.run(lambda redis: redis.delete(lengths_key))
            return super().quantile(workload)

    def learn(self, workload: WorkloadKey, usage: Usage, cap: int | None, adaptive: bool) -> None:
        lengths_key, cuts_key = self._keys(workload)
        reached = reached_cap(usage, cap)

        def record(redis: Any) -> None:
            pipe = redis.pipeline()
            if adaptive:
                pipe.lpush(cuts_key, int(reached)).ltrim(cuts_key, 0, ADAPTIVE_CAP_WINDOW - 1).expire(cuts_key, STATE_EXPIRY_SECONDS)
                pipe.lrange(cuts_key, 0, -1)
            if not reached:
                pipe.lpush(lengths_key, usage.output_tokens).ltrim(lengths_key, 0, ADAPTIVE_CAP_WINDOW - 1)
                pipe.expire(lengths_key, STATE_EXPIRY_SECONDS)
            results = pipe.execute()
            if not adaptive:
                return
            try:
                cuts = decode_cuts(results[3])
            except _Malformed as error:
                self._store.malformed(error, during_call=False)
                redis.delete(cuts_key)
                return
            if cut_too_often(sum(cuts)):
                redis.delete(lengths_key, cuts_key)  # the workload changed: the fleet learns it again

        done, _ = self._store.run(record)
        if not done:
            super().learn(workload, usage, cap, adaptive)


class SharedFanOut(FanOut):
    """`FanOut` across processes: the first caller of a prefix holds a lease (SET NX, expiring after
    the wait limit) whose value is its span id; the others wait on the lease's channel for its release."""

    def __init__(self, store: Store, namespace: str, wait_seconds: float) -> None:
        super().__init__()
        self._store, self._namespace = store, namespace
        self._lease_ms = max(int(wait_seconds * 1000), 1)
        self._release = store.redis.register_script(_RELEASE)

    def _keys(self, key: bytes) -> tuple[str, str]:
        return f"{self._namespace}:lease:{key.hex()}", f"{self._namespace}:released:{key.hex()}"

    def join(self, key: bytes, span_id: str | None = None) -> tuple[Leader | None, Leader | None]:
        lease_key, _ = self._keys(key)
        token = span_id or uuid4().hex
        done, holder = self._store.run(lambda redis: redis.set(lease_key, token, nx=True, px=self._lease_ms, get=True))
        if not done:
            return super().join(key, span_id)
        if holder is None:
            return None, Leader(key, span_id, lease=token)
        leader_span = holder.decode() if isinstance(holder, bytes) else str(holder)
        return Leader(key, leader_span if len(leader_span) == 16 else None, lease=leader_span), None

    def release(self, leader: Leader) -> None:
        token = leader.lease
        if token is None:
            super().release(leader)
            return
        with self._lock:
            if leader.released.is_set():
                return
            leader.released.set()
        lease_key, channel = self._keys(leader.key)
        self._store.run(lambda redis: self._release(keys=[lease_key, channel], args=[token], client=redis))

    def wait(self, leader: Leader, timeout: float) -> Waited:
        if leader.lease is None:
            return super().wait(leader, timeout)
        start = perf_counter()
        with self._lock:
            self._waiting += 1
        try:
            self._store.run(lambda redis: _wait_for_release(redis, *self._keys(leader.key), start + timeout))
        finally:
            with self._lock:
                self._waiting -= 1
        return Waited(leader.span_id, (perf_counter() - start) * 1000.0)

    async def await_release(self, leader: Leader, timeout: float) -> Waited:
        if leader.lease is None:
            return await super().await_release(leader, timeout)
        return await asyncio.to_thread(self.wait, leader, timeout)

    def outage(self) -> str | None:
        return self._store.outage()


def _wait_for_release(redis: Any, lease_key: str, channel: str, deadline: float) -> None:
    """Block until the lease at `lease_key` is released (told on `channel`) or gone, or `deadline` passes."""
    pubsub = redis.pubsub(ignore_subscribe_messages=True)
    try:
        pubsub.subscribe(channel)
        if not redis.exists(lease_key):  # released before we listened
            return
        while (left := deadline - perf_counter()) > 0:
            if pubsub.get_message(timeout=left) is not None:
                return
    finally:
        pubsub.close()


class SharedTracker(PrefixTracker):
    """`PrefixTracker` in the store: the last call per API and model, and per API, as hashes only
    (segments lose their bytes; a tool's name and the settings are hashed), timed by the wall clock
    (the processes' monotonic clocks differ). A segment unchanged since the stored call keeps its
    stored hashes, so a growing conversation hashes only its new turns."""

    def __init__(self, store: Store, namespace: str) -> None:
        super().__init__(clock=time)
        self._store, self._namespace = store, namespace

    def _exchange(self, api: str, seen: Seen) -> tuple[Seen | None, Seen | None]:
        last_key, latest_key = f"{self._namespace}:seen:{_digest(api, seen.model)}", f"{self._namespace}:latest:{_digest(api)}"
        done, stored = self._store.run(lambda redis: redis.pipeline(transaction=False).hgetall(last_key).hgetall(latest_key).execute())
        if not done:
            return super()._exchange(api, seen)
        last_fields, latest_fields = stored or ({}, {})
        previous, latest = self._decoded("seen", last_fields), self._decoded("latest", latest_fields)
        kept = previous or latest
        seen.chain = [_kept(segment, kept.chain[index] if kept is not None and index < len(kept.chain) else None)
                      for index, segment in enumerate(seen.chain)]  # fmt: skip
        seen.settings = tuple(_digest(setting) if setting else "" for setting in seen.settings)
        value = encode_seen(seen)

        def remember(redis: Any) -> None:
            pipe = redis.pipeline(transaction=False)
            for key in (last_key, latest_key):
                pipe.hset(key, "seen", value).hdel(key, "id").expire(key, STATE_EXPIRY_SECONDS)
            pipe.execute()

        self._store.run(remember)
        seen.on_learn = lambda message_id: self._learn((last_key, latest_key), value, message_id)
        return previous, latest

    def _decoded(self, kind: str, fields: dict[bytes, bytes]) -> Seen | None:
        """The call record under a `kind` key; None where there is none or it is malformed (this
        call's record then overwrites it)."""
        if not fields:
            return None
        try:
            return decode_seen(kind, fields)
        except _Malformed as error:
            self._store.malformed(error)
            return None

    def _learn(self, keys: tuple[str, str], value: str, message_id: str) -> None:
        """The answer's id, beside its call's record (unless a later call replaced that record)."""

        def keep(redis: Any) -> None:
            for key in keys:
                if redis.hget(key, "seen") == value.encode():
                    redis.hset(key, "id", message_id)

        self._store.run(keep)


def _kept(segment: Segment, stored: Segment | None) -> Segment:
    """`segment` as the store keeps it: its hashes, the stored ones where it has not changed."""
    if stored is not None and stored.chain == segment.chain and stored.key == segment.key:
        return stored
    tool = _digest(segment.tool) if segment.tool is not None else None
    return Segment(segment.key, segment.chain, None, tool, segment.sorted_form(), segment.masked_form())
