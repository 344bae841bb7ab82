"""Tool calling through the real `openai` client against the bundled model: a call → result → answer
loop, streamed and not; a forced call (`required` or named) is always valid against its schema."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import jsonschema
import openai
import pytest

from tests.local_backend.serving import ServedEngines

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 24},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
TIME = {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET", "PST"]}}, "required": ["zone"]}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Weather of a city", "parameters": WEATHER},
    },
    {"type": "function", "function": {"name": "get_time", "description": "Time in a zone", "parameters": TIME}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
BASE = {"model": "tiny", "max_tokens": 80, "tools": TOOLS}


@pytest.fixture(scope="module")
def base_url(serve: ServedEngines) -> str:
    return serve("default", max_model_len=1024, kv_cache_memory=2**23).url


@pytest.fixture(scope="module")
def client(base_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{base_url}/v1", api_key="x", max_retries=0) as client:
        yield client


class AsyncAsker:
    """`_ask`'s twin over `openai.AsyncOpenAI` (one event loop per call)."""

    def __init__(self, base_url: str):
        self._url = f"{base_url}/v1"

    def ask(self, stream: bool, **kwargs) -> tuple[str, list[dict], str]:
        async def run():
            async with openai.AsyncOpenAI(base_url=self._url, api_key="x", max_retries=0) as client:
                response = await client.chat.completions.create(stream=stream, **{**BASE, **kwargs})
                if stream:
                    return _streamed([chunk async for chunk in response])
                return _whole(response)

        return asyncio.run(run())


def _streamed(stream) -> tuple[str, list[dict], str]:
    """Content, calls (id, name, arguments joined from their deltas) and finish reason of a stream."""
    content, calls, finish = "", {}, None
    for chunk in stream:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for call in choice.delta.tool_calls or ():
                entry = calls.setdefault(call.index, {"id": call.id, "name": call.function.name, "arguments": ""})
                entry["arguments"] += call.function.arguments or ""
            finish = choice.finish_reason or finish
    return content, [calls[i] for i in sorted(calls)], finish


def _ask(client: openai.OpenAI, stream: bool, **kwargs) -> tuple[str, list[dict], str]:
    if stream:
        return _streamed(client.chat.completions.create(stream=True, **{**BASE, **kwargs}))
    return _whole(client.chat.completions.create(**{**BASE, **kwargs}))


def _whole(response) -> tuple[str, list[dict], str]:
    [choice] = response.choices
    calls = [
        {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
        for c in choice.message.tool_calls or ()
    ]
    return choice.message.content or "", calls, choice.finish_reason


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_tool_loop_calls_gets_the_result_and_answers(client, base_url, stream, mode):
    ask = (lambda s, **kw: _ask(client, s, **kw)) if mode == "sync" else AsyncAsker(base_url).ask
    _, [call], finish = ask(stream, messages=QUESTION, tool_choice="required", seed=1)
    assert finish == "tool_calls" and call["id"].startswith("call_")
    jsonschema.validate(json.loads(call["arguments"]), SCHEMAS[call["name"]])
    history = [
        *QUESTION,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call["id"], "content": json.dumps({"forecast": "sunny"})},
    ]
    content, calls, finish = ask(stream, messages=history, tool_choice="none", temperature=0)
    assert content and calls == [] and finish in ("stop", "length")
    longer = client.chat.completions.create(**{**BASE, "messages": history, "tool_choice": "none", "max_tokens": 1})
    shorter = client.chat.completions.create(**{**BASE, "messages": QUESTION, "tool_choice": "none", "max_tokens": 1})
    assert longer.usage.prompt_tokens > shorter.usage.prompt_tokens  # the call and its result are in the prompt


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_streamed_and_whole_forced_calls_are_the_same_call(client, stream):
    whole = _ask(client, False, messages=QUESTION, tool_choice="required", seed=4)
    other = _ask(client, stream, messages=QUESTION, tool_choice="required", seed=4)
    assert [(c["name"], c["arguments"]) for c in other[1]] == [(c["name"], c["arguments"]) for c in whole[1]]


@pytest.mark.parametrize("choice", ["required", "get_time"])
def test_a_forced_tool_choice_always_yields_a_schema_valid_call(client, choice):
    tool_choice = choice if choice == "required" else {"type": "function", "function": {"name": choice}}
    for seed in range(12):
        content, [call], finish = _ask(
            client, False, messages=QUESTION, tool_choice=tool_choice, seed=seed, temperature=1.0
        )
        assert finish == "tool_calls" and content == ""
        assert choice == "required" or call["name"] == choice
        jsonschema.validate(json.loads(call["arguments"]), SCHEMAS[call["name"]])


@pytest.mark.parametrize(
    ("request_", "param"),
    [
        ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools[0].name"),
        ({"tools": [], "tool_choice": "required"}, "tool_choice"),
    ],
)
def test_bad_tools_are_refused_naming_the_field(client, request_, param):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(**{**BASE, "messages": QUESTION, **request_})
    assert caught.value.param == param
