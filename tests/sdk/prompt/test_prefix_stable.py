"""Prefix-stable rewriting: a tool loop re-sending its growing history reads the cache as the bare client's does.

An agent's instructions start with `Request ID: <uuid4>`, constant within a run, then come one
function tool and a ~1,900-token user message; each model call asks for the tool until the last,
and the app (as every framework does) re-sends the whole history with the tool's result appended.
The same script runs through the bare client and through `sdk.wrap`, real clients over loopback
against the simulator, whose caches count hits as the hosted APIs do (OpenAI: the longest seen
prefix in 128-token steps; Anthropic: at `cache_control` breakpoints, the bare script marking the
system prompt and the last block as pydantic-ai's `anthropic_cache` does).

- Every run (a new id each), its family's first included: the id moves on first sight (its shape
  and label say "this request"), to the note that ends the first user turn; each call from the
  second on reads everything the previous call sent, note included (the bare client's read), and
  from the second run on a run's first call reads the instructions and the user message the
  previous run's first call wrote, where the bare client, its id in front, reads nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import sdk
from sdk.prompt.canonical import NOTE_CLOSE, NOTE_OPEN
from sdk.prompt.moving import is_note
from tests.sdk.helpers import resolve

GPT, CLAUDE = "gpt-sim-1", "claude-sonnet-4-6"
CALLS = 4
OPENAI_STEP = 128  # the simulator's OpenAI cache counts hits in 128-token steps
WEATHER_ARGS = '{"city": "Paris"}'
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CHAT_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city.", "parameters": SCHEMA}}
]
RESPONSES_TOOLS = [
    {"type": "function", "name": "get_weather", "description": "Weather of a city.", "parameters": SCHEMA}
]
CLAUDE_TOOLS = [{"name": "get_weather", "description": "Weather of a city.", "input_schema": SCHEMA}]
INSTRUCTIONS = (
    "You are the travel desk's weather agent. Call get_weather for every city the user names, one call "
    "at a time, then answer in two sentences with the conditions and what to pack. Never guess."
)
USER = "Plan my week. " + " ".join(
    f"Day {day % 7 + 1}, stop {day}: the traveller visits a city, checks the forecast, and packs for it."
    for day in range(100)
)  # about 1,900 tokens as the simulator counts them

Usage = tuple[int, int]  # (cached input tokens, all input tokens) of one call
Run = Callable[[Any, Any, str], Awaitable[list[Usage]]]


def _instructions(request_id: str) -> str:
    return f"Request ID: {request_id}\n{INSTRUCTIONS}"


def _script(simulator: Any, step: int) -> None:
    """Every call but the last asks for the tool."""
    last = step == CALLS - 1
    simulator.tool_call, simulator.reply = (
        (None, "Rain all week: pack a coat.") if last else ("get_weather", WEATHER_ARGS)
    )


async def _chat_run(client: Any, simulator: Any, request_id: str) -> list[Usage]:
    messages: list[Any] = [{"role": "system", "content": _instructions(request_id)}, {"role": "user", "content": USER}]
    cached: list[Usage] = []
    for step in range(CALLS):
        _script(simulator, step)
        response = await resolve(client.chat.completions.create(model=GPT, messages=messages, tools=CHAT_TOOLS))
        cached.append((response.usage.prompt_tokens_details.cached_tokens or 0, response.usage.prompt_tokens))
        message = response.choices[0].message
        for call in message.tool_calls or ():
            messages = [
                *messages,
                message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": f"sunny, day {step}"},
            ]
    return cached


async def _responses_run(client: Any, simulator: Any, request_id: str) -> list[Usage]:
    items: list[Any] = [{"role": "user", "content": USER}]
    cached: list[Usage] = []
    for step in range(CALLS):
        _script(simulator, step)
        response = await resolve(
            client.responses.create(
                model=GPT, instructions=_instructions(request_id), input=items, tools=RESPONSES_TOOLS
            )
        )
        cached.append((response.usage.input_tokens_details.cached_tokens or 0, response.usage.input_tokens))
        for item in response.output:
            if item.type == "function_call":
                output = {"type": "function_call_output", "call_id": item.call_id, "output": f"sunny, day {step}"}
                items = [*items, item.model_dump(exclude_none=True), output]
    return cached


def _marked_last(messages: list[Any]) -> list[Any]:
    """The history with a breakpoint on the last block of the last turn (pydantic-ai's `anthropic_cache`)."""
    *head, last = messages
    content = last["content"] if isinstance(last["content"], list) else [{"type": "text", "text": last["content"]}]
    return [*head, {**last, "content": [*content[:-1], {**content[-1], "cache_control": {"type": "ephemeral"}}]}]


async def _anthropic_run(client: Any, simulator: Any, request_id: str) -> list[Usage]:
    system = [{"type": "text", "text": _instructions(request_id), "cache_control": {"type": "ephemeral"}}]
    messages: list[Any] = [{"role": "user", "content": USER}]
    cached: list[Usage] = []
    for step in range(CALLS):
        _script(simulator, step)
        message = await resolve(
            client.messages.create(
                model=CLAUDE, max_tokens=256, system=system, tools=CLAUDE_TOOLS, messages=_marked_last(messages)
            )
        )
        usage = message.usage
        read = usage.cache_read_input_tokens or 0
        cached.append((read, usage.input_tokens + read + (usage.cache_creation_input_tokens or 0)))
        uses = [block for block in message.content if block.type == "tool_use"]
        if uses:
            results = [{"type": "tool_result", "tool_use_id": use.id, "content": f"sunny, day {step}"} for use in uses]
            messages = [
                *messages,
                {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in message.content]},
                {"role": "user", "content": results},
            ]
    return cached


