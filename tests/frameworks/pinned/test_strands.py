"""Strands (which pins openai below 3 and anthropic below 1.0) through `sdk.wrap`: the client its docs
name for a pre-built client, `OpenAIModel(client=...)`, in an `Agent` whose own loop runs the weather
tool, against the same agent on the bare client. (Its `AnthropicModel` builds its own client from
`client_args` and takes none.)"""

from __future__ import annotations

from typing import Any

import openai
from strands import Agent, tool
from strands.models.openai import OpenAIModel

from tests.frameworks.conformance import DOCUMENT, QUESTION, ScenarioOutcome, run_pair
from tests.frameworks.pinned.reading import MODEL, ReadingSimulator, assert_tool_loop, get_weather
from tests.frameworks.scripted import FINAL_REPLY


async def test_an_agents_tool_loop_reads_at_least_the_bare_clients_cache(sim: ReadingSimulator) -> None:
    async def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        start = len(sim.reads)
        agent = Agent(
            model=OpenAIModel(client=client, model_id=MODEL),
            tools=[tool(get_weather)],
            system_prompt=instructions,
            callback_handler=None,
        )
        result = await agent.invoke_async(f"{DOCUMENT}\n\n{QUESTION}")
        return ScenarioOutcome(str(result).strip(), cached=sim.reads_since(start))

    bare, wrapped = await run_pair(
        scenario, lambda: openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key="test-key", max_retries=0), sim
    )
    assert bare.outcome.result == FINAL_REPLY
    assert_tool_loop(bare, wrapped)
