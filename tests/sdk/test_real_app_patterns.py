"""Real apps' call patterns, bare and wrapped, against the simulator: a demanding user's review.

Each pattern runs once with the bare client and once with the wrapped one. The request bodies the
simulator received must differ only where kvwise recorded a change (`kvwise.canonical.changes` of
that call's span), and what the caller got (objects, chunks, stream-helper events, final
accumulations) must be identical apart from the ids and timestamps every answer has anew.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable
from typing import Any

import openai
import pydantic
import pytest

import sdk
from tests.sdk.helpers import collect, in_stream, resolve
from tests.sdk.telemetry.test_telemetry_spans import Otel, otel  # noqa: F401
from tests.sdk.test_request_safety import _assert_every_difference_is_recorded

GPT = "gpt-4.1"
CLAUDE = "claude-sonnet-4-6"
WEATHER_ARGS = '{"city": "Paris"}'
FRESH = frozenset(
    {
        "id",
        "created",
        "created_at",
        "completed_at",
        "system_fingerprint",
        "call_id",
        "tool_call_id",
        "tool_use_id",
        "item_id",
    }
)
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(64))).decode()
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CHAT_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city.", "parameters": SCHEMA}}
]
CLAUDE_TOOLS = [{"name": "get_weather", "description": "Weather of a city.", "input_schema": SCHEMA}]

Pattern = Callable[[Any, Any], Awaitable[list[Any]]]


class WeatherReading(pydantic.BaseModel):
    city: str
    temperature_c: int


def _fresh_free(value: Any) -> Any:
    """`value` as plain data without the fields every answer has anew (ids, timestamps)."""
    if isinstance(value, pydantic.BaseModel):
        value = value.model_dump(exclude_unset=True, mode="json")
    if isinstance(value, dict):
        return {key: _fresh_free(item) for key, item in value.items() if key not in FRESH}
    if isinstance(value, (list, tuple)):
        return [_fresh_free(item) for item in value]
    return value


def _differences(bare: Any, ours: Any, path: str = "") -> list[str]:
    """Where two plain-data values differ, as dotted paths."""
    if isinstance(bare, dict) and isinstance(ours, dict):
        return [
            d
            for key in sorted(bare.keys() | ours.keys())
            for d in _differences(bare.get(key), ours.get(key), f"{path}.{key}")
        ]
    if isinstance(bare, list) and isinstance(ours, list) and len(bare) == len(ours):
        return [d for index, pair in enumerate(zip(bare, ours)) for d in _differences(*pair, f"{path}[{index}]")]
    return [] if bare == ours else [path or "."]


def _echoed_field(path: str) -> str:
    """The field a difference is in (`[3].response.max_output_tokens` -> `max_output_tokens`): a
    Responses answer echoes its request's parameters, so a rewritten one differs there too."""
    return path.rsplit(".", 1)[-1].split("[", 1)[0]


async def _run_both(
    simulator: Any, client: Any, otel: Otel, pattern: Pattern, policy: sdk.Policy | None = None
) -> None:
    """Run `pattern` bare then wrapped; compare what the server received and what the caller got."""
    bare = await pattern(client, simulator)
    sent = len(simulator.requests)
    wrapped = sdk.wrap(client, policy, tracer_provider=otel.tracer_provider)
    ours = await pattern(wrapped, simulator)
    assert len(simulator.requests) == 2 * sent, "one request per call, none refused and re-sent"
    spans = [span for span in otel.spans() if span.parent is None]
    assert len(spans) == sent
    rewritten: set[str] = set()  # request fields kvwise changed (recorded): an answer may echo them
    for index, span in enumerate(spans):
        changes = tuple(str(change) for change in (span.attributes or {}).get("kvwise.canonical.changes", ()))
        bare_body, our_body = (_fresh_free(simulator.requests[i].body) for i in (index, sent + index))
        _assert_every_difference_is_recorded(bare_body, our_body, changes)
        rewritten |= {name for name in bare_body.keys() | our_body.keys() if bare_body.get(name) != our_body.get(name)}
        assert simulator.requests[index].headers.get("x-app") == simulator.requests[sent + index].headers.get("x-app")
    got = [d for d in _differences(_fresh_free(bare), _fresh_free(ours)) if _echoed_field(d) not in rewritten]
    assert got == []


