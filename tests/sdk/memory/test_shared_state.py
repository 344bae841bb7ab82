"""Memories shared by a fleet (`sdk.wrap(client, state="redis://...")`, `sdk.memory.redis_store`), against a
real Redis and worker processes of their own (`tests.sdk.fleet`), each wrapping its own client, over
loopback to the simulator."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import sdk
from sdk import semconv as sc
from sdk._constants import ADAPTIVE_CAP_MIN_CALLS, ADAPTIVE_CAP_WINDOW, STATE_MAX_VALUE_BYTES, STATE_RETRY_SECONDS
from tests.redis_server import RedisServer
from tests.sdk import fleet
from tests.sdk.fleet import PATIENT_SECONDS, PER_WORKER, PREFIX_TOKENS, WORKERS
from tests.sdk.helpers import until
from tests.sdk.savings_workloads import fan_out, shared_prefix

POLICY_CAP = 1000
STALL_SECONDS = (
    0.5  # each store command's bound where a test stalls the store: long for a loaded machine, short for a stalled call
)
FAMILY = "Request ID: {}\nYou are the support bot of Example Corp. Answer in one short paragraph."
LEARNT_FAMILY = "Build: {}\nYou are the support bot of Example Corp. Answer in one short paragraph."
"""A family whose volatile value (a hex run, as a build hash is written) waits for the memory to move:
FAMILY's request id moves on first sight (`sdk.prompt.first_sight`), so it teaches the memory nothing."""


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
def store(redis_server: RedisServer) -> Iterator[RedisServer]:
    redis_server.client().flushall()
    yield redis_server


def test_a_fleet_of_four_workers_writes_a_shared_prefix_once_and_reads_it_31_times(
    simulator: Any, store: RedisServer
) -> None:
    alone = fleet.fan_out(simulator, None)
    simulator.reset()
    shared = fleet.fan_out(simulator, store)
    per_follower = max(answer["read"] for answer in shared)
    ideal = (WORKERS * PER_WORKER - 1) * per_follower
    assert per_follower > 0.9 * PREFIX_TOKENS
    assert sum(1 for answer in alone if answer["write"]) == WORKERS  # each worker's leader wrote it again
    assert sum(1 for answer in shared if answer["write"]) == 1
    assert sum(answer["read"] for answer in shared) >= 0.9 * ideal
    print(
        f"\nfleet fan-out: {sum(1 for a in shared if a['write'])} write(s),"
        f" {sum(1 for a in shared if a['read'])} reads "
        f"shared; {sum(1 for a in alone if a['write'])} writes with in-process state"
    )


def _family_calls(simulator: Any, worker: int, state: str | None, systems: list[str]) -> dict[str, Any]:
    [result] = fleet.results(
        [fleet.start_worker(simulator, worker, task="calls", system=systems, n=len(systems), state=state)]
    )
    return result


def _state(store: RedisServer, where: str) -> tuple[str | None, bool]:
    """The workers' `state` for memories in Redis, in the default file the workers of one machine
    share (`sdk.memory.sqlite_store`), or in each worker's process; and whether they are shared."""
    return {"redis": store.url_bounded(PATIENT_SECONDS), "file": None, "memory": "memory"}[where], where != "memory"


def _sent_systems(simulator: Any) -> list[str]:
    return [
        request.body["messages"][0]["content"]
        for request in simulator.requests
        if request.path.endswith("/chat/completions")
    ]


@pytest.mark.parametrize("where", ["redis", "file", "memory"])
def test_a_second_worker_sends_a_family_in_the_shape_the_first_learnt_from_its_first_call_on(
    simulator: Any, store: RedisServer, where: str
) -> None:
    ids = [hashlib.sha1(bytes([i])).hexdigest() for i in range(3)]
    state, shared = _state(store, where)
    _family_calls(simulator, 0, state, [LEARNT_FAMILY.format(ids[0]), LEARNT_FAMILY.format(ids[1])])
    _family_calls(simulator, 1, state, [LEARNT_FAMILY.format(ids[2])])
    first, second, other = _sent_systems(simulator)
    assert ids[0] in first  # the family's first call: nothing is known, nothing moves
    assert ids[1] not in second  # it changed: it moved
    if shared:
        assert other == second  # the other worker knows it changes: the same shape, the same cache
    else:
        assert ids[2] in other  # alone, the other worker starts over and sends another shape


