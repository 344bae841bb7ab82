"""The memories in Redis / Valkey, shared by every process that wraps a client with the same credentials.

    sdk.wrap(client, state="redis://host:6379/0")      # or KVWISE_STATE_URL; rediss:// for TLS, valkey:// too

A fleet of workers then learns once what each worker would learn alone: which volatile bytes really
change (`sdk.prompt.families`: every worker sends a family in the same shape from its first call on), each
workload's output lengths (`sdk.decode.adaptive_caps`: a cap appears once the fleet has enough answers),
who leads a fan-out (`sdk.cache.fanout`: one cache write for the whole fleet), and the last fingerprint
that cache breaks are explained against (`sdk.cache.fingerprint`: a break names its cause whichever worker
sent the call before). Under one namespace per tenant (a hash of the client's credentials and base
URL, so one key never reads another's memories), only hashes and counts:

    kvwise:{tenant}:family:{family}       the family's last call: candidate hashes, changed flags, turns
                                          (`{kind}:{key}` of a feature's `Codec`: `sdk.prompt.family_record`)
    kvwise:{tenant}:lengths:{workload}    the workload's recent output lengths, newest first
    kvwise:{tenant}:cuts:{workload}       per adaptively capped answer, 1 if it reached its cap
    kvwise:{tenant}:lease:{prefix}        the fan-out leader's span id, expiring after the wait limit;
                                          `...:released:{prefix}` is the channel its release is told on
    kvwise:{tenant}:seen:{api, model}     the last call's fingerprint (`sdk.cache.fingerprint`): per segment its
                                          key and hashes, the settings' hashes, when, its answer's id;
    kvwise:{tenant}:latest:{api}          the same for the API's latest call (break causes across processes)

Faults never reach the call. Every value read is checked (`sdk.memory.values`): a malformed one is
dropped (deleted, or overwritten by this call's), logged, and the call goes on as if it had not been
there, its span saying `kvwise.state.degraded` and which kind of key held it. A failed command
(`sdk.memory.redis_link`) answers from this process's own `LocalStore` instead. A leader that dies
releases by expiry.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from time import perf_counter
from typing import Any
from uuid import uuid4

from sdk._constants import ADAPTIVE_CAP_WINDOW, STATE_EXPIRY_SECONDS
from sdk.memory.records import Leader, Seen, WindowsKey, digest, hashed_segment
from sdk.memory.redis_link import RedisLink
from sdk.memory.store import Codec, Held, LocalStore, R
from sdk.memory.values import (
    _Malformed,
    checked_value,
    decode_cuts,
    decode_lengths,
    decode_seen,
    encode_seen,
)

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return redis.call('PUBLISH', KEYS[2], '1')
"""
"""End a lease only if it is still ours (it may have expired and been taken), and tell its waiters."""


