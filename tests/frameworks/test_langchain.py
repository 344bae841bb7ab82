"""LangChain through `sdk.wrap`: `ChatOpenAI(client=..., root_client=...)` and `ChatAnthropic`, each
run against the bare client's.

`ChatOpenAI` takes your client as its fields `root_client` (what `parse` and the Responses paths
use) and `client` (its `chat.completions`). `ChatAnthropic` has no such field: it builds its client
in the cached property `_client`, so setting that attribute is the way to hand it yours.
A tool loop is the loop LangChain's docs write: invoke, run the tool calls, append, invoke again.
"""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest
from langchain_anthropic import ChatAnthropic
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

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
from tests.frameworks.scripted import FINAL_REPLY, STRUCTURED, TOOL_ROUNDS, WEATHER_TOOL_NAME, Weather, weather

PROVIDERS = ("openai", "anthropic")
LOOP_LIMIT = 8
LOOP_UNIT = "I keep saying this. "
LOOP_CAP = 256
LOCAL_TOOL_CALL_TOKENS = 96
"""More model calls than any scripted loop makes: a loop that does not end fails instead of hanging."""


@tool
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return weather(city)


def chat_model(client: Any, provider: str, name: str | None = None, **options: Any) -> Any:
    if provider == "openai":
        return ChatOpenAI(
            model=name or "gpt-sim-1",
            api_key="test-key",
            client=client.chat.completions,
            root_client=client,
            stream_usage=True,
            max_retries=0,
            **options,
        )
    llm = ChatAnthropic(model=name or "claude-sim-1", api_key="test-key", max_retries=0, **options)
    llm._client = client
    return llm


def cache_read(message: Any) -> int:
    details = (message.usage_metadata or {}).get("input_token_details") or {}
    return int(details.get("cache_read") or 0)


def tool_loop(llm: Any, messages: list[BaseMessage]) -> ScenarioOutcome:
    cached = []
    for _ in range(LOOP_LIMIT):
        reply = llm.invoke(messages)
        cached.append(cache_read(reply))
        messages.append(reply)
        if not reply.tool_calls:
            return ScenarioOutcome(reply.text, cached=tuple(cached))
        for call in reply.tool_calls:
            messages.append(ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"]))
    raise AssertionError(f"the loop did not end in {LOOP_LIMIT} calls")


def sim_client(sim: Any, provider: str, max_retries: int | None = 0) -> Any:
    retries = {} if max_retries is None else {"max_retries": max_retries}
    if provider == "openai":
        return openai.OpenAI(base_url=sim.openai_base_url, api_key="test-key", **retries)
    return anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key="test-key", **retries)


@pytest.fixture(params=PROVIDERS)
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_a_plain_invoke_gives_the_bare_clients_message(sim, provider):
    def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        reply = chat_model(client, provider).invoke([SystemMessage(instructions), HumanMessage(QUESTION)])
        usage = reply.usage_metadata or {}
        finish = reply.response_metadata.get("finish_reason") or reply.response_metadata.get("stop_reason")
        return ScenarioOutcome((reply.text, usage.get("output_tokens"), finish))

    bare, wrapped = await run_pair(scenario, lambda: sim_client(sim, provider), sim)
    assert bare.outcome.result[0] == FINAL_REPLY
    assert_conforms(bare, wrapped)


async def test_a_stream_yields_the_bare_clients_chunks_and_usage(sim, provider):
    def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        chunks = list(chat_model(client, provider).stream([SystemMessage(instructions), HumanMessage(QUESTION)]))
        events = tuple(
            (chunk.type, chunk.text, chunk.usage_metadata and chunk.usage_metadata["output_tokens"]) for chunk in chunks
        )
        return ScenarioOutcome("".join(chunk.text for chunk in chunks), events)

    bare, wrapped = await run_pair(scenario, lambda: sim_client(sim, provider), sim)
    assert bare.outcome.result == FINAL_REPLY
    assert any(usage for _, _, usage in bare.outcome.events)
    assert_conforms(bare, wrapped)


async def test_a_tool_loop_reads_at_least_the_bare_clients_cache(sim, provider, earlier_conversation):
    def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        llm = chat_model(client, provider).bind_tools([get_weather])
        return tool_loop(llm, [SystemMessage(instructions), HumanMessage(f"{DOCUMENT}\n\n{QUESTION}")])

    bare, wrapped = await run_pair(
        scenario, lambda: sim_client(sim, provider), sim, earlier_conversation=earlier_conversation
    )
    assert len(bare.requests) == TOOL_ROUNDS + 1 and bare.outcome.result == FINAL_REPLY
    assert_conforms(bare, wrapped)
    assert_cache_holds(bare, wrapped)


