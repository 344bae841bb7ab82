"""pydantic-ai through `sdk.wrap`: `OpenAIProvider(openai_client=...)` and
`AnthropicProvider(anthropic_client=...)`, as its docs pass your own client, each run against the bare client's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest
from pydantic_ai import Agent, ModelSettings, RunContext, ToolOutput
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelResponse
from pydantic_ai.models.anthropic import AnthropicModel, AnthropicModelSettings
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.providers.openai import OpenAIProvider

import sdk
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
    assert_one_span_per_call,
    assert_same_bodies,
    attempts_pair,
    run_pair,
)
from tests.frameworks.scripted import FINAL_REPLY, STRUCTURED, TOOL_ROUNDS, Weather, weather

PROVIDERS = ("openai", "anthropic")
LOOP_UNIT = "I keep saying this. "
LOOP_CAP = 256
LOCAL_TOOL_CALL_TOKENS = 96
"""Room for a whole forced call of the tiny model (~60 tokens)."""
LOCAL_HALF_DOCUMENT = LOCAL_DOCUMENT[: len(LOCAL_DOCUMENT) // 2]
"""Four calls with two tools' listings and three results fit the bundled model's 2,048 tokens with this."""


def model(client: Any, provider: str, name: str | None = None) -> Any:
    if provider == "openai":
        return OpenAIChatModel(name or "gpt-sim-1", provider=OpenAIProvider(openai_client=client))
    return AnthropicModel(
        name or "claude-sim-1",
        provider=AnthropicProvider(anthropic_client=client),
        settings=AnthropicModelSettings(anthropic_cache=True),
    )


def weather_agent(
    client: Any, instructions: str, provider: str, name: str | None = None, **options: Any
) -> Agent[Any, Any]:
    agent: Agent[Any, Any] = Agent(model(client, provider, name), instructions=instructions, **options)

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        return weather(city)

    return agent


def cached(result: Any) -> tuple[int, ...]:
    return tuple(
        message.usage.cache_read_tokens for message in result.all_messages() if isinstance(message, ModelResponse)
    )


def sim_client(sim: Any, provider: str, max_retries: int | None = 0) -> Any:
    retries = {} if max_retries is None else {"max_retries": max_retries}
    if provider == "openai":
        return openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key="test-key", **retries)
    return anthropic.AsyncAnthropic(base_url=sim.anthropic_base_url, api_key="test-key", **retries)


@pytest.fixture(params=PROVIDERS)
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_a_plain_run_gives_the_bare_clients_answer(sim, provider):
    async def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        result = await Agent(model(client, provider), instructions=instructions).run(QUESTION)
        return ScenarioOutcome((result.output, result.usage.output_tokens))

    bare, wrapped = await run_pair(scenario, lambda: sim_client(sim, provider), sim)
    assert bare.outcome.result[0] == FINAL_REPLY
    assert_conforms(bare, wrapped)


async def test_a_streamed_run_yields_the_bare_clients_deltas_and_usage(sim, provider):
    async def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        agent: Agent[Any, str] = Agent(model(client, provider), instructions=instructions)
        async with agent.run_stream(QUESTION) as result:
            deltas = tuple([delta async for delta in result.stream_text(delta=True)])
            usage = result.usage
        return ScenarioOutcome(("".join(deltas), usage.output_tokens), deltas)

    bare, wrapped = await run_pair(scenario, lambda: sim_client(sim, provider), sim)
    assert bare.outcome.result[0] == FINAL_REPLY and bare.outcome.result[1] > 0
    assert_conforms(bare, wrapped)


async def test_a_tool_loop_reads_at_least_the_bare_clients_cache(sim, provider, earlier_conversation):
    async def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        result = await weather_agent(client, instructions, provider).run(f"{DOCUMENT}\n\n{QUESTION}")
        return ScenarioOutcome(result.output, cached=cached(result))

    bare, wrapped = await run_pair(
        scenario, lambda: sim_client(sim, provider), sim, earlier_conversation=earlier_conversation
    )
    assert len(bare.requests) == TOOL_ROUNDS + 1 and bare.outcome.result == FINAL_REPLY
    assert_conforms(bare, wrapped)
    assert_cache_holds(bare, wrapped)


async def test_a_tool_loop_whose_id_changes_per_run_reads_the_stable_prefix_on_run_twos_first_call(sim, provider):
    async def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        result = await weather_agent(client, instructions, provider).run(f"{DOCUMENT}\n\n{QUESTION}")
        return ScenarioOutcome(result.output, cached=cached(result))

    await assert_a_new_id_reads_the_stable_prefix(scenario, lambda: sim_client(sim, provider), sim)


async def test_structured_output_parses_to_the_bare_clients_object(sim, provider):
    async def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        result = await Agent(model(client, provider), instructions=instructions, output_type=Weather).run(QUESTION)
        return ScenarioOutcome(result.output)

    bare, wrapped = await run_pair(scenario, lambda: sim_client(sim, provider), sim)
    assert bare.outcome.result == Weather(**STRUCTURED)
    assert_conforms(bare, wrapped)


async def test_a_run_on_the_local_server_answers_as_the_bare_client_does(local, provider):
    """On the OpenAI path no output limit is set: a call the bare client gets answered must not
    turn into a 400 through kvwise. (On Anthropic pydantic-ai fills `max_tokens` itself, 16,384 here,
    which the bare client's call would not survive either: it is set to fit.)"""

    async def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        settings: dict[str, Any] = {"temperature": 0} if provider == "openai" else {"temperature": 0, "max_tokens": 64}
        agent: Agent[Any, str] = Agent(
            model(client, provider, LOCAL_MODEL), instructions=instructions, model_settings=settings
        )  # type: ignore[arg-type]
        result = await agent.run(f"{LOCAL_DOCUMENT}\n\nWhat is prefill?")
        return ScenarioOutcome(bool(result.output), cached=cached(result))

    bare, wrapped = await run_pair(scenario, getattr(local, provider), local)
    assert bare.outcome.result and wrapped.outcome.result
    assert_conforms(bare, wrapped, scripted=False)


@pytest.mark.parametrize("client_retries", [0, 1, None], ids=["max_retries=0", "max_retries=1", "client-default"])
async def test_a_429_is_tried_as_often_as_the_bare_client_tries_it(sim, provider, client_retries):
    """`max_retries` on the client is the caller's word: kvwise makes no more attempts than the bare client."""

    async def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        return ScenarioOutcome((await Agent(model(client, provider), instructions=instructions).run(QUESTION)).output)

    arm = lambda: sim.fail(429, times=10, headers=RETRY_AT_ONCE)  # noqa: E731
    bare, wrapped = await attempts_pair(scenario, lambda: sim_client(sim, provider, client_retries), sim, arm)
    assert bare == (2 if client_retries is None else client_retries) + 1
    assert wrapped == bare


async def test_max_retries_in_the_model_settings_is_tried_as_the_bare_client_tries_it(sim, provider):
    """pydantic-ai's `max_retries: 0` reaches the client through `with_options(max_retries=0)`."""

    async def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        agent: Agent[Any, str] = Agent(
            model(client, provider), instructions=instructions, model_settings={"max_retries": 0}
        )
        return ScenarioOutcome((await agent.run(QUESTION)).output)

    arm = lambda: sim.fail(429, times=10, headers=RETRY_AT_ONCE)  # noqa: E731
    bare, wrapped = await attempts_pair(scenario, lambda: sim_client(sim, provider, None), sim, arm)
    assert bare == 1
    assert wrapped == bare


async def test_a_stream_the_loop_guard_cuts_ends_as_a_length_stop_with_its_usage(sim, provider):
    """The guard cuts a looping reply short; pydantic-ai still sees the provider's own length stop
    (on Anthropic through the beta stream's event classes) and the output tokens it was sent."""

    async def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        agent: Agent[Any, str] = Agent(
            model(client, provider), instructions=instructions, model_settings={"max_tokens": LOOP_CAP}
        )
        async with agent.run_stream(QUESTION) as result:
            text = "".join([delta async for delta in result.stream_text(delta=True)])
        return ScenarioOutcome((text, result.response.finish_reason, result.usage.output_tokens))

    bare, wrapped = await run_pair(scenario, lambda: sim_client(sim, provider), sim, arm=lambda: sim.loop(LOOP_UNIT))
    plain_text, plain_finish, plain_tokens = bare.outcome.result
    text, finish, tokens = wrapped.outcome.result
    assert plain_finish == finish == "length"
    assert plain_text.startswith(text) and 1 < tokens < plain_tokens == LOOP_CAP
    assert_same_bodies(bare, wrapped, sdk.Policy())
    assert_one_span_per_call(wrapped, 1)


@dataclass
class ForcedToolSteps(AbstractCapability[Any]):
    """Forces the weather tool on the run's first `steps` model calls, then the output tool: how
    pydantic-ai varies `tool_choice` per step (a capability's settings callable). Both tools are
    offered on every call, as an agent with a tool output offers them; the output tool takes the
    weather tool's arguments, which the tiny model fills reliably under the server's constraint."""

    steps: int

    def get_model_settings(self) -> Any:
        def per_step(ctx: RunContext[Any]) -> ModelSettings:
            return {"tool_choice": ["get_weather"] if ctx.run_step <= self.steps else ["final_result"]}

        return per_step


async def test_a_tool_loop_on_the_local_server_reads_at_least_the_bare_clients_prefix_cache(local, provider):
    """Three forced tool calls (the server constrains them, so the tiny model always calls), then the
    forced structured answer: four calls of pydantic-ai's own agent loop."""

    async def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        settings: dict[str, Any] = {"temperature": 0, "max_tokens": LOCAL_TOOL_CALL_TOKENS}
        agent = weather_agent(
            client,
            instructions,
            provider,
            LOCAL_MODEL,
            model_settings=settings,
            output_type=ToolOutput(weather, name="final_result"),
            capabilities=[ForcedToolSteps(TOOL_ROUNDS + 1)],
        )
        result = await agent.run(f"{LOCAL_HALF_DOCUMENT}\n\n{QUESTION}")
        return ScenarioOutcome(isinstance(result.output, str), cached=cached(result))

    bare, wrapped = await run_pair(scenario, getattr(local, provider), local)
    assert len(bare.requests) == len(wrapped.requests) == TOOL_ROUNDS + 2
    assert_conforms(bare, wrapped, scripted=False)
    assert_cache_holds(bare, wrapped)
