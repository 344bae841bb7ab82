"""Savings of adaptive output caps and fan-out warm-up, in tokens and dollars at the built-in prices.

    .venv/bin/python -m tests.benchmarks bench_savings

Both workloads run over loopback against the provider simulator with the real clients (async), each
twice: with the feature and without it (the same calls, same policy otherwise). The simulator's
models are priced as gpt-5.6 (OpenAI) and claude-sonnet-5 (Anthropic) from `sdk.telemetry.pricing`.

- Adaptive caps: `savings_workloads.output_workload` (two prompt families with known output-length
  distributions, a runaway every 10th call after 60 learning calls per family), against a fixed
  4096-token cap.
- Fan-out: 8 and 32 concurrent calls on a 20k-token shared system prompt, the simulator's prefill
  taking `PREFILL_SECONDS` before the first token (caches written after it, as the providers do);
  the added latency is the fan-out's wall time with warm-up minus without.
- Real prompts (issue 52): the corpus of `tests.sdk.real_prompts` (published system prompts, their
  run-time slots filled for one user on three days, a new session each day), each day a process of
  its own (`tests.sdk.real_prompts.runs`) that sends every prompt once through a real `openai`
  client, bare, then wrapped with the default policy and store (the three processes share the
  user's cache home); the ideal is every stable byte read: each prompt with its slots removed, sent
  on the three days. Cached input tokens of days 2 and 3 (day 1 is cold for all three) and dollars.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import anthropic
import openai

import sdk
from sdk.call import Usage
from sdk.telemetry.pricing import PriceTable, cost_of
from tests.sdk.real_prompts import DAYS, SLOT, corpus
from tests.sdk.real_prompts.runs import Run, finish, start
from tests.sdk.savings_workloads import TurnAnswer, fan_out, output_workload, replay, shared_prefix
from tests.simulator.simulator import ProviderSimulator

PRICED_AS = {"openai": "gpt-5.6", "anthropic": "claude-sonnet-5"}
PREFILL_SECONDS = 0.3
PREFIX_TOKENS = 20_000
FIXED_CAP = 4096


def _client(api: str, sim: ProviderSimulator) -> Any:
    """A fresh async client, closed (`async with`) when its workload is done. Left open for the
    garbage collector, the earlier workloads' clients hung the Anthropic 32-way fan-out every run: 15
    of its 32 calls waited for ever on answers that sat unread in their sockets' receive queues
    (likely an old connection's close unwatching a descriptor a new one had been given)."""
    if api == "openai":
        return openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key="bench", max_retries=0)
    return anthropic.AsyncAnthropic(base_url=sim.anthropic_base_url, api_key="bench", max_retries=0)


def _dollars(api: str, answers: list[TurnAnswer | BaseException]) -> tuple[Usage, float]:
    price = PriceTable.load().lookup(PRICED_AS[api])
    assert price is not None
    total, dollars = Usage(), 0.0
    for answer in answers:
        if isinstance(answer, BaseException):
            raise answer
        usage = answer.usage
        total = Usage(
            *(
                a + b
                for a, b in zip(
                    (total.input_tokens, total.output_tokens, total.cache_read_tokens, total.cache_write_tokens),
                    (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens),
                )
            )
        )
        dollars += cost_of(usage, price).total_usd
    return total, dollars


def _row(label: str, without: tuple[Usage, float], with_: tuple[Usage, float], tokens: str) -> str:
    before, after = getattr(without[0], tokens), getattr(with_[0], tokens)
    return (
        f"{label:<28} {tokens:<18} {before:>9} -> {after:>9}  "
        f"${without[1]:>8.4f} -> ${with_[1]:>8.4f}  saved ${without[1] - with_[1]:.4f} "
        f"({1 - with_[1] / without[1]:.0%} of the dollars)"
    )


