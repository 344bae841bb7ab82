"""Google ADK (which pins openai below 3) through `sdk.wrap`, on each route that takes a client: its
OpenAI models' `client` field (`OpenAILlm` on Chat Completions, `OpenAIResponsesLlm` on Responses)
and its LiteLLM route, where `LiteLlm(model=..., client=...)` passes the parameters it does not know
to LiteLLM's `acompletion`, whose `client` is the caller's own OpenAI client. Each is the model of an
`LlmAgent` whose runner loop runs the weather tool, against the same agent on the bare client."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest
from google.adk.agents import LlmAgent
from google.adk.integrations.openai import OpenAILlm, OpenAIResponsesLlm
from google.adk.models.base_llm import BaseLlm
from google.adk.models.lite_llm import LiteLlm
from google.adk.runners import InMemoryRunner
from google.genai import types

from tests.frameworks.conformance import DOCUMENT, QUESTION, ScenarioOutcome, run_pair
from tests.frameworks.pinned.reading import MODEL, ReadingSimulator, assert_tool_loop, get_weather
from tests.frameworks.scripted import FINAL_REPLY

APP, USER = "kvwise", "user"
ROUTES: dict[str, Callable[[Any, str], BaseLlm]] = {
    "OpenAILlm": lambda client, base_url: OpenAILlm(model=MODEL, client=client),
    "OpenAIResponsesLlm": lambda client, base_url: OpenAIResponsesLlm(model=MODEL, client=client),
    "LiteLlm": lambda client, base_url: LiteLlm(
        model=f"openai/{MODEL}", client=client, api_base=base_url, api_key="test-key"
    ),
}


@pytest.mark.parametrize("route", ROUTES)
async def test_an_agents_tool_loop_reads_at_least_the_bare_clients_cache(sim: ReadingSimulator, route: str) -> None:
    async def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        start = len(sim.reads)
        agent = LlmAgent(
            name="forecaster",
            model=ROUTES[route](client, sim.openai_base_url),
            instruction=instructions,
            tools=[get_weather],
        )
        runner = InMemoryRunner(agent=agent, app_name=APP)
        session = await runner.session_service.create_session(app_name=APP, user_id=USER)
        question = types.Content(role="user", parts=[types.Part(text=f"{DOCUMENT}\n\n{QUESTION}")])
        texts = [
            part.text
            async for event in runner.run_async(user_id=USER, session_id=session.id, new_message=question)
            if event.content and event.is_final_response()
            for part in event.content.parts or ()
            if part.text
        ]
        return ScenarioOutcome("".join(texts).strip(), cached=sim.reads_since(start))

    bare, wrapped = await run_pair(
        scenario, lambda: openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key="test-key", max_retries=0), sim
    )
    assert bare.outcome.result == FINAL_REPLY
    assert_tool_loop(bare, wrapped)