@pytest.mark.parametrize("where", ["redis", "file", "memory"])
def test_a_cache_break_is_explained_against_the_call_another_worker_sent_before(
    simulator: Any, store: RedisServer, where: str
) -> None:
    state, shared = _state(store, where)
    tools = "You are the support bot of Example Corp. " * 60
    _family_calls(simulator, 0, state, [tools + "Answer in one short paragraph."])
    [span] = _family_calls(simulator, 1, state, [tools + "Answer in three bullet points."])["spans"]
    if shared:
        assert span[sc.KVWISE_PREFIX_BREAK_CAUSE] == "system_changed"
        assert span[sc.KVWISE_PREFIX_BREAK_AT] == "system[0]"
    else:
        assert sc.KVWISE_PREFIX_BREAK_CAUSE not in span  # alone, the worker has seen no call before
    [again] = _family_calls(simulator, 2, state, [tools + "Answer in three bullet points."])["spans"]
    assert sc.KVWISE_PREFIX_BREAK_CAUSE not in again  # the same prefix as the fleet's last call: no break


@pytest.mark.parametrize("where", ["redis", "file", "memory"])
def test_an_adaptive_cap_appears_once_the_fleet_has_enough_answers(
    simulator: Any, store: RedisServer, where: str
) -> None:
    simulator.reply = " word" * 20
    system = "You label support tickets with one word. " * 40
    state, shared = _state(store, where)
    arguments = {
        "task": "calls",
        "system": system,
        "policy": {"adaptive_caps": True, "max_output_tokens": POLICY_CAP},
        "state": state,
    }
    per_worker = -(-ADAPTIVE_CAP_MIN_CALLS // WORKERS)  # no worker alone has enough
    fleet.results([fleet.start_worker(simulator, worker, n=per_worker, **arguments) for worker in range(WORKERS)])
    [late] = fleet.results([fleet.start_worker(simulator, WORKERS, n=1, **arguments)])
    [span] = late["spans"]
    if shared:
        assert span[sc.KVWISE_OUTPUT_CAP_SOURCE] == "adaptive"
        assert span[sc.KVWISE_OUTPUT_CAP_TOKENS] < POLICY_CAP
    else:
        assert span[sc.KVWISE_OUTPUT_CAP_SOURCE] == "policy"
        assert span[sc.KVWISE_OUTPUT_CAP_TOKENS] == POLICY_CAP


def test_no_prompt_text_key_or_answer_reaches_the_store(simulator: Any, store: RedisServer) -> None:
    simulator.reply = "Confidential answer about invoices."
    system = FAMILY.format(uuid.UUID(int=7))
    arguments = {
        "task": "calls",
        "system": [system, FAMILY.format(uuid.UUID(int=8))],
        "n": 2,
        "state": store.url_bounded(PATIENT_SECONDS),
        "policy": {"adaptive_caps": True, "fanout": "warm"},
    }
    fleet.results([fleet.start_worker(simulator, 0, **arguments)])
    fleet.fan_out(simulator, store)
    client = store.client()
    stored: list[bytes] = []
    for key in client.scan_iter("*"):
        stored.append(key)
        kind = client.type(key)
        if kind == b"string":
            stored.append(client.get(key) or b"")
        elif kind == b"list":
            stored.extend(client.lrange(key, 0, -1))
        else:
            assert kind == b"hash", (key, kind)
            stored.extend(part for item in client.hgetall(key).items() for part in item)
    kinds = {key.split(b":")[2] for key in client.scan_iter("*")}
    assert {b"family", b"lengths", b"seen", b"latest"} <= kinds  # (cuts: only once a cap is adaptive)
    everything = b"\n".join(stored)
    for secret in (
        b"Example Corp",
        b"support bot",
        b"Request ID",
        b"00000000-0000-0000-0000-000000000007",
        b"rule1",
        b"Ticket",
        b"Confidential",
        b"invoices",
        b"fleet-key",
        b"test-key",
    ):
        assert secret not in everything, secret


def _wrapped(simulator: Any, state: str, exporter: InMemorySpanExporter, **policy: Any) -> Any:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    bare = openai.OpenAI(base_url=simulator.openai_base_url, api_key="test-key", max_retries=0)
    return sdk.wrap(bare, sdk.Policy(retries=0, **policy), tracer_provider=provider, state=state)


def _ask(client: Any, system: str) -> str:
    response = client.chat.completions.create(
        model="gpt-sim-1", messages=[{"role": "system", "content": system}, {"role": "user", "content": "Hello?"}]
    )
    return response.choices[0].message.content


def test_with_redis_stopped_mid_run_every_call_answers_says_degraded_and_the_store_is_used_again_once_back(
    simulator: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with RedisServer() as server:
        exporter = InMemorySpanExporter()
        client = _wrapped(simulator, server.url_bounded(PATIENT_SECONDS), exporter, adaptive_caps=True, fanout="warm")
        _ask(client, FAMILY.format(uuid.UUID(int=1)))
        server.stop()
        with caplog.at_level(logging.WARNING, logger="sdk.memory.redis_link"):
            for index in range(2, 6):
                assert _ask(client, FAMILY.format(uuid.UUID(int=index)))
        degraded = [dict(span.attributes or {}) for span in exporter.get_finished_spans()[1:]]
        assert len(degraded) == 4
        assert all(span.get(sc.KVWISE_STATE_DEGRADED) is True for span in degraded)
        assert all(span[sc.KVWISE_STATE_DEGRADED_REASON].startswith("ConnectionError") for span in degraded)
        assert [r.getMessage() for r in caplog.records].count(
            next(r.getMessage() for r in caplog.records)
        ) == 1  # once per outage
        assert not exporter.get_finished_spans()[0].attributes.get(sc.KVWISE_STATE_DEGRADED)
        server.start()
        time.sleep(STATE_RETRY_SECONDS * 1.2)  # the outage's pause runs out (a wait, not a timed assertion)
        exporter.clear()
        _ask(client, FAMILY.format(uuid.UUID(int=9)))
        [back] = exporter.get_finished_spans()
        assert sc.KVWISE_STATE_DEGRADED not in (back.attributes or {})
        assert server.client().keys("kvwise:*")  # it writes to the store again


def test_a_store_that_refuses_the_credentials_degrades_the_call_and_the_right_password_is_used(simulator: Any) -> None:
    with RedisServer(password="s3cret-pass") as server:
        exporter = InMemorySpanExporter()
        refused = _wrapped(simulator, server.url.replace("s3cret-pass", "wrong"), exporter, adaptive_caps=True)
        assert _ask(refused, FAMILY.format(uuid.UUID(int=1)))
        [span] = exporter.get_finished_spans()
        assert span.attributes[sc.KVWISE_STATE_DEGRADED] is True
        assert "wrong" not in span.attributes[sc.KVWISE_STATE_DEGRADED_REASON]
        accepted = _wrapped(simulator, server.url_bounded(PATIENT_SECONDS), exporter, adaptive_caps=True)
        _ask(accepted, FAMILY.format(uuid.UUID(int=2)))
        _ask(accepted, FAMILY.format(uuid.UUID(int=3)))
        assert server.client().keys("kvwise:*:family:*")


def test_a_store_that_answers_nothing_within_the_bound_degrades_the_call_which_still_answers(simulator: Any) -> None:
    with RedisServer() as server:
        exporter = InMemorySpanExporter()
        url = server.url_bounded(STALL_SECONDS).replace("redis://", "valkey://")
        client = _wrapped(simulator, url, exporter, adaptive_caps=True)
        _ask(client, FAMILY.format(uuid.UUID(int=1)))  # a valkey:// URL is read as the redis client's own
        assert server.client().keys("kvwise:*")
        server.pause()
        try:
            assert _ask(client, FAMILY.format(uuid.UUID(int=2)))
        finally:
            server.resume()
        first, slow = exporter.get_finished_spans()
        assert sc.KVWISE_STATE_DEGRADED not in (first.attributes or {})
        assert slow.attributes[sc.KVWISE_STATE_DEGRADED] is True
        assert slow.attributes[sc.KVWISE_STATE_DEGRADED_REASON].startswith("TimeoutError")


def test_a_state_url_of_another_scheme_is_refused_at_wrap(simulator: Any) -> None:
    bare = openai.OpenAI(base_url=simulator.openai_base_url, api_key="test-key")
    with pytest.raises(ValueError, match="redis://"):
        sdk.wrap(bare, state="http://127.0.0.1:6379")


def test_async_followers_wait_on_the_store_for_their_leader(simulator: Any, store: RedisServer) -> None:
    n, release = 4, threading.Event()
    simulator.hold(release)
    bare = openai.AsyncOpenAI(base_url=simulator.openai_base_url, api_key="test-key", max_retries=0)
    client = sdk.wrap(bare, sdk.Policy(retries=0, fanout="warm"), state=store.url_bounded(PATIENT_SECONDS))

    def started() -> None:
        until(lambda: simulator.held == 1 and fleet.listeners(store) == n - 1)
        release.set()

    answers = asyncio.run(fan_out(client, "openai", shared_prefix(PREFIX_TOKENS), n, mode="async", started=started))
    assert sum(1 for answer in answers if answer.usage.cache_write_tokens) == 1
    assert sum(1 for answer in answers if answer.cache_read_tokens > 0.9 * PREFIX_TOKENS) == n - 1


TOO_LARGE = STATE_MAX_VALUE_BYTES + 1
MALFORMED: dict[str, dict[str, Any]] = {
    "family": {
        "not JSON": b"{not json",
        "wrong type": b'{"values": [1]}',
        "wrong length": b'[[1, 2], [0], [0, 0], "ab", 1]',
        "too large": b"[" + b"0," * (TOO_LARGE // 2) + b"0]",
    },
    "seen": {
        "not JSON": b"{not json",
        "wrong type": b'["gpt-sim-1"]',
        "wrong length": b'{"model": "gpt-sim-1", "chain": [["system[0]", "ab", null]], "settings": [], "at": 1.0}',
        "too large": b'"' + b"a" * TOO_LARGE + b'"',
    },
    "lengths": {
        "not JSON": [b"abc"],
        "wrong type": [b'"12"'],
        "wrong length": [b"10"] * (ADAPTIVE_CAP_WINDOW + 1),
        "too large": [b"1" * TOO_LARGE],
    },
}
MALFORMED["latest"] = MALFORMED["seen"]


def _corrupt(redis: Any, kind: str, value: Any) -> list[bytes]:
    """Overwrite every stored value of key kind `kind` with `value` (a family has two records: its
    lines' and its candidates'); their keys."""
    keys = redis.keys(f"kvwise:*:{kind}:*")
    assert keys
    for key in keys:
        if kind in ("seen", "latest"):
            redis.hset(key, "seen", value)
        elif kind == "lengths":
            redis.delete(key)
            redis.rpush(key, *value)
        else:
            redis.set(key, value)
    return keys  # type: ignore[no-any-return]


@pytest.mark.parametrize("malformation", ["not JSON", "wrong type", "wrong length", "too large"])
@pytest.mark.parametrize("kind", ["family", "seen", "latest", "lengths"])
def test_a_malformed_value_is_dropped_and_the_call_that_read_it_degrades_naming_its_kind(
    simulator: Any, store: RedisServer, kind: str, malformation: str
) -> None:
    exporter = InMemorySpanExporter()
    client = _wrapped(simulator, store.url_bounded(PATIENT_SECONDS), exporter, adaptive_caps=True)
    redis = store.client()
    _ask(client, FAMILY.format(uuid.UUID(int=1)))
    keys = _corrupt(redis, kind, MALFORMED[kind][malformation])
    assert _ask(client, FAMILY.format(uuid.UUID(int=2))) == simulator.reply
    assert _ask(client, FAMILY.format(uuid.UUID(int=3))) == simulator.reply
    first, corrupt, after = (dict(span.attributes or {}) for span in exporter.get_finished_spans())
    assert corrupt[sc.KVWISE_STATE_DEGRADED] is True
    assert corrupt[sc.KVWISE_STATE_DEGRADED_REASON].startswith(f"malformed {kind} value: {malformation}")
    assert sc.KVWISE_STATE_DEGRADED not in first and sc.KVWISE_STATE_DEGRADED not in after  # dropped: read once
    assert all(
        redis.exists(key) == 0 or len(redis.dump(key) or b"") < STATE_MAX_VALUE_BYTES for key in keys
    )  # not kept
