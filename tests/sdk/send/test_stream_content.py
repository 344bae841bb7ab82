"""Any content counts: a stream whose connection breaks after tool-call arguments or thinking reached
the caller ends in `sdk.StreamTruncated`; one that breaks before any content too, after its header
events reached the caller once. Neither is sent again (its 200 means the provider accepted it). A
body that ends cleanly there ends the stream, as the bare client ends it, with the same content."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import openai
import pytest

import sdk
from tests.sdk.helpers import connection_errors, resolve
from tests.sdk.send.test_fault_matrix import events_of, managed_events_of

USER = [{"role": "user", "content": "What is the weather in Paris?"}]
CLAUDE = "claude-sonnet-4-6"
ARGUMENTS = '{"city": "Paris", "unit": "celsius", "days": 3}'
THOUGHT = "The user wants the weather in Paris, so I should call the weather tool with the city."
CUT_AT = 4  # content tokens sent before the connection drops: inside the arguments or the thinking


def _chat_tool_arguments(event: Any) -> str:
    calls = event.choices[0].delta.tool_calls if event.choices else None
    return "".join(call.function.arguments or "" for call in calls or ())


def _chat_reasoning(event: Any) -> str:
    extra = event.choices[0].delta.model_extra if event.choices else None
    return (extra or {}).get("reasoning_content") or ""


def _messages_delta(kind: str, field: str) -> Callable[[Any], str]:
    def read(event: Any) -> str:
        return getattr(event.delta, field) if event.type == "content_block_delta" and event.delta.type == kind else ""

    return read


def _responses_arguments(event: Any) -> str:
    return event.delta if event.type == "response.function_call_arguments.delta" else ""


@dataclass(frozen=True, slots=True)
class Shape:
    """One kind of non-text content on one API: how to ask for it, script it, and read it back."""

    client_fixture: str
    create: Callable[[Any], Any]
    tool: str | None
    thinking: str
    content: Callable[[Any], str]  # the content an event carries
    whole: str  # everything the answer's content adds up to


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
SHAPES = {
    "chat tool-call arguments": Shape(
        "openai_client",
        lambda c: c.chat.completions.create(model="m", messages=USER, tools=TOOLS, stream=True),
        "get_weather",
        "",
        _chat_tool_arguments,
        ARGUMENTS,
    ),
    "chat reasoning_content": Shape(
        "openai_client",
        lambda c: c.chat.completions.create(model="m", messages=USER, stream=True),
        None,
        THOUGHT,
        _chat_reasoning,
        THOUGHT,
    ),
    "messages tool_use input": Shape(
        "anthropic_client",
        lambda c: c.messages.create(
            model=CLAUDE,
            max_tokens=500,
            messages=USER,
            stream=True,
            tools=[{"name": "get_weather", "input_schema": {"type": "object"}}],
        ),
        "get_weather",
        "",
        _messages_delta("input_json_delta", "partial_json"),
        ARGUMENTS,
    ),
    "messages thinking": Shape(
        "anthropic_client",
        lambda c: c.messages.create(
            model=CLAUDE,
            max_tokens=4000,
            messages=USER,
            stream=True,
            thinking={"type": "enabled", "budget_tokens": 2000},
        ),
        None,
        THOUGHT,
        _messages_delta("thinking_delta", "thinking"),
        THOUGHT,
    ),
    "responses function-call arguments": Shape(
        "openai_client",
        lambda c: c.responses.create(
            model="gpt-5.4",
            input="go",
            stream=True,
            tools=[{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
        ),
        "get_weather",
        "",
        _responses_arguments,
        ARGUMENTS,
    ),
}


def _script(simulator: Any, shape: Shape) -> None:
    simulator.tool_call, simulator.thinking = shape.tool, shape.thinking
    simulator.reply = ARGUMENTS if shape.tool else "It is sunny in Paris."


async def _bare_then_wrapped(simulator: Any, client: Any, create: Callable[[Any], Any], at: int) -> list[list[Any]]:
    """The events of `create`'s stream whose body ends cleanly after `at` content tokens, from the bare
    client, then the wrapped one; each sent once and ended without an error."""
    answers = []
    for candidate in (client, sdk.wrap(client)):
        simulator.reset()
        simulator.cut_stream_after(at, mode="end")
        answers.append([event async for event in events_of(await resolve(create(candidate)))])
        assert len(simulator.requests) == 1
    return answers


@pytest.mark.parametrize("name", list(SHAPES))
async def test_a_body_that_ends_cleanly_after_non_text_content_gives_the_bare_clients_content(
    simulator: Any, request: pytest.FixtureRequest, mode: str, name: str
) -> None:
    shape = SHAPES[name]
    _script(simulator, shape)
    bare, wrapped = await _bare_then_wrapped(
        simulator, request.getfixturevalue(shape.client_fixture), shape.create, CUT_AT
    )
    seen = "".join(map(shape.content, wrapped))
    assert seen == "".join(map(shape.content, bare))
    assert seen and shape.whole.startswith(seen) and seen != shape.whole


@pytest.mark.parametrize("name", list(SHAPES))
@pytest.mark.parametrize("cut_mode", ["drop", "reset"])
async def test_a_stream_that_breaks_after_non_text_content_raises_stream_truncated_and_is_not_sent_again(
    simulator: Any, request: pytest.FixtureRequest, mode: str, name: str, cut_mode: str
) -> None:
    shape = SHAPES[name]
    _script(simulator, shape)
    simulator.cut_stream_after(CUT_AT, mode=cut_mode)
    wrapped = sdk.wrap(request.getfixturevalue(shape.client_fixture))
    seen = ""
    with pytest.raises(sdk.StreamTruncated):
        async for event in events_of(await resolve(shape.create(wrapped))):
            seen += shape.content(event)
    assert len(simulator.requests) == 1
    assert seen and shape.whole.startswith(seen) and seen != shape.whole


@pytest.mark.parametrize("name", list(SHAPES))
async def test_an_unbroken_stream_of_non_text_content_reaches_the_caller_whole(
    simulator: Any, request: pytest.FixtureRequest, mode: str, name: str
) -> None:
    shape = SHAPES[name]
    _script(simulator, shape)
    wrapped = sdk.wrap(request.getfixturevalue(shape.client_fixture))
    seen = "".join([shape.content(event) async for event in events_of(await resolve(shape.create(wrapped)))])
    assert seen == shape.whole


HEADERS: dict[str, tuple[str, Callable[[Any], Any], Callable[[Any], bool]]] = {
    "chat role chunk": (
        "openai_client",
        lambda c: c.chat.completions.create(model="m", messages=USER, stream=True),
        lambda e: bool(e.choices) and e.choices[0].delta.role == "assistant",
    ),
    "messages message_start": (
        "anthropic_client",
        lambda c: c.messages.create(model=CLAUDE, max_tokens=500, messages=USER, stream=True),
        lambda e: e.type == "message_start",
    ),
    "responses response.created": (
        "openai_client",
        lambda c: c.responses.create(model="gpt-5.4", input="go", stream=True),
        lambda e: e.type == "response.created",
    ),
}


@pytest.mark.parametrize("name", list(HEADERS))
@pytest.mark.parametrize("cut_mode", ["drop", "reset"])
async def test_a_stream_broken_before_any_content_is_not_sent_again_and_its_headers_reach_the_caller_once(
    simulator: Any, request: pytest.FixtureRequest, mode: str, name: str, cut_mode: str
) -> None:
    """Its 200 means the provider accepted it: the caller gets the headers, as from the bare client, then the break."""
    fixture, create, is_header = HEADERS[name]
    simulator.cut_stream_after(0, mode=cut_mode)
    events: list[Any] = []
    with pytest.raises(sdk.StreamTruncated):
        async for event in events_of(await resolve(create(sdk.wrap(request.getfixturevalue(fixture))))):
            events.append(event)
    assert len(simulator.requests) == 1
    assert sum(map(is_header, events)) == 1


@pytest.mark.parametrize("name", list(HEADERS))
async def test_a_body_that_ends_cleanly_before_any_content_gives_the_bare_clients_headers(
    simulator: Any, request: pytest.FixtureRequest, mode: str, name: str
) -> None:
    fixture, create, is_header = HEADERS[name]
    bare, wrapped = await _bare_then_wrapped(simulator, request.getfixturevalue(fixture), create, 0)
    assert [type(event) for event in wrapped] == [
        type(event) for event in bare
    ]  # the simulator's ids differ per answer
    assert sum(map(is_header, wrapped)) == sum(map(is_header, bare)) == 1


async def test_the_responses_stream_helper_raises_for_a_stream_broken_before_any_content_sent_once(
    simulator: Any, openai_client: Any, mode: str
) -> None:
    simulator.cut_stream_after(0, mode="drop")
    wrapped = sdk.wrap(openai_client)
    with pytest.raises(connection_errors(openai)):
        [e async for e in managed_events_of(wrapped.responses.stream(model="gpt-5.4", input="go"))]
    assert len(simulator.requests) == 1