async def test_a_tool_loop_whose_id_changes_per_run_reads_the_stable_prefix_on_run_twos_first_call(sim, provider):
    def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        llm = chat_model(client, provider).bind_tools([get_weather])
        return tool_loop(llm, [SystemMessage(instructions), HumanMessage(f"{DOCUMENT}\n\n{QUESTION}")])

    await assert_a_new_id_reads_the_stable_prefix(scenario, lambda: sim_client(sim, provider), sim)


async def test_structured_output_parses_to_the_bare_clients_object(sim, provider):
    def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        llm = chat_model(client, provider).with_structured_output(Weather)
        return ScenarioOutcome(llm.invoke([SystemMessage(instructions), HumanMessage(QUESTION)]))

    bare, wrapped = await run_pair(scenario, lambda: sim_client(sim, provider), sim)
    assert bare.outcome.result == Weather(**STRUCTURED)
    assert_conforms(bare, wrapped)


async def test_a_forced_tool_loop_on_the_local_server_reads_at_least_the_bare_clients_prefix_cache(local, provider):
    """Three calls, each forced to call the tool (the server constrains it; a call takes ~60 tokens
    of the tiny model's output). A limit keeps a stray long argument from running to the context's
    end (the other frameworks' local runs set none)."""

    def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        llm = chat_model(client, provider, LOCAL_MODEL, temperature=0, max_tokens=LOCAL_TOOL_CALL_TOKENS)
        llm = llm.bind_tools([get_weather], tool_choice=WEATHER_TOOL_NAME)
        messages: list[BaseMessage] = [SystemMessage(instructions), HumanMessage(f"{LOCAL_DOCUMENT}\n\n{QUESTION}")]
        cached, names = [], []
        for _ in range(TOOL_ROUNDS + 1):
            reply = llm.invoke(messages)
            cached.append(cache_read(reply))
            names += [call["name"] for call in reply.tool_calls]
            results = [
                ToolMessage(weather(str(call["args"].get("city"))), tool_call_id=call["id"])
                for call in reply.tool_calls
            ]
            messages += [reply, *results]
        return ScenarioOutcome(tuple(names), cached=tuple(cached))

    bare, wrapped = await run_pair(scenario, lambda: getattr(local, provider)(sync=True), local)
    assert bare.outcome.result == wrapped.outcome.result == (WEATHER_TOOL_NAME,) * (TOOL_ROUNDS + 1)
    assert_conforms(bare, wrapped, scripted=False)
    assert_cache_holds(bare, wrapped)


@pytest.mark.parametrize("client_retries", [0, 1, None], ids=["max_retries=0", "max_retries=1", "client-default"])
async def test_a_429_is_tried_as_often_as_the_bare_client_tries_it(sim, provider, client_retries):
    """`max_retries` on the client is the caller's word: kvwise makes no more attempts than the bare client."""

    def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        return ScenarioOutcome(
            chat_model(client, provider).invoke([SystemMessage(instructions), HumanMessage(QUESTION)]).text
        )

    arm = lambda: sim.fail(429, times=10, headers=RETRY_AT_ONCE)  # noqa: E731
    bare, wrapped = await attempts_pair(scenario, lambda: sim_client(sim, provider, client_retries), sim, arm)
    assert bare == (2 if client_retries is None else client_retries) + 1
    assert wrapped == bare


async def test_a_stream_the_loop_guard_cuts_still_reports_usage_and_a_length_stop(sim):
    """ChatOpenAI asks for stream usage (`stream_usage=True`): a reply the guard cuts short still
    ends with the usage chunk, so `usage_metadata` counts the tokens sent."""

    def scenario(client: Any, instructions: str) -> ScenarioOutcome:
        chunks = list(
            chat_model(client, "openai", max_tokens=LOOP_CAP).stream(
                [SystemMessage(instructions), HumanMessage(QUESTION)]
            )
        )
        whole = chunks[0]
        for chunk in chunks[1:]:
            whole += chunk
        usage = whole.usage_metadata or {}
        return ScenarioOutcome((whole.text, whole.response_metadata.get("finish_reason"), usage.get("output_tokens")))

    bare, wrapped = await run_pair(scenario, lambda: sim_client(sim, "openai"), sim, arm=lambda: sim.loop(LOOP_UNIT))
    plain_text, plain_finish, plain_tokens = bare.outcome.result
    text, finish, tokens = wrapped.outcome.result
    assert plain_finish == finish == "length"
    assert plain_text.startswith(text) and tokens is not None and 1 < tokens < plain_tokens == LOOP_CAP
    assert_same_bodies(bare, wrapped, sdk.Policy())
    assert_one_span_per_call(wrapped, 1)
