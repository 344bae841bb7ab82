"""CrewAI (which pins openai below 3 and anthropic below 1.0) through `sdk.wrap`, on its LiteLLM route:
`LLM(model=..., is_litellm=True, client=...)` hands LiteLLM the client as LiteLLM's docs say
(CrewAI passes the parameters it does not know to LiteLLM's `completion`), in an `Agent` whose own
loop runs the weather tool, against the same agent on the bare client.

CrewAI writes its own system prompt around the agent's role and backstory, so the request ID (on a
line of its own in the backstory) does not open it: the check that the bare run's instructions start
with the ID is the one left out here."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
from crewai import LLM, Agent
from crewai.tools import tool

from tests.frameworks.conformance import DOCUMENT, QUESTION, ScenarioOutcome, run_pair
from tests.frameworks.pinned.reading import MODEL, ReadingSimulator, assert_tool_loop, get_weather
from tests.frameworks.scripted import FINAL_REPLY


async def test_an_agents_tool_loop_on_the_litellm_route_reads_at_least_the_bare_clients_cache(
    sim: ReadingSimulator,
) -> None:
    async def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        start = len(sim.reads)
        llm = LLM(
            model=f"openai/{MODEL}", is_litellm=True, client=client, base_url=sim.openai_base_url, api_key="test-key"
        )
        agent = Agent(
            role="a forecaster",
            goal="Answer the question.",
            backstory=f"\n{instructions}",
            llm=llm,
            tools=[tool("get_weather")(get_weather)],
            verbose=False,
        )
        result = await asyncio.to_thread(agent.kickoff, f"{DOCUMENT}\n\n{QUESTION}")  # in a running loop it is async
        return ScenarioOutcome(result.raw.strip(), cached=sim.reads_since(start))

    bare, wrapped = await run_pair(
        scenario, lambda: openai.OpenAI(base_url=sim.openai_base_url, api_key="test-key", max_retries=0), sim
    )
    assert bare.outcome.result == FINAL_REPLY
    assert_tool_loop(bare, wrapped, id_first=False)
