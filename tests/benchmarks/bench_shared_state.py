"""Shared state through Redis (`sdk.wrap(state=...)`): what a call pays for it, and what a fleet saves.

    .venv/bin/python -m tests.benchmarks bench_shared_state

- Per-call overhead: one sync client's plain calls to the simulator under the policy that touches
  every shared memory (a system prompt with a request id: the families; adaptive caps; fan-out
  warm-up on a 2k-token prefix: a lease taken and released per call), with in-process state, the
  default SQLite file (`sdk.memory.sqlite_store`, in a temporary folder) and a real Redis on loopback
  (Debian's `redis-server`), rounds interleaved; the raw client beside them.
- Fleet fan-out: 4 worker processes of 8 concurrent calls each on one 20k-token prefix
  (`tests.sdk.fleet`), in-process state against Redis, in cache writes, reads and dollars at the
  built-in prices (the simulator's model priced as gpt-5.6).
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

import openai

import sdk
from sdk.call import Usage
from sdk.telemetry.pricing import PriceTable, cost_of
from tests.benchmarks.figures_doc import machine_line
from tests.redis_server import RedisServer
from tests.sdk import fleet
from tests.sdk.savings_workloads import shared_prefix
from tests.simulator.simulator import ProviderSimulator

CALLS, ROUNDS, WARMUP = 100, 5, 20
PRICED_AS = "gpt-5.6"


def _caller(client: Any, prefix: str) -> Callable[[int], Any]:
    def call(index: int) -> Any:
        system = f"Request ID: {uuid.UUID(int=index + 1)}\n{prefix}"
        return client.chat.completions.create(
            model="gpt-sim-1", messages=[{"role": "system", "content": system}, {"role": "user", "content": "Hello?"}]
        )

    return call


def _per_call_us(call: Callable[[int], Any], start: int) -> float:
    began = time.perf_counter()
    for index in range(start, start + CALLS):
        call(index)
    return (time.perf_counter() - began) / CALLS * 1e6


def _overhead(sim: ProviderSimulator, server: RedisServer, folder: str) -> str:
    prefix = shared_prefix(2_000)
    bare = openai.OpenAI(base_url=sim.openai_base_url, api_key="bench", max_retries=0)
    policy = sdk.Policy(retries=0, adaptive_caps=True, fanout="warm")
    callers = {
        "raw client": _caller(bare, prefix),
        "kvwise, in-process state": _caller(sdk.wrap(bare, policy, state="memory"), prefix),
        "kvwise, SQLite state (default)": _caller(
            sdk.wrap(bare, policy, state=f"sqlite://{folder}/state.sqlite3"), prefix
        ),
        "kvwise, Redis state": _caller(sdk.wrap(bare, policy, state=server.url), prefix),
    }
    for call in callers.values():
        for index in range(WARMUP):
            call(index)
    figures: dict[str, list[float]] = {name: [] for name in callers}
    for round_ in range(ROUNDS):
        for name, call in callers.items():
            figures[name].append(_per_call_us(call, 1000 + round_ * CALLS))
    medians = {name: statistics.median(values) for name, values in figures.items()}
    base = medians["kvwise, in-process state"]
    lines = [
        f"{'per call (median of ' + str(ROUNDS) + ' rounds of ' + str(CALLS) + ')':<40} {'µs':>9} {'÷ in-process':>13}"
    ]
    lines += [f"{name:<40} {value:>9.0f} {value / base:>13.2f}" for name, value in medians.items()]
    lines.append(f"{'SQLite state adds':<40} {medians['kvwise, SQLite state (default)'] - base:>+9.0f}")
    lines.append(f"{'Redis state adds':<40} {medians['kvwise, Redis state'] - base:>+9.0f}")
    return "\n".join(lines)


def _dollars(answers: list[dict[str, Any]]) -> tuple[int, int, float]:
    price = PriceTable.load().lookup(PRICED_AS)
    assert price is not None
    dollars = sum(
        cost_of(
            Usage(
                input_tokens=a["input"],
                output_tokens=a["output"],
                cache_read_tokens=a["read"],
                cache_write_tokens=a["write"],
            ),
            price,
        ).total_usd
        for a in answers
    )
    return sum(1 for a in answers if a["write"]), sum(1 for a in answers if a["read"]), dollars


def _fleet(sim: ProviderSimulator, server: RedisServer) -> str:
    sim.reset()
    alone = _dollars(fleet.fan_out(sim, None))
    sim.reset()
    server.client().flushall()
    shared = _dollars(fleet.fan_out(sim, server))
    calls = fleet.WORKERS * fleet.PER_WORKER
    lines = [
        f"fleet fan-out: {fleet.WORKERS} workers x {fleet.PER_WORKER} calls, {fleet.PREFIX_TOKENS}-token prefix, "
        f"priced as {PRICED_AS}",
        f"{'state':<22} {'writes':>7} {'reads':>7} {'dollars':>10}",
    ]
    for name, (writes, reads, dollars) in (("in-process", alone), ("Redis", shared)):
        lines.append(f"{name:<22} {writes:>7} {reads:>7} {dollars:>10.4f}")
    lines.append(
        f"Redis saves ${alone[2] - shared[2]:.4f} of ${alone[2]:.4f} ({1 - shared[2] / alone[2]:.0%})"
        f" on {calls} calls; "
        f"ideal: 1 write, {calls - 1} reads"
    )
    return "\n".join(lines)


def main() -> None:
    print(machine_line(), flush=True)
    with ProviderSimulator() as sim, RedisServer() as server, tempfile.TemporaryDirectory() as folder:
        print(_overhead(sim, server, folder), flush=True)
        print(_fleet(sim, server), flush=True)


if __name__ == "__main__":
    main()