def _events_and(final: Callable[[Any], Any]) -> Callable[..., Awaitable[tuple[list[Any], Any]]]:
    """A reader of a stream helper: the events (of `stream`, or of `events` given), then `final(stream)`."""

    async def read(stream: Any, events: Any = None) -> tuple[list[Any], Any]:
        got = await collect(stream if events is None else events)
        return got, await resolve(final(stream))

    return read


def _chat_message_of(chunks: list[Any]) -> dict[str, Any]:
    """The assistant message a streamed Chat answer makes, as an app rebuilds it from the deltas."""
    content, calls = "", {}
    for chunk in chunks:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for call in choice.delta.tool_calls or ():
                slot = calls.setdefault(
                    call.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                )
                slot["id"] += call.id or ""
                slot["function"]["name"] += (call.function.name or "") if call.function else ""
                slot["function"]["arguments"] += (call.function.arguments or "") if call.function else ""
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = [calls[index] for index in sorted(calls)]
    return message


def _chat_tool_loop(stream: bool) -> Pattern:
    async def pattern(client: Any, simulator: Any) -> list[Any]:
        messages: list[Any] = [
            {"role": "system", "content": "You use tools."},
            {"role": "user", "content": "Weather in Paris?"},
        ]
        simulator.tool_call, simulator.reply = "get_weather", WEATHER_ARGS
        first = await resolve(
            client.chat.completions.create(model=GPT, messages=messages, tools=CHAT_TOOLS, stream=stream)
        )
        got = await collect(first) if stream else [first]
        assistant = _chat_message_of(got) if stream else first.choices[0].message.model_dump(exclude_unset=True)
        call = assistant["tool_calls"][0]
        assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
        messages += [assistant, {"role": "tool", "tool_call_id": call["id"], "content": '{"sky": "sunny"}'}]
        simulator.tool_call, simulator.reply = None, "It is sunny in Paris."
        second = await resolve(
            client.chat.completions.create(model=GPT, messages=messages, tools=CHAT_TOOLS, stream=stream)
        )
        return got + (await collect(second) if stream else [second])

    return pattern


@pytest.mark.parametrize("stream", [False, True], ids=["object", "stream"])
async def test_an_openai_tool_loop_gets_the_bare_clients_answers_and_requests(simulator, openai_client, otel, stream):
    await _run_both(simulator, openai_client, otel, _chat_tool_loop(stream))


async def _parse_both_apis(client: Any, simulator: Any) -> list[Any]:
    simulator.reply = '{"city": "Paris", "temperature_c": 21}'
    chat = await resolve(
        client.chat.completions.parse(
            model=GPT,
            messages=[{"role": "user", "content": "Weather in Paris as JSON."}],
            response_format=WeatherReading,
        )
    )
    responses = await resolve(
        client.responses.parse(model=GPT, input="Weather in Paris as JSON.", text_format=WeatherReading)
    )
    assert chat.choices[0].message.parsed == responses.output_parsed == WeatherReading(city="Paris", temperature_c=21)
    return [chat, chat.choices[0].message.parsed, responses, responses.output_parsed]


async def test_structured_outputs_parse_into_the_callers_model_on_chat_and_responses(simulator, openai_client, otel):
    await _run_both(simulator, openai_client, otel, _parse_both_apis)


async def _claude_thinking_tool_loop(client: Any, simulator: Any) -> list[Any]:
    thinking = {"type": "enabled", "budget_tokens": 2048}
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    simulator.thinking, simulator.tool_call, simulator.reply = (
        "The user wants the weather.",
        "get_weather",
        WEATHER_ARGS,
    )
    first = await resolve(
        client.messages.create(
            model=CLAUDE,
            max_tokens=4096,
            thinking=thinking,
            tools=CLAUDE_TOOLS,
            system="You use tools.",
            messages=messages,
        )
    )
    assert [block.type for block in first.content] == ["thinking", "tool_use"]
    use = first.content[-1]
    messages += [  # the thinking blocks go back unmodified, as the API requires, as the client's own objects
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": '{"sky": "sunny"}'}]},
    ]
    simulator.tool_call, simulator.reply = None, "It is sunny in Paris."
    second = await resolve(
        client.messages.create(
            model=CLAUDE,
            max_tokens=4096,
            thinking=thinking,
            tools=CLAUDE_TOOLS,
            system="You use tools.",
            messages=messages,
        )
    )
    return [first, second]


