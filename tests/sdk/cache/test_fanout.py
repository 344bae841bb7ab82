"""Fan-out warm-up (`Policy.fanout="warm"`): over loopback, both providers, sync threads and asyncio.

The simulator writes its caches when a prefill is over, as the providers do, and `hold` keeps the
first request in prefill until the test lets it out: so who waited for whom is asserted by order
and counts, never by time.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import sdk
from sdk import semconv as sc
from tests.sdk.helpers import until
from tests.sdk.savings_workloads import TurnAnswer, fan_out, shared_prefix

PREFIX_TOKENS = 20_000


def _client(bare: Any, **policy: Any) -> Any:
    return sdk.wrap(bare, sdk.Policy(retries=0, **policy))


def _reads(results: list[TurnAnswer | BaseException]) -> int:
    return sum(r.cache_read_tokens for r in results if isinstance(r, TurnAnswer))


@pytest.mark.parametrize("n", [8, 32])
@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_followers_read_the_cache_their_leader_wrote_instead_of_writing_it_again(
    simulator: Any, openai_client: Any, anthropic_client: Any, mode: str, api: str, n: int
) -> None:
    bare = openai_client if api == "openai" else anthropic_client
    system = shared_prefix(PREFIX_TOKENS)
    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    async def body() -> tuple[list[TurnAnswer | BaseException], list[TurnAnswer | BaseException], int, Any]:
        cold_release = threading.Event()
        simulator.hold(cold_release, times=n)  # every request in prefill until all have arrived

        def cold_started() -> None:
            until(lambda: simulator.held == n)
            cold_release.set()

        cold = await fan_out(_client(bare), api, system, n, mode=mode, started=cold_started)
        simulator.reset()
        warm_client = sdk.wrap(bare, sdk.Policy(retries=0, fanout="warm"), tracer_provider=provider)
        gate, release = warm_client._shared.pipeline.fanout, threading.Event()
        simulator.hold(release)  # the leader stays in prefill until every follower waits for it

        def warm_started() -> None:
            until(lambda: gate.waiting() == n - 1 and simulator.held == 1)
            release.set()

        warm = await fan_out(warm_client, api, system, n, mode=mode, started=warm_started)
        [after] = await fan_out(_client(bare), api, system, 1, mode=mode)
        assert isinstance(after, TurnAnswer)
        return cold, warm, after.cache_read_tokens, gate

    cold, warm, per_follower, gate = asyncio.run(body())
    assert all(isinstance(r, TurnAnswer) for r in cold + warm)
    ideal = (n - 1) * per_follower
    assert per_follower > 0.9 * PREFIX_TOKENS
    assert _reads(cold) == 0
    assert _reads(warm) >= 0.9 * ideal, (_reads(warm), ideal)
    assert gate.waiting() == 0
    spans = [dict(span.attributes or {}) for span in exporter.get_finished_spans()]
    followers = [s for s in spans if sc.KVWISE_FANOUT_WAITED_MS in s]
    [leader] = [
        span for span in exporter.get_finished_spans() if sc.KVWISE_FANOUT_WAITED_MS not in (span.attributes or {})
    ]
    assert len(followers) == n - 1
    assert {s[sc.KVWISE_FANOUT_LEADER_SPAN_ID] for s in followers} == {f"{leader.context.span_id:016x}"}
    waits = sorted(s[sc.KVWISE_FANOUT_WAITED_MS] for s in followers)
    print(
        f"\n{api} {mode} {n}-way: cache reads {_reads(warm)} of ideal {ideal} warm, {_reads(cold)} cold; "
        f"followers waited {waits[0]:.1f}-{waits[-1]:.1f} ms (the leader held in prefill by the test)"
    )


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_leader_that_fails_releases_its_followers_at_once(
    simulator: Any, openai_client: Any, anthropic_client: Any, mode: str, api: str
) -> None:
    bare, n = (openai_client if api == "openai" else anthropic_client), 8
    client = _client(bare, fanout="warm", fanout_wait_seconds=600.0)  # only the failure can release them
    gate, release = client._shared.pipeline.fanout, threading.Event()
    simulator.hold(release, status=500)

    def started() -> None:
        until(lambda: gate.waiting() == n - 1 and simulator.held == 1)
        release.set()

    results = asyncio.run(fan_out(client, api, shared_prefix(PREFIX_TOKENS), n, mode=mode, started=started))
    failed = [r for r in results if isinstance(r, BaseException)]
    assert len(failed) == 1 and getattr(failed[0], "status_code", None) == 500
    assert sum(isinstance(r, TurnAnswer) for r in results) == n - 1
    assert len(simulator.requests) == n and gate.waiting() == 0


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_leader_slow_past_the_wait_limit_releases_its_followers(
    simulator: Any, openai_client: Any, anthropic_client: Any, mode: str, api: str
) -> None:
    bare, n = (openai_client if api == "openai" else anthropic_client), 8
    client = _client(bare, fanout="warm", fanout_wait_seconds=0.01)
    release = threading.Event()
    simulator.hold(release)

    def started() -> None:
        until(lambda: len(simulator.requests) == n)  # the followers went while the leader is still held
        release.set()

    results = asyncio.run(fan_out(client, api, shared_prefix(PREFIX_TOKENS), n, mode=mode, started=started))
    assert all(isinstance(r, TurnAnswer) for r in results)  # the held leader too, once let out
    assert client._shared.pipeline.fanout.waiting() == 0


def test_calls_of_other_api_keys_never_wait_for_each_other(simulator: Any, openai_client: Any) -> None:
    system = shared_prefix(PREFIX_TOKENS)
    client = _client(openai_client, fanout="warm", fanout_wait_seconds=600.0)
    other = client.with_options(api_key="another-tenant")
    release = threading.Event()
    simulator.hold(release)

    async def body() -> list[TurnAnswer | BaseException]:
        leader = asyncio.ensure_future(fan_out(client, "openai", system, 1, mode="async"))
        await asyncio.to_thread(until, lambda: len(simulator.requests) == 1)
        results = await fan_out(other, "openai", system, 3, mode="async")  # done while the leader is held
        release.set()
        return results + await leader

    results = asyncio.run(body()) if type(openai_client).__name__.startswith("Async") else None
    if results is None:  # the sync client: threads
        leader = threading.Thread(target=lambda: asyncio.run(fan_out(client, "openai", system, 1, mode="sync")))
        leader.start()
        until(lambda: len(simulator.requests) == 1)
        results = asyncio.run(fan_out(other, "openai", system, 3, mode="sync"))
        release.set()
        leader.join()
    assert all(isinstance(r, TurnAnswer) for r in results)
    assert client._shared.pipeline.fanout.waiting() == 0


def test_a_streamed_leader_releases_its_followers_at_its_first_chunk(
    simulator: Any, openai_client: Any, mode: str
) -> None:
    n = 4
    client = _client(openai_client, fanout="warm", fanout_wait_seconds=600.0)
    gate, release = client._shared.pipeline.fanout, threading.Event()
    simulator.hold(release)
    system = shared_prefix(PREFIX_TOKENS)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Lead the way."}]

    async def run(step: Callable[[], Any]) -> Any:
        """A sync client's step in a thread, an async one's awaited in this loop."""
        return await step() if mode == "async" else await asyncio.to_thread(step)

    async def body() -> tuple[tuple[int, int], int, list[TurnAnswer | BaseException]]:
        create = client.chat.completions.create
        opening = asyncio.ensure_future(run(lambda: create(model="gpt-sim-1", messages=messages, stream=True)))
        await asyncio.to_thread(until, lambda: simulator.held == 1)
        followers = asyncio.ensure_future(fan_out(client, "openai", system, n - 1, mode=mode))
        await asyncio.to_thread(until, lambda: gate.waiting() == n - 1)
        release.set()
        stream = await opening
        before_first_chunk = gate.waiting(), gate.in_flight()  # the stream is open, nothing of it read yet
        chunks = aiter(stream) if mode == "async" else iter(stream)
        read = 0
        while gate.in_flight():  # header chunks (the role) first: the first content chunk releases the leader
            await run(lambda: anext(chunks) if mode == "async" else next(chunks))  # StopIteration: never released
            read += 1
        results = await followers
        await run(lambda: stream.close())
        return before_first_chunk, read, results

    before_first_chunk, read, results = asyncio.run(body())
    assert before_first_chunk == (n - 1, 1) and read >= 1
    assert all(isinstance(r, TurnAnswer) and r.cache_read_tokens > 0.9 * PREFIX_TOKENS for r in results)


@pytest.mark.parametrize(
    ("api", "prefix_tokens", "cache_hints"),
    [("openai", 200, True), ("anthropic", 200, True), ("anthropic", PREFIX_TOKENS, False)],
    ids=["openai-too-short", "anthropic-too-short", "anthropic-no-breakpoint"],
)
def test_calls_whose_prefix_cannot_be_cached_never_wait(
    simulator: Any,
    openai_client: Any,
    anthropic_client: Any,
    mode: str,
    api: str,
    prefix_tokens: int,
    cache_hints: bool,
) -> None:
    bare, n = (openai_client if api == "openai" else anthropic_client), 4
    client = _client(bare, fanout="warm", fanout_wait_seconds=600.0, cache_hints=cache_hints)
    release = threading.Event()
    simulator.hold(release)

    def started() -> None:
        until(lambda: len(simulator.requests) == n)  # all went while the first is held: nobody waited
        release.set()

    results = asyncio.run(fan_out(client, api, shared_prefix(prefix_tokens), n, mode=mode, started=started))
    assert all(isinstance(r, TurnAnswer) for r in results)
    assert client._shared.pipeline.fanout.in_flight() == 0