RUNS: dict[str, tuple[str, Run]] = {
    "chat": ("openai_client", _chat_run),
    "responses": ("openai_client", _responses_run),
    "anthropic": ("anthropic_client", _anthropic_run),
}


def _instructions_sent(api: str, body: dict[str, Any]) -> str:
    if api == "anthropic":
        return "".join(block["text"] for block in body["system"])
    return body["messages"][0]["content"] if api == "chat" else body["instructions"]


def _turns(api: str, body: dict[str, Any]) -> list[Any]:
    return body["input" if api == "responses" else "messages"]


def _first_user_turn(api: str, body: dict[str, Any]) -> Any:
    """The content of a request body's first user turn."""
    return next(turn["content"] for turn in _turns(api, body) if isinstance(turn, dict) and turn.get("role") == "user")


def _ends_with_note(api: str, content: Any) -> bool:
    """Whether a turn is the caller's text, then a context note (which the simulator's token counts
    include): Anthropic's block of its own, else after the text of a string or its one text part."""
    if api == "anthropic":
        return [block["text"] for block in content[:-1]] == [USER] and is_note(content[-1])
    text = content if isinstance(content, str) else content[-1]["text"]
    return text.startswith(f"{USER}\n\n{NOTE_OPEN}\n") and text.endswith(NOTE_CLOSE)


@pytest.mark.parametrize("api", list(RUNS))
async def test_a_tool_loop_through_a_wrapped_client_reads_at_least_the_bare_clients_cached_tokens(
    simulator, openai_client, anthropic_client, api
):
    fixture, run = RUNS[api]
    client = openai_client if fixture == "openai_client" else anthropic_client
    ids = [str(uuid.uuid4()) for _ in range(3)]
    simulator.reset()
    bare = [[cached for cached, _ in await run(client, simulator, request_id)] for request_id in ids]
    simulator.reset()
    wrapped_client = sdk.wrap(client)
    usages = [await run(wrapped_client, simulator, request_id) for request_id in ids]
    wrapped = [[cached for cached, _ in run_usages] for run_usages in usages]
    sent = [usage for run_usages in usages for usage in run_usages]
    bodies = [recorded.body for recorded in simulator.requests]
    assert all(cached >= 1024 for cached in bare[0][1:])  # the bare loop reads its own history back

    # Every run, the first included: the id moved on first sight, to the note that ends the first user turn;
    # no turn is added.
    for index in range(3 * CALLS):
        assert _instructions_sent(api, bodies[index]) == INSTRUCTIONS  # out of the instructions ...
        assert _ends_with_note(api, _first_user_turn(api, bodies[index]))  # ... and into the first user turn
        assert len(_turns(api, bodies[index])) == len(_turns(api, bodies[index % CALLS]))  # the first run's turns
        if index % CALLS:  # each call reads everything the previous one sent, note included
            floor = sent[index - 1][1] if api == "anthropic" else sent[index - 1][1] // OPENAI_STEP * OPENAI_STEP
            assert sent[index][0] >= floor, (index, wrapped, floor)
    for run_index in range(3):  # every run, calls 2..n: at least the bare client's cached tokens
        assert all(ours >= theirs for ours, theirs in zip(wrapped[run_index][1:], bare[run_index][1:])), (
            run_index,
            wrapped,
            bare,
        )
    # From the second run on, a run's first call reads the instructions and the user message before the note,
    # where the bare client reads nothing.
    assert bare[1][0] == bare[2][0] == 0 < min(wrapped[1][0], wrapped[2][0]), (wrapped, bare)
