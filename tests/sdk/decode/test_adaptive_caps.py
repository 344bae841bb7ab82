"""Adaptive output caps (`Policy.adaptive_caps`): learnt per workload (API, model, stable prefix), over
loopback with the real clients."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import sdk
from sdk import semconv as sc
from sdk._constants import ADAPTIVE_CAP_MIN_CALLS, ADAPTIVE_CAP_WINDOW
from sdk.call import Usage
from sdk.decode.adaptive_caps import AdaptiveCaps
from tests.sdk.helpers import collect, resolve
from tests.sdk.savings_workloads import FAMILIES, TurnAnswer, output_workload, replay

FIXED_CAP = 4096


def _p99(values: list[int]) -> int:
    ordered = sorted(values)
    return ordered[math.ceil(0.99 * len(ordered)) - 1]


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_adaptive_caps_cut_the_tokens_runaways_spend_by_80_percent_and_truncate_no_natural_answer(
    simulator: Any, openai_client: Any, anthropic_client: Any, api: str
) -> None:
    bare = openai_client if api == "openai" else anthropic_client
    turns = output_workload()

    async def both() -> tuple[list[TurnAnswer], list[TurnAnswer]]:
        fixed = await replay(sdk.wrap(bare, sdk.Policy(max_output_tokens=FIXED_CAP)), simulator, api, turns)
        simulator.reset()
        policy = sdk.Policy(max_output_tokens=FIXED_CAP, adaptive_caps=True)
        return fixed, await replay(sdk.wrap(bare, policy), simulator, api, turns)

    fixed, adaptive = asyncio.run(both())
    runaway_fixed = sum(a.output_tokens for a in fixed if a.turn.runaway)
    runaway_adaptive = sum(a.output_tokens for a in adaptive if a.turn.runaway)
    assert runaway_fixed == FIXED_CAP * sum(t.runaway for t in turns)  # every runaway ran to the fixed cap
    assert runaway_adaptive <= 0.2 * runaway_fixed, (runaway_adaptive, runaway_fixed)
    for family in FAMILIES:
        p99 = _p99([t.natural for t in turns if t.family == family and not t.runaway])
        fitting = [a for a in adaptive if a.turn.family == family and not a.turn.runaway and a.turn.natural <= p99]
        assert fitting and not [a for a in fitting if a.truncated]
        assert all(a.output_tokens == a.turn.natural for a in fitting)
    print(f"\n{api}: runaway output tokens {runaway_fixed} at a fixed {FIXED_CAP} cap, {runaway_adaptive} adaptive")


def test_the_span_records_the_cap_and_where_it_came_from(simulator: Any, openai_client: Any) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    client = sdk.wrap(openai_client, sdk.Policy(adaptive_caps=True, adaptive_cap_floor=8), tracer_provider=provider)
    simulator.reply = " word" * 10
    system = FAMILIES["classify"][0]

    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Hi"}]

    async def body() -> None:
        for _ in range(ADAPTIVE_CAP_MIN_CALLS + 1):
            await resolve(client.chat.completions.create(model="gpt-sim-1", messages=messages))
        await resolve(client.chat.completions.create(model="gpt-sim-1", max_tokens=900, messages=messages))
        await resolve(client.chat.completions.create(model="gpt-sim-1", max_tokens=9000, messages=messages))

    asyncio.run(body())
    spans = [dict(span.attributes or {}) for span in exporter.get_finished_spans()]
    sources = [(s[sc.KVWISE_OUTPUT_CAP_SOURCE], s[sc.KVWISE_OUTPUT_CAP_TOKENS]) for s in spans]
    assert sources[0] == (sc.CapSource.POLICY, 4096)
    assert sources[ADAPTIVE_CAP_MIN_CALLS] == (sc.CapSource.ADAPTIVE, 15)  # p99 10 x 1.5
    assert sources[-2:] == [(sc.CapSource.CALLER, 900), (sc.CapSource.POLICY, 4096)]  # a caller's cap is never lowered
    assert simulator.requests[-2].body["max_tokens"] == 900


def test_reasoning_calls_without_a_budget_stay_uncapped_when_the_family_has_learnt_a_cap(
    simulator: Any, openai_client: Any
) -> None:
    client = sdk.wrap(openai_client, sdk.Policy(adaptive_caps=True))
    simulator.reply = " word" * 10
    messages = [{"role": "system", "content": FAMILIES["classify"][0]}, {"role": "user", "content": "Hi"}]

    async def body() -> None:
        for _ in range(ADAPTIVE_CAP_MIN_CALLS):
            await resolve(client.chat.completions.create(model="gpt-sim-1", messages=messages))
        await resolve(client.chat.completions.create(model="gpt-sim-1", messages=messages))
        await resolve(client.chat.completions.create(model="gpt-sim-1", reasoning_effort="low", messages=messages))

    asyncio.run(body())
    assert simulator.requests[-2].body["max_completion_tokens"] == 256  # the floor: p99 10 x 1.5 is below it
    assert (
        "max_completion_tokens" not in simulator.requests[-1].body and "max_tokens" not in simulator.requests[-1].body
    )


def test_answers_cut_at_their_limit_are_not_learnt_so_the_cap_never_ratchets_up() -> None:
    caps, workload = AdaptiveCaps(), ("chat.completions", "m", "k")
    for _ in range(ADAPTIVE_CAP_MIN_CALLS):
        caps.learn(workload, Usage(output_tokens=100), cap=4096, adaptive=False)
    for _ in range(5):
        caps.learn(workload, Usage(output_tokens=150), cap=150, adaptive=True)  # runaways cut at the adaptive cap
    assert caps.quantile(workload) == 100


def test_a_family_cut_more_often_than_its_p99_allows_starts_over() -> None:
    caps, workload = AdaptiveCaps(), ("chat.completions", "m", "k")
    for _ in range(ADAPTIVE_CAP_MIN_CALLS):
        caps.learn(workload, Usage(output_tokens=100), cap=4096, adaptive=False)
    for _ in range(int(0.05 * ADAPTIVE_CAP_WINDOW) + 1):
        caps.learn(workload, Usage(output_tokens=150), cap=150, adaptive=True)  # the workload's answers grew
    assert caps.quantile(workload) is None  # back under the policy's cap until it has learnt again


def test_families_are_kept_in_bounded_memory_least_recently_used_first() -> None:
    caps = AdaptiveCaps(size=2)
    for name in ("a", "b", "a", "c"):
        caps.learn(("chat.completions", "m", name), Usage(output_tokens=1), cap=None, adaptive=False)
    assert len(caps) == 2
    for _ in range(ADAPTIVE_CAP_MIN_CALLS):
        caps.learn(("chat.completions", "m", "a"), Usage(output_tokens=1), cap=None, adaptive=False)
    assert caps.quantile(("chat.completions", "m", "a")) == 1 and caps.quantile(("chat.completions", "m", "b")) is None


def test_streamed_answers_teach_the_family_as_whole_ones_do(simulator: Any, anthropic_client: Any) -> None:
    client = sdk.wrap(anthropic_client, sdk.Policy(adaptive_caps=True, adaptive_cap_floor=8))
    simulator.reply = " word" * 20
    call = {
        "model": "claude-sim-1",
        "system": FAMILIES["summarise"][0],
        "messages": [{"role": "user", "content": "Hi"}],
    }

    async def body() -> None:
        for _ in range(ADAPTIVE_CAP_MIN_CALLS):
            await collect(await resolve(client.messages.create(**call, stream=True)))
        await resolve(client.messages.create(**call))

    asyncio.run(body())
    assert [r.body["max_tokens"] for r in simulator.requests[-2:]] == [4096, 30]  # p99 20 x 1.5
