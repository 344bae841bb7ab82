"""pydantic-ai through `sdk.wrap`: `OpenAIProvider(openai_client=...)` and
`AnthropicProvider(anthropic_client=...)`, as its docs pass your own client, each run against the bare client's."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse
from pydantic_ai.models.anthropic import AnthropicModel, AnthropicModelSettings
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.providers.openai import OpenAIProvider

from tests.frameworks.conformance import DOCUMENT, LOCAL_DOCUMENT, QUESTION, Outcome, assert_cache_holds, assert_conforms, run_pair
from tests.frameworks.conftest import LOCAL_MODEL
from tests.frameworks.scripted import FINAL_REPLY, STRUCTURED, TOOL_ROUNDS, weather

PROVIDERS = ("openai", "anthropic")


class Weather(BaseModel):
    city: str
    conditions: str


def model(client: Any, provider: str, name: str | None = None) -> Any:
    if provider == "openai":
        return OpenAIChatModel(name or "gpt-sim-1", provider=OpenAIProvider(openai_client=client))
    return AnthropicModel(name or "claude-sim-1", provider=AnthropicProvider(anthropic_client=client),
                          settings=AnthropicModelSettings(anthropic_cache=True))


def weather_agent(client: Any, instructions: str, provider: str, name: str | None = None, **options: Any) -> Agent[Any, Any]:
    agent: Agent[Any, Any] = Agent(model(client, provider, name), instructions=instructions, **options)

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        return weather(city)

    return agent


def cached(result: Any) -> tuple[int, ...]:
    return tuple(message.usage.cache_read_tokens for message in result.all_messages() if isinstance(message, ModelResponse))


def sim_client(sim: Any, provider: str) -> Any:
    if provider == "openai":
        return openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key="test-key", max_retries=0)
    return anthropic.AsyncAnthropic(base_url=sim.anthropic_base_url, api_key="test-key", max_retries=0)


@pytest.fixture(params=PROVIDERS)
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_a_plain_run_gives_the_bare_clients_answer(sim, provider):
    async def scenario(client: Any, instructions: str) -> Outcome:
        result = await Agent(model(client, provider), instructions=instructions).run(QUESTION)
        return Outcome((result.output, result.usage.output_tokens))

    bare, wrapped = await run_pair(scenario, lambda: sim_client(sim, provider), sim)
    assert bare.outcome.result[0] == FINAL_REPLY
    assert_conforms(bare, wrapped)


async def test_a_streamed_run_yields_the_bare_clients_deltas_and_usage(sim, provider):
    async def scenario(client: Any, instructions: str) -> Outcome:
        agent: Agent[Any, str] = Agent(model(client, provider), instructions=instructions)
        async with agent.run_stream(QUESTION) as result:
            deltas = tuple([delta async for delta in result.stream_text(delta=True)])
            usage = result.usage
        return Outcome(("".join(deltas), usage.output_tokens), deltas)

    bare, wrapped = await run_pair(scenario, lambda: sim_client(sim, provider), sim)
    assert bare.outcome.result[0] == FINAL_REPLY and bare.outcome.result[1] > 0
    assert_conforms(bare, wrapped)


async def test_a_tool_loop_reads_at_least_the_bare_clients_cache(sim, provider, earlier_conversation):
    async def scenario(client: Any, instructions: str) -> Outcome:
        result = await weather_agent(client, instructions, provider).run(f"{DOCUMENT}\n\n{QUESTION}")
        return Outcome(result.output, cached=cached(result))

    bare, wrapped = await run_pair(scenario, lambda: sim_client(sim, provider), sim, earlier_conversation=earlier_conversation)
    assert len(bare.requests) == TOOL_ROUNDS + 1 and bare.outcome.result == FINAL_REPLY
    assert_conforms(bare, wrapped)
    assert_cache_holds(bare, wrapped)


async def test_structured_output_parses_to_the_bare_clients_object(sim, provider):
    async def scenario(client: Any, instructions: str) -> Outcome:
        result = await Agent(model(client, provider), instructions=instructions, output_type=Weather).run(QUESTION)
        return Outcome(result.output)

    bare, wrapped = await run_pair(scenario, lambda: sim_client(sim, provider), sim)
    assert bare.outcome.result == Weather(**STRUCTURED)
    assert_conforms(bare, wrapped)


async def test_a_run_on_the_local_server_answers_as_the_bare_client_does(local, provider):
    """On the OpenAI path no output limit is set: a call the bare client gets answered must not
    turn into a 400 through kvwise. (On Anthropic pydantic-ai fills `max_tokens` itself, 16,384 here,
    which the bare client's call would not survive either: it is set to fit.)"""
    async def scenario(client: Any, instructions: str) -> Outcome:
        settings: dict[str, Any] = {"temperature": 0} if provider == "openai" else {"temperature": 0, "max_tokens": 64}
        agent: Agent[Any, str] = Agent(model(client, provider, LOCAL_MODEL), instructions=instructions,
                                       model_settings=settings)  # type: ignore[arg-type]
        result = await agent.run(f"{LOCAL_DOCUMENT}\n\nWhat is prefill?")
        return Outcome(bool(result.output), cached=cached(result))

    bare, wrapped = await run_pair(scenario, getattr(local, provider), local)
    assert bare.outcome.result and wrapped.outcome.result
    assert_conforms(bare, wrapped, scripted=False)