class RedisStore:
    """A `Store` (`sdk.memory.store`) in Redis / Valkey at `url`, under `namespace` ("kvwise:{tenant}"):
    each family's record read and written in one transaction, each workload's windows two lists, a
    fan-out leader a lease (SET NX, expiring after `lease_seconds`, valued its span id) whose followers
    wait on its channel, the last calls hashes. A timestamp in a `Seen` is the wall clock's (the
    processes' monotonic clocks differ)."""

    def __init__(self, url: str, namespace: str, lease_seconds: float) -> None:
        self.link = RedisLink(url)
        self._namespace = namespace
        self._local = LocalStore()  # where the memories live during an outage
        self._lease_ms = max(int(lease_seconds * 1000), 1)
        self._release = self.link.redis.register_script(_RELEASE)
        self._lock = threading.Lock()

    def update_record(self, codec: Codec[R], key: bytes, update: Callable[[R | None], R]) -> R:
        stored_key = f"{self._namespace}:{codec.kind}:{key.hex()}"
        found: list[R] = []
        malformed: list[_Malformed] = []

        def transact(pipe: Any) -> None:
            stored = pipe.get(stored_key)
            malformed.clear()
            try:
                last = codec.decode(stored) if stored is not None else None
            except _Malformed as error:  # dropped: this call's record overwrites it
                malformed.append(error)
                last = None
            record = update(last)
            pipe.multi()
            pipe.set(stored_key, codec.encode(record), ex=STATE_EXPIRY_SECONDS)
            found[:] = [record]

        done, _ = self.link.run(lambda redis: redis.transaction(transact, stored_key))
        if not done:
            return self._local.update_record(codec, key, update)
        if malformed:
            self.link.outages.malformed(malformed[0])
        return found[0]

    def update_value(self, kind: str, key: bytes, update: Callable[[str | None], str | None]) -> str | None:
        stored_key = f"{self._namespace}:value:{kind}:{key.hex()}"
        found: list[str | None] = []

        def transact(pipe: Any) -> None:
            stored = pipe.get(stored_key)
            try:
                last = stored.decode() if stored is not None else None
            except UnicodeDecodeError:  # dropped: this call's value overwrites it
                last = None
            value = update(last)
            pipe.multi()
            if value is None:
                pipe.delete(stored_key)
            else:
                pipe.set(stored_key, checked_value(value), ex=STATE_EXPIRY_SECONDS)
            found[:] = [value]

        done, _ = self.link.run(lambda redis: redis.transaction(transact, stored_key))
        return found[0] if done else self._local.update_value(kind, key, update)

    def _windows(self, workload: WindowsKey) -> tuple[str, str]:
        name = digest(*workload)
        return f"{self._namespace}:lengths:{name}", f"{self._namespace}:cuts:{name}"

    def lengths(self, workload: WindowsKey) -> list[int]:
        lengths_key, _ = self._windows(workload)
        done, stored = self.link.run(lambda redis: redis.lrange(lengths_key, 0, -1))
        if not done:
            return self._local.lengths(workload)
        try:
            return decode_lengths(stored or ())
        except _Malformed as error:
            self.link.outages.malformed(error)
            self.link.run(lambda redis: redis.delete(lengths_key))
            return self._local.lengths(workload)

    def push_answer(self, workload: WindowsKey, length: int | None, cut: bool | None) -> int:
        lengths_key, cuts_key = self._windows(workload)

        def push(redis: Any) -> int:
            pipe = redis.pipeline()
            if cut is not None:
                pipe.lpush(cuts_key, int(cut)).ltrim(cuts_key, 0, ADAPTIVE_CAP_WINDOW - 1).expire(
                    cuts_key, STATE_EXPIRY_SECONDS
                )
                pipe.lrange(cuts_key, 0, -1)
            if length is not None:
                pipe.lpush(lengths_key, length).ltrim(lengths_key, 0, ADAPTIVE_CAP_WINDOW - 1)
                pipe.expire(lengths_key, STATE_EXPIRY_SECONDS)
            results = pipe.execute()
            if cut is None:
                return 0
            try:
                return sum(decode_cuts(results[3]))
            except _Malformed as error:  # read at the call's end: nothing to degrade
                self.link.outages.malformed(error, during_call=False)
                redis.delete(cuts_key)
                return 0

        done, cuts = self.link.run(push)
        if not done or cuts is None:
            return self._local.push_answer(workload, length, cut)
        return cuts

    def forget(self, workload: WindowsKey) -> None:
        done, _ = self.link.run(lambda redis: redis.delete(*self._windows(workload)))
        if not done:
            self._local.forget(workload)

    def exchange_seen(self, api: str, seen: Seen) -> tuple[Seen | None, Seen | None]:
        last_key, latest_key = (
            f"{self._namespace}:seen:{digest(api, seen.model)}",
            f"{self._namespace}:latest:{digest(api)}",
        )
        done, stored = self.link.run(
            lambda redis: redis.pipeline(transaction=False).hgetall(last_key).hgetall(latest_key).execute()
        )
        if not done:
            return self._local.exchange_seen(api, seen)
        last_fields, latest_fields = stored or ({}, {})
        previous, latest = self._decoded("seen", last_fields), self._decoded("latest", latest_fields)
        kept = previous or latest
        stored_chain = kept.chain if kept is not None else []
        seen.chain = [
            hashed_segment(segment, stored_chain[index] if index < len(stored_chain) else None)
            for index, segment in enumerate(seen.chain)
        ]
        seen.hash_settings()
        value = encode_seen(seen)

        def remember(redis: Any) -> None:
            pipe = redis.pipeline(transaction=False)
            for key in (last_key, latest_key):
                pipe.hset(key, "seen", value).hdel(key, "id").expire(key, STATE_EXPIRY_SECONDS)
            pipe.execute()

        self.link.run(remember)
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
            self.link.outages.malformed(error)
            return None

    def _learn(self, keys: tuple[str, str], value: str, message_id: str) -> None:
        """The answer's id, beside its call's record (unless a later call replaced that record)."""

        def keep(redis: Any) -> None:
            for key in keys:
                if redis.hget(key, "seen") == value.encode():
                    redis.hset(key, "id", message_id)

        self.link.run(keep)

    def _lease(self, key: bytes) -> tuple[str, str]:
        return f"{self._namespace}:lease:{key.hex()}", f"{self._namespace}:released:{key.hex()}"

    def join(self, key: bytes, span_id: str | None) -> tuple[Leader | None, Leader | None]:
        lease_key, _ = self._lease(key)
        token = span_id or uuid4().hex
        done, holder = self.link.run(lambda redis: redis.set(lease_key, token, nx=True, px=self._lease_ms, get=True))
        if not done:
            return self._local.join(key, span_id)
        if holder is None:
            return None, Leader(key, span_id, lease=token)
        leader_span = holder.decode() if isinstance(holder, bytes) else str(holder)
        return Leader(key, leader_span if len(leader_span) == 16 else None, lease=leader_span), None

    def release(self, leader: Leader) -> None:
        token = leader.lease
        if token is None:
            self._local.release(leader)
            return
        with self._lock:
            if leader.released.is_set():
                return
            leader.released.set()
        lease_key, channel = self._lease(leader.key)
        self.link.run(lambda redis: self._release(keys=[lease_key, channel], args=[token], client=redis))

    def wait(self, leader: Leader, timeout: float) -> None:
        if leader.lease is None:
            self._local.wait(leader, timeout)
            return
        deadline = perf_counter() + timeout
        self.link.run(lambda redis: _wait_for_release(redis, *self._lease(leader.key), deadline))

    async def await_release(self, leader: Leader, timeout: float) -> None:
        if leader.lease is None:
            await self._local.await_release(leader, timeout)
            return
        await asyncio.to_thread(self.wait, leader, timeout)

    def outage(self) -> str | None:
        return self.link.outages.reason()

    def held(self, kind: Held) -> int:
        return self._local.held(kind)


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
