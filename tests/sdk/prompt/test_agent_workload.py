"""A realistic agent workload through a wrapped client: >= 95% of the ideal hit ratio, stable bytes in place."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sdk
from tests.sdk.agent_workload import TOOLS, WorkloadCall, _stable_system, workload
from tests.sdk.helpers import resolve

MODEL = "gpt-sim-1"


async def _hit_ratio(
    simulator: Any, client: Any, calls: list[WorkloadCall], messages: Callable[[WorkloadCall], list[dict[str, Any]]]
) -> float:
    """Send every call from a cold cache; cache-read tokens over all input tokens."""
    simulator.reset()
    cached = total = 0
    for call in calls:
        response = await resolve(client.chat.completions.create(model=MODEL, messages=messages(call), tools=call.tools))
        total += response.usage.prompt_tokens
        cached += response.usage.prompt_tokens_details.cached_tokens or 0
    return cached / total


async def test_an_agent_workload_reaches_95_percent_of_the_ideal_hit_ratio_with_stable_bytes_in_place(
    simulator, openai_client
):
    calls = workload()
    ideal = await _hit_ratio(simulator, openai_client, calls, lambda call: call.ideal)
    bare = await _hit_ratio(simulator, openai_client, calls, lambda call: call.caller)
    wrapped = await _hit_ratio(simulator, sdk.wrap(openai_client), calls, lambda call: call.caller)
    assert bare < 0.5 * ideal  # the app's own order wastes most of the cache: the workload rewards moving
    print(f"agent workload hit ratio: ideal {ideal:.3f}, bare {bare:.3f}, wrapped {wrapped:.3f}")
    assert wrapped >= 0.95 * ideal, (wrapped, ideal, bare)

    first_of_family = {family: calls.index(next(c for c in calls if c.family == family)) for family in TOOLS}
    for index, (call, received) in enumerate(zip(calls, simulator.requests)):
        body = received.body
        assert body["tools"] == TOOLS[call.family]  # tool definitions are never rewritten
        if call.family == "coder" and index == first_of_family[call.family]:
            assert body["messages"] == call.caller  # only calls can tell its nonce: the family's first call as written
            continue
        assert body["messages"][0]["content"] == _stable_system(call.family)  # every stable byte where the app put it
        history, note = call.caller[1:], call.ideal[-1]["content"]  # the changing values: moved, not dropped
        if history[-1]["role"] == "user":  # the conversation's first call: the tail note ends its one user turn
            expected = [{**history[-1], "content": f"{history[-1]['content']}\n\n{note}"}]
        else:  # after the tool results: a user turn of its own, the app's turns untouched before it
            expected = [*history, call.ideal[-1]]
        assert body["messages"][1:] == expected
