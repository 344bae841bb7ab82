"""LlamaIndex (`llama-index-llms-openai`, which pins openai below 3) through `sdk.wrap`: the LLM given
its docs' `OpenAI(openai_client=..., async_openai_client=...)`, against the same LLM on the bare
client, once per client: a `FunctionAgent` (async) whose own loop runs the weather tool, and the
sync tool-calling loop of its docs (`chat_with_tools`, `get_tool_calls_from_response`). Each run
hands LlamaIndex one client: a call on the other (built by LlamaIndex, unwrapped) would show as a
call without a span."""

from __future__ import annotations

from typing import Any

import openai
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.llms import ChatMessage
from llama_index.core.tools import FunctionTool
from llama_index.llms.openai import OpenAI

from tests.frameworks.conformance import DOCUMENT, QUESTION, ScenarioOutcome, run_pair
from tests.frameworks.pinned.reading import LOOP_LIMIT, MODEL, ReadingSimulator, assert_tool_loop, get_weather
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


async def test_the_sync_tool_calling_loop_reads_at_least_the_bare_clients_cache(sim: ReadingSimulator) -> None:
    def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        start = len(sim.reads)
        llm = OpenAI(model=MODEL, api_key="test-key", api_base=sim.openai_base_url, max_retries=0, openai_client=client)
        tool = FunctionTool.from_defaults(get_weather)
        history = [
            ChatMessage(role="system", content=instructions),
            ChatMessage(role="user", content=f"{DOCUMENT}\n\n{QUESTION}"),
        ]
        for _ in range(LOOP_LIMIT):
            response = llm.chat_with_tools([tool], chat_history=history)
            calls = llm.get_tool_calls_from_response(response, error_on_no_tool_call=False)
            if not calls:
                return ScenarioOutcome(response.message.content, cached=sim.reads_since(start))
            history.append(response.message)
            history += [
                ChatMessage(
                    role="tool", content=str(tool(**call.tool_kwargs)), additional_kwargs={"tool_call_id": call.tool_id}
                )
                for call in calls
            ]
        raise AssertionError(f"the loop did not end in {LOOP_LIMIT} calls")

    bare, wrapped = await run_pair(
        scenario, lambda: openai.OpenAI(base_url=sim.openai_base_url, api_key="test-key", max_retries=0), sim
    )
    assert bare.outcome.result == FINAL_REPLY
    assert_tool_loop(bare, wrapped)