async def _caps(sim: ProviderSimulator, api: str) -> str:
    turns = output_workload()
    async with _client(api, sim) as bare:
        sim.reset()
        fixed = await replay(sdk.wrap(bare, sdk.Policy(max_output_tokens=FIXED_CAP)), sim, api, turns)
        sim.reset()
        adaptive = await replay(
            sdk.wrap(bare, sdk.Policy(max_output_tokens=FIXED_CAP, adaptive_caps=True)), sim, api, turns
        )
    runaway = [a.output_tokens for a in fixed if a.turn.runaway], [a.output_tokens for a in adaptive if a.turn.runaway]
    truncated = sum(a.truncated and not a.turn.runaway for a in adaptive)
    return (
        _row(f"caps {api} ({len(turns)} calls)", _dollars(api, fixed), _dollars(api, adaptive), "output_tokens")
        + f"\n{'':<28} runaway output tokens {sum(runaway[0])} -> {sum(runaway[1])}"
        f" ({1 - sum(runaway[1]) / sum(runaway[0]):.0%} cut); natural answers truncated: {truncated}"
    )


async def _fanout(sim: ProviderSimulator, api: str, n: int) -> str:
    system, runs = shared_prefix(PREFIX_TOKENS), {}
    async with _client(api, sim) as bare:
        for label, policy in (("cold", sdk.Policy(retries=0)), ("warm", sdk.Policy(retries=0, fanout="warm"))):
            sim.reset()
            start = time.perf_counter()
            runs[label] = (
                await fan_out(sdk.wrap(bare, policy), api, system, n, mode="async"),
                time.perf_counter() - start,
            )
    cold, warm = _dollars(api, runs["cold"][0]), _dollars(api, runs["warm"][0])
    return (
        _row(f"fan-out {api} {n}-way", cold, warm, "cache_read_tokens")
        + f"\n{'':<28} wall {runs['cold'][1] * 1000:.0f} ms -> {runs['warm'][1] * 1000:.0f} ms"
        f" (added latency {(runs['warm'][1] - runs['cold'][1]) * 1000:+.0f} ms;"
        f" prefill {PREFILL_SECONDS * 1000:.0f} ms)"
    )


def _real_prompts(sim: ProviderSimulator, home: Path) -> str:
    """The real-prompt workload (see the module): bare, wrapped and ideal cached input tokens and dollars."""
    prompts, price = corpus(), PriceTable.load().lookup(PRICED_AS["openai"])
    assert price is not None
    totals: dict[str, tuple[Usage, float]] = {}
    for label, wrap in (("bare", False), ("wrapped", True), ("ideal", False)):
        sim.reset()
        usage, dollars = Usage(), 0.0
        for day in DAYS:
            run = Run(f"{label}{day}", "maria", day, wrap, home / label)
            sent = [replace(p, template=SLOT.sub("", p.template)) for p in prompts] if label == "ideal" else prompts
            answers = finish(start(run, sent, sim.openai_base_url))
            if day == DAYS[0]:
                continue  # cold for all three
            for answer in answers:
                call = Usage(input_tokens=answer["input"], output_tokens=0, cache_read_tokens=answer["cached"])
                usage = Usage(usage.input_tokens + answer["input"], 0, usage.cache_read_tokens + answer["cached"])
                dollars += cost_of(call, price).total_usd
        totals[label] = usage, dollars
    (bare, bare_usd), (wrapped, wrapped_usd), (ideal, ideal_usd) = totals["bare"], totals["wrapped"], totals["ideal"]
    share = {label: usage.cache_read_tokens / ideal.cache_read_tokens for label, (usage, _) in totals.items()}
    return (
        f"{f'real prompts ({len(prompts)} x {len(DAYS)} days)':<28} cache_read_tokens  "
        f"bare {bare.cache_read_tokens} -> wrapped {wrapped.cache_read_tokens} (ideal {ideal.cache_read_tokens}); "
        f"input ${bare_usd:.4f} -> ${wrapped_usd:.4f} (ideal ${ideal_usd:.4f}); of the ideal's reads, wrapped "
        f"{share['wrapped']:.1%}, bare {share['bare']:.1%}"
    )


async def main() -> None:
    with ProviderSimulator() as sim, tempfile.TemporaryDirectory(prefix="kvwise-bench-real-") as home:
        print(_real_prompts(sim, Path(home)), flush=True)
        for api in PRICED_AS:
            print(await _caps(sim, api), flush=True)
        sim.first_token_delay = PREFILL_SECONDS
        for api in PRICED_AS:
            for n in (8, 32):
                print(await _fanout(sim, api, n), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
