"""Retries as the caller asked, where frameworks ask: openai-agents' runner retries (it sends through
`with_options(max_retries=0)` while its own loop retries) and pydantic-ai's `max_retries` setting
(`with_options(max_retries=n)` per request) make as many attempts wrapped as bare against a 429."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any

import openai
import pytest

import sdk

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")  # no export of the runner's traces to OpenAI

USER = "What is prefill?"


async def _attempts(
    simulator: Any, run: Callable[[Any], Awaitable[Any]], wrap: bool, error: type[Exception] = openai.RateLimitError
) -> int:
    """The requests one run makes against a server answering 429 to every one of them (the run
    ending in `error`, the framework's own for a rate limit)."""
    client = openai.AsyncOpenAI(base_url=simulator.openai_base_url, api_key="test-key")
    simulator.fail(status=429, times=50, headers={"retry-after-ms": "5"})
    with pytest.raises(error):
        await run(sdk.wrap(client) if wrap else client)
    made = len(simulator.requests)
    simulator.reset()
    await client.close()
    return made


async def test_openai_agents_runner_retries_make_as_many_attempts_wrapped_as_bare(simulator):
    agents = pytest.importorskip("agents")
    from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
    from agents.retry import ModelRetrySettings, retry_policies

    retry = ModelRetrySettings(
        max_retries=4,
        backoff={"initial_delay": 0.001, "max_delay": 0.001, "jitter": False},
        policy=retry_policies.http_status([429]),
    )

    async def run(client: Any) -> Any:
        model = OpenAIChatCompletionsModel(model="gpt-sim-1", openai_client=client)
        agent = agents.Agent(
            name="a", instructions="Be brief.", model=model, model_settings=agents.ModelSettings(retry=retry)
        )
        return await agents.Runner.run(agent, USER)

    bare = await _attempts(simulator, run, wrap=False)
    assert await _attempts(simulator, run, wrap=True) == bare


@pytest.mark.parametrize("max_retries", [0, 1])
async def test_pydantic_ai_max_retries_makes_as_many_attempts_wrapped_as_bare(simulator, max_retries):
    pydantic_ai = pytest.importorskip("pydantic_ai")
    from pydantic_ai.exceptions import ModelHTTPError
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    async def run(client: Any) -> Any:
        agent = pydantic_ai.Agent(OpenAIChatModel("gpt-sim-1", provider=OpenAIProvider(openai_client=client)))
        return await agent.run(USER, model_settings={"max_retries": max_retries})

    bare = await _attempts(simulator, run, wrap=False, error=ModelHTTPError)
    assert bare == max_retries + 1
    assert await _attempts(simulator, run, wrap=True, error=ModelHTTPError) == bare
