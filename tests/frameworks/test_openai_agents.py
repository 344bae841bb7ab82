"""openai-agents through `sdk.wrap`: the client goes in as its docs say, `OpenAIChatCompletionsModel(
openai_client=...)` (and `OpenAIResponsesModel`), and every run matches the bare client's."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from agents import (
    Agent,
    FunctionToolResult,
    ModelSettings,
    RunContextWrapper,
    Runner,
    ToolsToFinalOutputResult,
    function_tool,
)
from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
from agents.models.openai_responses import OpenAIResponsesModel

from tests.frameworks.conformance import (
    DOCUMENT,
    LOCAL_DOCUMENT,
    LOCAL_MODEL,
    QUESTION,
    RETRY_AT_ONCE,
    ScenarioOutcome,
    assert_a_new_id_reads_the_stable_prefix,
    assert_cache_holds,
    assert_conforms,
    attempts_pair,
    run_pair,
)
from tests.frameworks.scripted import FINAL_REPLY, STRUCTURED, TOOL_ROUNDS, Weather, weather

SIM_MODEL = "gpt-sim-1"
MODELS = {"chat": OpenAIChatCompletionsModel, "responses": OpenAIResponsesModel}


@function_tool
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return weather(city)


def agent(client: Any, instructions: str, api: str, model: str = SIM_MODEL, **options: Any) -> Agent[Any]:
    return Agent(
        name="weather", instructions=instructions, model=MODELS[api](model=model, openai_client=client), **options
    )


def cached(result: Any) -> tuple[int, ...]:
    return tuple(response.usage.input_tokens_details.cached_tokens or 0 for response in result.raw_responses)


def sim_client(sim: Any, max_retries: int | None = 0) -> Any:
    retries = {} if max_retries is None else {"max_retries": max_retries}
    return openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key="test-key", **retries)


@pytest.fixture(params=sorted(MODELS))
def api(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_a_plain_run_gives_the_bare_clients_answer(sim, api):
    async def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        result = await Runner.run(agent(client, instructions, api), QUESTION)
        return ScenarioOutcome(result.final_output)

    bare, wrapped = await run_pair(scenario, lambda: sim_client(sim), sim)
    assert bare.outcome.result == FINAL_REPLY
    assert_conforms(bare, wrapped)


async def test_a_streamed_run_yields_the_bare_clients_events(sim, api):
    async def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        result = Runner.run_streamed(agent(client, instructions, api), QUESTION)
        events = []
        async for event in result.stream_events():
            data = getattr(event, "data", None)
            events.append((event.type, getattr(data, "type", None), getattr(data, "delta", None)))
        return ScenarioOutcome(result.final_output, tuple(events))

    bare, wrapped = await run_pair(scenario, lambda: sim_client(sim), sim)
    assert bare.outcome.result == FINAL_REPLY and bare.outcome.events
    assert_conforms(bare, wrapped)


async def test_a_tool_loop_reads_at_least_the_bare_clients_cache(sim, api, earlier_conversation):
    async def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        result = await Runner.run(agent(client, instructions, api, tools=[get_weather]), f"{DOCUMENT}\n\n{QUESTION}")
        return ScenarioOutcome(result.final_output, cached=cached(result))

    bare, wrapped = await run_pair(scenario, lambda: sim_client(sim), sim, earlier_conversation=earlier_conversation)
    assert len(bare.requests) == TOOL_ROUNDS + 1 and bare.outcome.result == FINAL_REPLY
    assert_conforms(bare, wrapped)
    assert_cache_holds(bare, wrapped)


async def test_a_tool_loop_whose_id_changes_per_run_reads_the_stable_prefix_on_run_twos_first_call(sim, api):
    async def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        result = await Runner.run(agent(client, instructions, api, tools=[get_weather]), f"{DOCUMENT}\n\n{QUESTION}")
        return ScenarioOutcome(result.final_output, cached=cached(result))

    await assert_a_new_id_reads_the_stable_prefix(scenario, lambda: sim_client(sim), sim)


async def test_structured_output_parses_to_the_bare_clients_object(sim, api):
    async def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        result = await Runner.run(agent(client, instructions, api, output_type=Weather), QUESTION)
        return ScenarioOutcome(result.final_output)

    bare, wrapped = await run_pair(scenario, lambda: sim_client(sim), sim)
    assert bare.outcome.result == Weather(**STRUCTURED)
    assert_conforms(bare, wrapped)


def stop_after(calls: int) -> Any:
    """A `tool_use_behavior` that lets the loop make `calls` model calls, each a forced tool call."""

    async def behaviour(context: RunContextWrapper[Any], results: list[FunctionToolResult]) -> ToolsToFinalOutputResult:
        done = context.usage.requests >= calls
        return ToolsToFinalOutputResult(
            is_final_output=done, final_output=str(context.usage.requests) if done else None
        )

    return behaviour


async def test_a_tool_loop_on_the_local_server_reads_at_least_the_bare_clients_prefix_cache(local):
    """Three forced tool calls (the server constrains them, so the tiny model always calls), no
    output limit set: what a framework sends by default must not turn into a 400."""

    async def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        settings = ModelSettings(tool_choice="get_weather", temperature=0)
        run = agent(
            client,
            instructions,
            "chat",
            model=LOCAL_MODEL,
            tools=[get_weather],
            model_settings=settings,
            reset_tool_choice=False,
            tool_use_behavior=stop_after(TOOL_ROUNDS + 1),
        )
        result = await Runner.run(run, f"{LOCAL_DOCUMENT}\n\n{QUESTION}")
        return ScenarioOutcome(result.final_output, cached=cached(result))

    bare, wrapped = await run_pair(scenario, local.openai, local)
    assert bare.outcome.result == wrapped.outcome.result == str(TOOL_ROUNDS + 1)
    assert_conforms(bare, wrapped, scripted=False)
    assert_cache_holds(bare, wrapped)


@pytest.mark.parametrize("client_retries", [0, 1, None], ids=["max_retries=0", "max_retries=1", "client-default"])
async def test_a_429_is_tried_as_often_as_the_bare_client_tries_it(sim, api, client_retries):
    """`max_retries` on the client is the caller's word: kvwise makes no more attempts than the bare client."""

    async def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        return ScenarioOutcome((await Runner.run(agent(client, instructions, api), QUESTION)).final_output)

    arm = lambda: sim.fail(429, times=10, headers=RETRY_AT_ONCE)  # noqa: E731
    bare, wrapped = await attempts_pair(scenario, lambda: sim_client(sim, client_retries), sim, arm)
    assert bare == (2 if client_retries is None else client_retries) + 1
    assert wrapped == bare