async def test_an_anthropic_extended_thinking_tool_loop_passes_the_thinking_back(simulator, anthropic_client, otel):
    await _run_both(simulator, anthropic_client, otel, _claude_thinking_tool_loop)
    sent_back = simulator.requests[-1].body["messages"][1]["content"][0]
    assert sent_back == {
        "type": "thinking",
        "thinking": "The user wants the weather.",
        "signature": sent_back["signature"],
    }


async def _chat_image(client: Any, simulator: Any) -> list[Any]:
    content = [
        {"type": "text", "text": "What is in this image?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
    ]
    return [await resolve(client.chat.completions.create(model=GPT, messages=[{"role": "user", "content": content}]))]


async def _claude_image(client: Any, simulator: Any) -> list[Any]:
    content = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "text", "text": "What is in this image?"},
    ]
    return [
        await resolve(
            client.messages.create(model=CLAUDE, max_tokens=256, messages=[{"role": "user", "content": content}])
        )
    ]


async def test_a_base64_image_in_a_user_turn_reaches_openai_as_sent(simulator, openai_client, otel):
    await _run_both(simulator, openai_client, otel, _chat_image)
    assert simulator.requests[-1].body["messages"][0]["content"][1]["image_url"]["url"].endswith(PNG)


async def test_a_base64_image_in_a_user_turn_reaches_anthropic_as_sent(simulator, anthropic_client, otel):
    await _run_both(simulator, anthropic_client, otel, _claude_image)
    assert simulator.requests[-1].body["messages"][0]["content"][0]["source"]["data"] == PNG


async def _extras(client: Any, simulator: Any) -> list[Any]:
    answer = await resolve(
        client.chat.completions.create(
            model=GPT,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=50,
            extra_headers={"X-App": "demo"},
            extra_body={"metadata": {"app": "demo"}},
        )
    )
    stream = await resolve(
        client.chat.completions.create(
            model=GPT,
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            extra_headers={"X-App": "demo"},
            extra_body={"metadata": {"app": "demo"}},
        )
    )
    return [answer, *await collect(stream)]


async def test_extra_body_and_extra_headers_reach_the_server_as_with_the_bare_client(simulator, openai_client, otel):
    await _run_both(simulator, openai_client, otel, _extras)
    for request in simulator.requests:
        assert request.headers["x-app"] == "demo" and request.body["metadata"] == {"app": "demo"}


async def _chat_stream_helper(client: Any, simulator: Any) -> list[Any]:
    simulator.reply = '{"city": "Paris", "temperature_c": 21}'
    manager = client.chat.completions.stream(
        model=GPT, messages=[{"role": "user", "content": "Weather?"}], response_format=WeatherReading
    )
    events, final = await in_stream(manager, _events_and(lambda stream: stream.get_final_completion()))
    assert final.choices[0].message.parsed == WeatherReading(city="Paris", temperature_c=21)
    return [*events, final]


async def test_the_chat_stream_helper_gives_the_bare_events_and_final_completion(simulator, openai_client, otel):
    await _run_both(simulator, openai_client, otel, _chat_stream_helper)


async def _messages_stream_helper(client: Any, simulator: Any) -> list[Any]:
    simulator.thinking, simulator.reply = "Short thought.", "Prefill reads the whole prompt once."
    manager = client.messages.stream(
        model=CLAUDE,
        max_tokens=4096,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=[{"role": "user", "content": "What is prefill?"}],
    )
    pieces, final = await in_stream(
        manager, lambda stream: _events_and(lambda s: s.get_final_message())(stream, stream.text_stream)
    )
    text = "".join(pieces)
    assert text == "Prefill reads the whole prompt once." == final.content[-1].text
    return [text, final]


async def test_the_messages_stream_helper_gives_the_bare_text_stream_and_final_message(
    simulator, anthropic_client, otel
):
    await _run_both(simulator, anthropic_client, otel, _messages_stream_helper)


