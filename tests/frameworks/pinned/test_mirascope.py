"""Mirascope (which pins anthropic below 1.0) through `sdk.wrap`: its providers build their own clients
and take none, so the wrapped client goes in the `client` attribute its `BaseProvider` declares (the
one every sync call of `AnthropicProvider` goes through; async calls go through its `async_client`),
on a provider registered for `anthropic/`; its tool loop (`execute_tools`, `resume`) runs the
weather tool, against the same loop on the bare client.

The tool is `strict=False`: a strict tool sends the call through a second, beta provider whose
client is a private attribute."""

from __future__ import annotations

from typing import Any

import anthropic
from mirascope import llm
from mirascope.llm.providers.anthropic.provider import AnthropicProvider

from tests.frameworks.conformance import DOCUMENT, QUESTION, ScenarioOutcome, run_pair
from tests.frameworks.pinned.reading import ANTHROPIC_MODEL, LOOP_LIMIT, ReadingSimulator, assert_tool_loop, get_weather
from tests.frameworks.scripted import FINAL_REPLY, TOOL_ROUNDS, weather


async def test_a_tool_loop_reads_at_least_the_bare_clients_cache(sim: ReadingSimulator) -> None:
    def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        start = len(sim.reads)
        provider = AnthropicProvider(api_key="test-key", base_url=sim.anthropic_base_url)
        provider.client = client
        llm.register_provider(provider, scope="anthropic/")
        response = llm.Model(f"anthropic/{ANTHROPIC_MODEL}").call(
            [llm.messages.system(instructions), llm.messages.user(f"{DOCUMENT}\n\n{QUESTION}")],
            tools=[llm.tool(strict=False)(get_weather)],
        )
        for _ in range(LOOP_LIMIT):
            if not response.tool_calls:
                return ScenarioOutcome(response.text().strip(), cached=sim.reads_since(start))
            response = response.resume(response.execute_tools())
        raise AssertionError(f"the loop did not end in {LOOP_LIMIT} calls")

    bare, wrapped = await run_pair(
        scenario, lambda: anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key="test-key", max_retries=0), sim
    )
    assert bare.outcome.result == FINAL_REPLY and len(bare.requests) == TOOL_ROUNDS + 1
    assert_tool_loop(bare, wrapped)


async def test_an_async_tool_loop_through_the_async_client_attribute_reads_at_least_the_bare_clients_cache(
    sim: ReadingSimulator,
) -> None:
    async def get_weather(city: str) -> str:  # an async call takes async tools
        """Get the current weather in a city."""
        return weather(city)

    async def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        start = len(sim.reads)
        provider = AnthropicProvider(api_key="test-key", base_url=sim.anthropic_base_url)
        provider.async_client = client
        llm.register_provider(provider, scope="anthropic/")
        response = await llm.Model(f"anthropic/{ANTHROPIC_MODEL}").call_async(
            [llm.messages.system(instructions), llm.messages.user(f"{DOCUMENT}\n\n{QUESTION}")],
            tools=[llm.tool(strict=False)(get_weather)],
        )
        for _ in range(LOOP_LIMIT):
            if not response.tool_calls:
                return ScenarioOutcome(response.text().strip(), cached=sim.reads_since(start))
            response = await response.resume(await response.execute_tools())
        raise AssertionError(f"the loop did not end in {LOOP_LIMIT} calls")

    bare, wrapped = await run_pair(
        scenario,
        lambda: anthropic.AsyncAnthropic(base_url=sim.anthropic_base_url, api_key="test-key", max_retries=0),
        sim,
    )
    assert bare.outcome.result == FINAL_REPLY and len(bare.requests) == TOOL_ROUNDS + 1
    assert_tool_loop(bare, wrapped)
