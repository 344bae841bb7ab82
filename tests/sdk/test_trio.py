"""The async wrapped clients under trio, as the bare ones run there (both clients support it through
anyio): a call, a stream, and a fan-out follower waiting for its leader."""

from __future__ import annotations

import threading
from typing import Any

import anthropic
import openai
import pytest

import sdk
from tests.sdk.helpers import until
from tests.sdk.savings_workloads import shared_prefix

trio = pytest.importorskip("trio")

USER = [{"role": "user", "content": "What is prefill?"}]


def _async_client(api: str, simulator: Any) -> Any:
    if api == "anthropic":
        return anthropic.AsyncAnthropic(base_url=simulator.anthropic_base_url, api_key="k")
    return openai.AsyncOpenAI(base_url=simulator.openai_base_url, api_key="k")


def _call(client: Any, api: str, system: str, question: str, **extra: Any) -> Any:
    if api == "anthropic":
        return client.messages.create(
            model="claude-sim-1",
            max_tokens=64,
            system=system,
            messages=[{"role": "user", "content": question}],
            **extra,
        )
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    return client.chat.completions.create(model="gpt-sim-1", messages=messages, **extra)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_call_and_a_stream_of_the_wrapped_async_client_run_under_trio(simulator, api):
    async def main() -> tuple[Any, list[Any]]:
        client = sdk.wrap(_async_client(api, simulator))
        answer = await _call(client, api, "Be brief.", "What is prefill?")
        stream = await _call(client, api, "Be brief.", "What is decode?", stream=True)
        events = [event async for event in stream]
        return answer, events

    answer, events = trio.run(main)
    assert (answer.content if api == "anthropic" else answer.choices) and events
    assert len(simulator.requests) == 2


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_fan_out_follower_waits_for_its_leader_under_trio(simulator, api):
    client = sdk.wrap(_async_client(api, simulator), sdk.Policy(fanout="warm"))
    gate, release = client._shared.pipeline.fanout, threading.Event()
    simulator.hold(release)  # the leader stays in prefill until the follower waits for it
    system = shared_prefix(20_000)
    answers: list[Any] = []

    async def main() -> None:
        async def one(question: str) -> None:
            answers.append(await _call(client, api, system, question))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, "Part 1?")
            nursery.start_soon(one, "Part 2?")

            def started() -> None:
                until(lambda: gate.waiting() == 1 and simulator.held == 1)
                release.set()

            await trio.to_thread.run_sync(started)

    trio.run(main)
    assert len(answers) == 2 and gate.waiting() == 0
