"""Typed inputs keep their types: the client's `parse` and stream helpers answer in the caller's
pydantic models when the client is wrapped, as they do bare (canonical order sorts the tools, it
never rebuilds a typed one)."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pydantic
import pytest

import sdk
from sdk.adapters import adapter_for
from sdk.call import Api, Provider
from sdk.prompt.canonical import canonicalize
from tests.sdk.canned_server import Canned, canned  # noqa: F401 (the fixture)
from tests.sdk.helpers import in_stream, resolve

ARGUMENTS = json.dumps({"city": "Paris", "units": "celsius"})


class GetWeather(pydantic.BaseModel):
    """Look up the weather."""

    units: str
    city: str  # `required` out of name order, as pydantic writes it


class Alpha(pydantic.BaseModel):
    """Sorts first."""

    x: int


USAGE = {
    "input_tokens": 3,
    "output_tokens": 2,
    "total_tokens": 5,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens_details": {"reasoning_tokens": 0},
}
CALL_ITEM = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_1",
    "name": "GetWeather",
    "arguments": ARGUMENTS,
    "status": "completed",
}


def _chat_completion() -> dict[str, Any]:
    call = {"id": "call_1", "type": "function", "function": {"name": "GetWeather", "arguments": ARGUMENTS}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }


def _response(status: str, output: list[Any]) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "model": "gpt-4o",
        "status": status,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": USAGE if status == "completed" else None,
    }


def _response_events() -> list[dict[str, Any]]:
    started = {**CALL_ITEM, "arguments": "", "status": "in_progress"}
    events = [
        {"type": "response.created", "response": _response("in_progress", [])},
        {"type": "response.output_item.added", "output_index": 0, "item": started},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 0, "delta": ARGUMENTS},
        {
            "type": "response.function_call_arguments.done",
            "item_id": "fc_1",
            "output_index": 0,
            "arguments": ARGUMENTS,
            "name": "GetWeather",
        },
        {"type": "response.output_item.done", "output_index": 0, "item": CALL_ITEM},
        {"type": "response.completed", "response": _response("completed", [CALL_ITEM])},
    ]
    return [{**event, "sequence_number": number} for number, event in enumerate(events)]


def _clients(canned: Canned, mode: str) -> list[tuple[str, Any]]:
    cls = openai.OpenAI if mode == "sync" else openai.AsyncOpenAI
    return [
        (name, make(cls(base_url=f"{canned.url}/v1", api_key="k", max_retries=0)))
        for name, make in (("bare", lambda c: c), ("wrapped", sdk.wrap))
    ]


def _tools() -> list[Any]:
    return [openai.pydantic_function_tool(GetWeather), openai.pydantic_function_tool(Alpha)]


def _responses_tools() -> list[Any]:
    """A Chat-shape pydantic tool (the client converts it) and a Responses one (openai 3.x's helpers)."""
    if not hasattr(openai, "pydantic_responses_function_tool"):
        pytest.skip("the installed openai has no pydantic_responses_function_tool")
    return [openai.pydantic_function_tool(GetWeather), openai.pydantic_responses_function_tool(Alpha)]


async def test_chat_parse_gives_the_pydantic_tools_arguments_as_the_model(canned, mode):
    canned.answer(_chat_completion())
    for name, client in _clients(canned, mode):
        completion = await resolve(
            client.chat.completions.parse(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], tools=_tools())
        )
        parsed = completion.choices[0].message.tool_calls[0].function.parsed_arguments
        assert isinstance(parsed, GetWeather) and parsed.city == "Paris", name
    bare, wrapped = (seen.body for seen in canned.seen if seen.method == "POST")
    assert [tool["function"]["name"] for tool in wrapped["tools"]] == ["Alpha", "GetWeather"]  # sorted, as advertised
    assert sorted(wrapped["tools"], key=str) == sorted(bare["tools"], key=str)  # and nothing else rewritten


async def test_responses_parse_gives_the_pydantic_tools_arguments_as_the_model(canned, mode):
    canned.answer(_response("completed", [CALL_ITEM]))
    for name, client in _clients(canned, mode):
        response = await resolve(client.responses.parse(model="gpt-4o", input="hi", tools=_responses_tools()))
        assert isinstance(response.output[0].parsed_arguments, GetWeather), name


async def test_responses_stream_gives_the_pydantic_tools_arguments_as_the_model(canned, mode):
    canned.answer(events=_response_events())
    for name, client in _clients(canned, mode):
        manager = client.responses.stream(model="gpt-4o", input="hi", tools=_responses_tools())

        async def final(stream: Any) -> Any:
            async for _ in stream:
                pass
            return await stream.get_final_response()

        def final_sync(stream: Any) -> Any:
            for _ in stream:
                pass
            return stream.get_final_response()

        response = await in_stream(manager, final if mode == "async" else final_sync)
        assert isinstance(response.output[0].parsed_arguments, GetWeather), name


@pytest.mark.parametrize("api", [Api.CHAT, Api.RESPONSES])
def test_canonical_order_sorts_typed_tools_without_rebuilding_them(api):
    tools = _tools()
    adapter = adapter_for(api)
    call = adapter.to_call(
        {"model": "m", "messages" if api is Api.CHAT else "input": [{"role": "user", "content": "q"}], "tools": tools},
        Provider.OPENAI,
    )
    canonicalize(call, sdk.Policy(), adapter)
    assert call.tools == [tools[1], tools[0]] and all(a is b for a, b in zip(call.tools, [tools[1], tools[0]]))
    assert call.decided.changes[:1] == ["tools_sorted"]


def test_a_plain_tool_already_in_canonical_order_is_the_callers_own_object():
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "required": ["a", "b"]}}}
    adapter = adapter_for(Api.CHAT)
    call = adapter.to_call(
        {"model": "m", "messages": [{"role": "user", "content": "q"}], "tools": [tool]}, Provider.OPENAI
    )
    canonicalize(call, sdk.Policy(), adapter)
    assert call.tools[0] is tool and call.decided.changes == []


@pytest.mark.parametrize("requests", [None, anthropic.omit], ids=["none", "omitted"])
async def test_a_batch_without_a_list_of_requests_is_sent_as_the_bare_client_sends_it(canned, mode, requests):
    canned.answer({"id": "msgbatch_1", "type": "message_batch", "processing_status": "in_progress"})
    cls = anthropic.Anthropic if mode == "sync" else anthropic.AsyncAnthropic
    for make in (lambda client: client, sdk.wrap):
        client = make(cls(base_url=canned.url, api_key="k", max_retries=0))
        await resolve(client.messages.batches.create(requests=requests))
    bare, wrapped = (seen.body for seen in canned.seen if seen.method == "POST")
    assert wrapped == bare
