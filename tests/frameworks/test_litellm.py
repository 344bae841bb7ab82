"""LiteLLM through `sdk.wrap`: `litellm.completion(..., client=sdk.wrap(openai.OpenAI(...)))`, the
parameter its docs give for your own OpenAI client, against the bare client's.

LiteLLM reaches the client below its resource methods (`client.post` / `with_raw_response`), so
these tests are what tells whether kvwise still sees the call. Its Anthropic route speaks HTTP
itself (no client to pass), so only the OpenAI route is here.
"""

from __future__ import annotations

import json
from typing import Any

import litellm
import openai
import pytest

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
from tests.frameworks.scripted import FINAL_REPLY, STRUCTURED, TOOL_ROUNDS, WEATHER_TOOL_NAME, weather

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": WEATHER_TOOL_NAME,
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
WEATHER_FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "weather",
        "strict": True,
        "schema": {
            "type": "object",
            "additionalProperties": False,
            "required": ["city", "conditions"],
            "properties": {"city": {"type": "string"}, "conditions": {"type": "string"}},
        },
    },
}
LOOP_LIMIT = 8


def completion(client: Any, messages: list[dict[str, Any]], model: str = "gpt-sim-1", **params: Any) -> Any:
    return litellm.completion(
        model=f"openai/{model}",
        messages=messages,
        client=client,
        api_base=str(client.base_url),
        api_key="test-key",
        **params,
    )


def cached(response: Any) -> int:
    details = response.usage.prompt_tokens_details
    return int(details.cached_tokens or 0) if details is not None else 0


def sim_client(sim: Any, max_retries: int | None = 0) -> Any:
    retries = {} if max_retries is None else {"max_retries": max_retries}
    return openai.OpenAI(base_url=sim.openai_base_url, api_key="test-key", **retries)


async def test_a_plain_completion_gives_the_bare_clients_answer(sim):
    def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        response = completion(
            client, [{"role": "system", "content": instructions}, {"role": "user", "content": QUESTION}]
        )
        return ScenarioOutcome(
            (response.choices[0].message.content, response.choices[0].finish_reason, response.usage.completion_tokens)
        )

    bare, wrapped = await run_pair(scenario, lambda: sim_client(sim), sim)
    assert bare.outcome.result[0] == FINAL_REPLY
    assert_conforms(bare, wrapped)


async def test_a_streamed_completion_yields_the_bare_clients_chunks_and_usage(sim):
    def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        stream = completion(
            client,
            [{"role": "system", "content": instructions}, {"role": "user", "content": QUESTION}],
            stream=True,
            stream_options={"include_usage": True},
        )
        events = []
        for chunk in stream:
            usage = getattr(chunk, "usage", None)
            events.append(
                (
                    tuple((choice.delta.content, choice.finish_reason) for choice in chunk.choices),
                    usage.completion_tokens if usage else None,
                )
            )
        return ScenarioOutcome("".join(text or "" for choices, _ in events for text, _ in choices), tuple(events))

    bare, wrapped = await run_pair(scenario, lambda: sim_client(sim), sim)
    assert bare.outcome.result == FINAL_REPLY
    assert any(tokens for _, tokens in bare.outcome.events)
    assert_conforms(bare, wrapped)


def tool_loop(client: Any, messages: list[dict[str, Any]], **params: Any) -> ScenarioOutcome:
    cached_tokens = []
    for _ in range(LOOP_LIMIT):
        response = completion(client, messages, tools=[WEATHER_TOOL], **params)
        cached_tokens.append(cached(response))
        message = response.choices[0].message
        if not message.tool_calls:
            return ScenarioOutcome(message.content, cached=tuple(cached_tokens))
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            result = weather(**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    raise AssertionError(f"the loop did not end in {LOOP_LIMIT} calls")


async def test_a_tool_loop_reads_at_least_the_bare_clients_cache(sim, earlier_conversation):
    def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        return tool_loop(
            client,
            [{"role": "system", "content": instructions}, {"role": "user", "content": f"{DOCUMENT}\n\n{QUESTION}"}],
        )

    bare, wrapped = await run_pair(scenario, lambda: sim_client(sim), sim, earlier_conversation=earlier_conversation)
    assert len(bare.requests) == TOOL_ROUNDS + 1 and bare.outcome.result == FINAL_REPLY
    assert_conforms(bare, wrapped)
    assert_cache_holds(bare, wrapped)


async def test_a_tool_loop_whose_id_changes_per_run_reads_the_stable_prefix_on_run_twos_first_call(sim):
    def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        return tool_loop(
            client,
            [{"role": "system", "content": instructions}, {"role": "user", "content": f"{DOCUMENT}\n\n{QUESTION}"}],
        )

    await assert_a_new_id_reads_the_stable_prefix(scenario, lambda: sim_client(sim), sim)


async def test_structured_output_parses_to_the_bare_clients_object(sim):
    def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        response = completion(
            client,
            [{"role": "system", "content": instructions}, {"role": "user", "content": QUESTION}],
            response_format=WEATHER_FORMAT,
        )
        return ScenarioOutcome(json.loads(response.choices[0].message.content))

    bare, wrapped = await run_pair(scenario, lambda: sim_client(sim), sim)
    assert bare.outcome.result == STRUCTURED
    assert_conforms(bare, wrapped)


async def test_a_completion_on_the_local_server_sets_no_limit_and_still_answers(local):
    """LiteLLM sends no output limit unless asked: through kvwise that must not become a 400."""

    def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        response = completion(
            client,
            [
                {"role": "system", "content": instructions},
                {"role": "user", "content": f"{LOCAL_DOCUMENT}\n\nWhat is prefill?"},
            ],
            model=LOCAL_MODEL,
            temperature=0,
        )
        return ScenarioOutcome(bool(response.choices[0].message.content), cached=(cached(response),))

    bare, wrapped = await run_pair(scenario, lambda: local.openai(sync=True), local)
    assert bare.outcome.result and wrapped.outcome.result
    assert_conforms(bare, wrapped, scripted=False)


@pytest.mark.parametrize("client_retries", [0, 1, None], ids=["max_retries=0", "max_retries=1", "client-default"])
async def test_a_429_is_tried_as_often_as_the_bare_client_tries_it(sim, client_retries):
    """`max_retries` is the caller's word: kvwise makes no more attempts than the bare client. LiteLLM
    sets its own `max_retries` (default 2) on the client it is given, so the caller's goes through it."""
    retries = {} if client_retries is None else {"max_retries": client_retries}

    def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        messages = [{"role": "system", "content": instructions}, {"role": "user", "content": QUESTION}]
        return ScenarioOutcome(completion(client, messages, **retries).choices[0].message.content)

    arm = lambda: sim.fail(429, times=10, headers=RETRY_AT_ONCE)  # noqa: E731
    bare, wrapped = await attempts_pair(scenario, lambda: sim_client(sim, client_retries), sim, arm)
    assert bare == (2 if client_retries is None else client_retries) + 1
    assert wrapped == bare