async def _chat_tool_loop_with_the_message_object(client: Any, simulator: Any) -> list[Any]:
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    simulator.tool_call, simulator.reply = "get_weather", WEATHER_ARGS
    first = await resolve(client.chat.completions.create(model=GPT, messages=messages, tools=CHAT_TOOLS))
    message = first.choices[0].message
    messages += [message, {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": '{"sky": "sunny"}'}]
    simulator.tool_call, simulator.reply = None, "It is sunny in Paris."
    return [first, await resolve(client.chat.completions.create(model=GPT, messages=messages, tools=CHAT_TOOLS))]


async def test_a_tool_loop_appending_the_clients_message_object_works_as_bare(simulator, openai_client, otel):
    await _run_both(simulator, openai_client, otel, _chat_tool_loop_with_the_message_object)


async def _responses_tool_loop(client: Any, simulator: Any) -> list[Any]:
    tools = [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Weather of a city.",
            "parameters": SCHEMA,
            "strict": False,
        }
    ]
    items: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    simulator.tool_call, simulator.reply = "get_weather", WEATHER_ARGS
    first = await resolve(client.responses.create(model=GPT, instructions="You use tools.", input=items, tools=tools))
    call = next(item for item in first.output if item.type == "function_call")
    items += [*first.output, {"type": "function_call_output", "call_id": call.call_id, "output": '{"sky": "sunny"}'}]
    simulator.tool_call, simulator.reply = None, "It is sunny in Paris."
    return [
        first,
        await resolve(client.responses.create(model=GPT, instructions="You use tools.", input=items, tools=tools)),
    ]


async def test_a_responses_tool_loop_passing_the_output_items_back_works_as_bare(simulator, openai_client, otel):
    await _run_both(simulator, openai_client, otel, _responses_tool_loop)


async def _claude_streamed_thinking_tool_loop(client: Any, simulator: Any) -> list[Any]:
    thinking = {"type": "enabled", "budget_tokens": 2048}
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    simulator.thinking, simulator.tool_call, simulator.reply = (
        "The user wants the weather.",
        "get_weather",
        WEATHER_ARGS,
    )
    finals = []
    for _ in range(2):
        manager = client.messages.stream(
            model=CLAUDE, max_tokens=4096, thinking=thinking, tools=CLAUDE_TOOLS, messages=messages
        )
        final = await in_stream(manager, lambda stream: stream.get_final_message())
        finals.append(final)
        if final.stop_reason == "tool_use":
            use = final.content[-1]
            messages += [
                {"role": "assistant", "content": final.content},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]},
            ]
            simulator.tool_call, simulator.reply = None, "It is sunny in Paris."
    assert [block.type for block in finals[-1].content] == ["thinking", "text"]
    return finals


async def test_a_streamed_thinking_tool_loop_passing_the_final_messages_content_back_works_as_bare(
    simulator, anthropic_client, otel
):
    await _run_both(simulator, anthropic_client, otel, _claude_streamed_thinking_tool_loop)


class GetWeather(pydantic.BaseModel):
    city: str


async def _stream_helpers_with_pydantic_tools(client: Any, simulator: Any) -> list[Any]:
    simulator.tool_call, simulator.reply = "GetWeather", WEATHER_ARGS
    tool = openai.pydantic_function_tool(GetWeather)
    chat = client.chat.completions.stream(
        model=GPT, messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[tool]
    )
    simulator_reply = '{"city": "Paris", "temperature_c": 21}'
    responses = client.responses.stream(model=GPT, input="Weather in Paris as JSON.", text_format=WeatherReading)
    chat_events, completion = await in_stream(chat, _events_and(lambda stream: stream.get_final_completion()))
    simulator.tool_call, simulator.reply = None, simulator_reply
    events, response = await in_stream(responses, _events_and(lambda stream: stream.get_final_response()))
    out = [*chat_events, completion, *events, response]
    assert completion.choices[0].message.tool_calls[0].function.parsed_arguments == GetWeather(city="Paris")
    assert response.output_parsed == WeatherReading(city="Paris", temperature_c=21)
    return out


