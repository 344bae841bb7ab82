"""LlamaIndex (`llama-index-llms-openai`, which pins openai below 3) through `sdk.wrap`: the LLM given
its docs' `OpenAI(openai_client=..., async_openai_client=...)`, in a `FunctionAgent` whose own loop
runs the weather tool, against the same agent on the bare client. The agent calls the async client
alone: a call on the sync one (built by LlamaIndex, unwrapped) would show as a call without a span."""

from __future__ import annotations

from typing import Any

import openai
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.llms.openai import OpenAI

from tests.frameworks.conformance import DOCUMENT, QUESTION, ScenarioOutcome, run_pair
from tests.frameworks.pinned.reading import MODEL, ReadingSimulator, assert_tool_loop, get_weather
from tests.frameworks.scripted import FINAL_REPLY


async def test_a_function_agents_tool_loop_reads_at_least_the_bare_clients_cache(sim: ReadingSimulator) -> None:
    async def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        start = len(sim.reads)
        llm = OpenAI(
            model=MODEL, api_key="test-key", api_base=sim.openai_base_url, max_retries=0, async_openai_client=client
        )
        agent = FunctionAgent(tools=[get_weather], llm=llm, system_prompt=instructions)
        result = await agent.run(user_msg=f"{DOCUMENT}\n\n{QUESTION}")
        return ScenarioOutcome(str(result), cached=sim.reads_since(start))

    bare, wrapped = await run_pair(
        scenario, lambda: openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key="test-key", max_retries=0), sim
    )
    assert bare.outcome.result == FINAL_REPLY
    assert_tool_loop(bare, wrapped)
