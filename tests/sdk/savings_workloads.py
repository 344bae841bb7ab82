"""The workloads that measure adaptive caps and fan-out warm-up, shared by their tests and `make bench`.

- `output_workload`: a replay with a known output-length distribution per prompt family and injected
  runaways (answers that never end by themselves), played one call at a time.
- `fan_out`: N concurrent calls sharing a long system prompt, each with its own question.
Both run over loopback against the provider simulator with the real clients, sync or async.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sdk.adapters import adapter_for
from sdk.call import Api, Usage
from tests.sdk.helpers import resolve

RUNAWAY_UNIT = "I will keep going on and on. "
FAMILIES = {
    # family: (system prompt, the range of natural answer lengths in tokens)
    "classify": ("You label support tickets with one word: billing, bug, account or other. " * 40, (3, 40)),
    "summarise": ("You summarise a support ticket in a short paragraph for the on-call engineer. " * 40, (80, 600)),
}


@dataclass(frozen=True, slots=True)
class Turn:
    """One replayed call: its family, the length its answer has by nature, and whether it runs away."""

    family: str
    natural: int
    runaway: bool


@dataclass(frozen=True, slots=True)
class TurnAnswer:
    """What came back: its usage (as kvwise reads it) and whether the answer was cut at its limit."""

    turn: Turn
    usage: Usage
    truncated: bool

    @property
    def output_tokens(self) -> int:
        return self.usage.output_tokens

    @property
    def cache_read_tokens(self) -> int:
        return self.usage.cache_read_tokens


def output_workload(seed: int = 7, learn: int = 60, measured: int = 60, runaway_every: int = 10) -> list[Turn]:
    """Per family, `learn` calls without runaways, then `measured` calls of which every
    `runaway_every`-th runs away; the families interleaved, lengths drawn once from `seed`."""
    rng = random.Random(seed)
    turns: list[Turn] = []
    for index in range(learn + measured):
        for family, (_, (low, high)) in FAMILIES.items():
            natural = int(low + (high - low) * rng.random() ** 2)  # most answers short, a long tail
            turns.append(Turn(family, natural, runaway=index >= learn and (index - learn) % runaway_every == 0))
    return turns


def _request(api: str, system: str, question: str) -> Callable[[Any], Any]:
    """A call of `api` with no output limit of its own (kvwise decides it)."""
    if api == "anthropic":
        return lambda client: client.messages.create(
            model="claude-sim-1", system=system, messages=[{"role": "user", "content": question}]
        )
    return lambda client: client.chat.completions.create(
        model="gpt-sim-1", messages=[{"role": "system", "content": system}, {"role": "user", "content": question}]
    )


def _facts(api: str, response: Any) -> tuple[Usage, bool]:
    """The usage of a whole answer and whether it was cut at its limit."""
    if api == "anthropic":
        return adapter_for(Api.MESSAGES).usage(response) or Usage(), response.stop_reason == "max_tokens"
    return adapter_for(Api.CHAT).usage(response) or Usage(), response.choices[0].finish_reason == "length"


async def replay(client: Any, simulator: Any, api: str, turns: list[Turn]) -> list[TurnAnswer]:
    """Play `turns` one after another through `client` (sync or async), scripting each answer's length."""
    answers = []
    for number, turn in enumerate(turns):
        simulator.reply = " word" * turn.natural
        simulator.loop(RUNAWAY_UNIT if turn.runaway else None)
        response = await resolve(_request(api, FAMILIES[turn.family][0], f"Ticket {number}: help.")(client))
        answers.append(TurnAnswer(turn, *_facts(api, response)))
    simulator.loop(None)
    return answers


def shared_prefix(tokens: int) -> str:
    """A system prompt of about `tokens` simulator tokens (one per word)."""
    return " ".join(f"rule{i % 997}" for i in range(tokens))


async def fan_out(
    client: Any, api: str, system: str, n: int, *, mode: str, started: Callable[[], None] = lambda: None
) -> list[TurnAnswer | BaseException]:
    """`n` concurrent calls sharing `system`, each its own question (threads for a sync client, one
    event loop's tasks for an async one, `mode` "async"); `started` runs once all were launched.
    Failures are returned."""
    turn = Turn("fan-out", 0, False)
    requests = [_request(api, system, f"Part {i}: what does rule {i} say?") for i in range(n)]

    async def one_async(request: Callable[[Any], Any]) -> TurnAnswer:
        return TurnAnswer(turn, *_facts(api, await request(client)))

    if mode == "async":
        tasks = [asyncio.ensure_future(one_async(request)) for request in requests]
        await asyncio.to_thread(started)
        return list(await asyncio.gather(*tasks, return_exceptions=True))
    results: list[TurnAnswer | BaseException] = [RuntimeError("not run")] * n

    def one(index: int) -> None:
        try:
            results[index] = TurnAnswer(turn, *_facts(api, requests[index](client)))
        except BaseException as error:  # returned to the caller, as gather does
            results[index] = error

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    await asyncio.to_thread(started)
    for thread in threads:
        await asyncio.to_thread(thread.join)
    return results