async def test_the_stream_helpers_with_pydantic_tools_and_text_format_give_the_bare_events_and_finals(
    simulator, openai_client, otel
):
    await _run_both(simulator, openai_client, otel, _stream_helpers_with_pydantic_tools)


async def _chat_stream_of_two_choices_read_with_its_response(client: Any, simulator: Any) -> list[Any]:
    stream = await resolve(
        client.chat.completions.create(
            model=GPT, messages=[{"role": "user", "content": "hi"}], n=2, stream=True, stop=["\n\n"], temperature=0.2
        )
    )
    status, request_id = stream.response.status_code, stream.response.headers.get("x-request-id")
    chunks = await collect(stream)
    assert status == 200 and request_id
    return chunks


async def test_a_stream_of_two_choices_with_stops_gives_the_bare_chunks_and_its_http_response(
    simulator, openai_client, otel
):
    await _run_both(simulator, openai_client, otel, _chat_stream_of_two_choices_read_with_its_response)


async def _chat_app_options(client: Any, simulator: Any) -> list[Any]:
    functions = [
        {"name": name, "description": "Look up.", "parameters": SCHEMA} for name in ("zeta_lookup", "alpha_lookup")
    ]
    legacy = await resolve(
        client.chat.completions.create(
            model=GPT, messages=[{"role": "user", "content": "hi"}], functions=functions, function_call="auto"
        )
    )
    options = await resolve(
        client.chat.completions.create(
            model=GPT,
            messages=[{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "hi"}],
            tools=CHAT_TOOLS,
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            parallel_tool_calls=False,
            seed=7,
            user="u-1",
            logit_bias={"50256": -100},
            metadata={"app": "demo"},
            store=False,
            temperature=0,
        )
    )
    return [legacy, options]


async def test_a_chat_app_s_other_options_are_sent_as_the_bare_client_sends_them(simulator, openai_client, otel):
    await _run_both(simulator, openai_client, otel, _chat_app_options)
    assert [f["name"] for f in simulator.requests[-2].body["functions"]] == ["zeta_lookup", "alpha_lookup"]


async def _claude_app_options(client: Any, simulator: Any) -> list[Any]:
    system = [{"type": "text", "text": "You use tools.", "cache_control": {"type": "ephemeral"}}]
    return [
        await resolve(
            client.messages.create(
                model=CLAUDE,
                max_tokens=300,
                system=system,
                tools=CLAUDE_TOOLS,
                tool_choice={"type": "tool", "name": "get_weather"},
                stop_sequences=["###"],
                metadata={"user_id": "u-1"},
                messages=[{"role": "user", "content": "Paris?"}],
                extra_headers={"anthropic-beta": "token-efficient-tools-2025-02-19"},
            )
        )
    ]


async def test_an_anthropic_app_s_other_options_are_sent_as_the_bare_client_sends_them(
    simulator, anthropic_client, otel
):
    await _run_both(simulator, anthropic_client, otel, _claude_app_options)
    assert simulator.requests[-1].headers["anthropic-beta"] == "token-efficient-tools-2025-02-19"


async def _claude_parse(client: Any, simulator: Any) -> list[Any]:
    simulator.reply = '{"city": "Paris", "temperature_c": 21}'
    parsed = await resolve(
        client.messages.parse(
            model=CLAUDE,
            max_tokens=200,
            messages=[{"role": "user", "content": "Weather in Paris as JSON."}],
            output_format=WeatherReading,
        )
    )
    assert parsed.parsed_output == WeatherReading(city="Paris", temperature_c=21)
    return [parsed, parsed.parsed_output]


async def test_anthropic_structured_outputs_parse_into_the_callers_model(simulator, anthropic_client, otel):
    await _run_both(simulator, anthropic_client, otel, _claude_parse)


async def _usage_asked_in_extra_body(client: Any, simulator: Any) -> list[Any]:
    stream = await resolve(
        client.chat.completions.create(
            model=GPT,
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            extra_body={"stream_options": {"include_usage": True}},
        )
    )
    chunks = await collect(stream)
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens > 0  # the usage chunk the caller asked for
    return chunks


async def test_usage_asked_for_in_extra_body_reaches_the_caller(simulator, openai_client, otel):
    await _run_both(simulator, openai_client, otel, _usage_asked_in_extra_body)
