"""Tool use and structured outputs through the real `anthropic` client against the bundled model: a
tool_use → tool_result → answer loop, streamed and not (`input_json_delta`), forced tool choice
always schema-valid, and `output_config.format` JSON valid against its schema; text after a call
kept in order (read back by the client's own stream accumulator); `is_error` results honoured."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import anthropic
import jsonschema
import pytest
from anthropic.lib.streaming._messages import accumulate_event

from local_backend.engine.outputs import Completion, StreamDelta, Timings
from local_backend.model.tool_prompt import call_text
from local_backend.server import histories
from local_backend.server.anthropic_routes import AnthropicFormat
from local_backend.server.usage import RequestUsage
from tests.local_backend.serving import ServedEngines

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 24},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "days"],
}
TOOLS = [
    {"name": "get_weather", "description": "Weather of a city", "input_schema": WEATHER},
    {
        "name": "get_time",
        "input_schema": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]},
    },
]
SCHEMAS = {t["name"]: t["input_schema"] for t in TOOLS}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
BASE = {"model": "tiny", "max_tokens": 80, "tools": TOOLS}


@pytest.fixture(scope="module")
def base_url(serve: ServedEngines) -> str:
    return serve("default", max_model_len=1024, kv_cache_memory=2**23).url


@pytest.fixture(scope="module")
def client(base_url: str) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=base_url, api_key="x", max_retries=0) as client:
        yield client


def _create_async(base_url: str, stream: bool, **kwargs):
    """`_create`'s twin over `anthropic.AsyncAnthropic` (one event loop per call)."""

    async def run():
        async with anthropic.AsyncAnthropic(base_url=base_url, api_key="x", max_retries=0) as client:
            if not stream:
                return await client.messages.create(**{**BASE, **kwargs}), None
            async with client.messages.stream(**{**BASE, **kwargs}) as events:
                partial: dict[int, str] = {}
                async for event in events:
                    if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                        partial[event.index] = partial.get(event.index, "") + event.delta.partial_json
                return await events.get_final_message(), partial

    return asyncio.run(run())


def _create(client: anthropic.Anthropic, stream: bool, **kwargs):
    """The final message; streamed, also the tool_use inputs rebuilt from their `input_json_delta`s."""
    if not stream:
        return client.messages.create(**{**BASE, **kwargs}), None
    with client.messages.stream(**{**BASE, **kwargs}) as events:
        partial: dict[int, str] = {}
        for event in events:
            if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                partial[event.index] = partial.get(event.index, "") + event.delta.partial_json
        return events.get_final_message(), partial


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_tool_loop_uses_the_tool_gets_the_result_and_answers(client, base_url, stream, mode):
    create = (
        (lambda s, **kw: _create(client, s, **kw))
        if mode == "sync"
        else (lambda s, **kw: _create_async(base_url, s, **kw))
    )
    message, partial = create(stream, messages=QUESTION, tool_choice={"type": "any"}, extra_body={"seed": 1})
    [use] = [b for b in message.content if b.type == "tool_use"]
    assert message.stop_reason == "tool_use" and use.id.startswith("toolu_")
    jsonschema.validate(use.input, SCHEMAS[use.name])
    if stream:
        assert [json.loads(text) for text in partial.values()] == [use.input]
    history = [
        *QUESTION,
        {
            "role": "assistant",
            "content": [b.model_dump(exclude_none=True) for b in message.content if b.type == "tool_use"],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]},
    ]
    answer, _ = create(stream, messages=history, tool_choice={"type": "none"}, extra_body={"temperature": 0})
    assert answer.stop_reason in ("end_turn", "max_tokens") and answer.content[0].type == "text"
    assert answer.content[0].text and not [b for b in answer.content if b.type == "tool_use"]
    with_result = client.messages.count_tokens(model="tiny", messages=history, tools=TOOLS).input_tokens
    assert with_result > client.messages.count_tokens(model="tiny", messages=QUESTION, tools=TOOLS).input_tokens
    assert client.messages.count_tokens(model="tiny", messages=QUESTION, tools=TOOLS).input_tokens > (
        client.messages.count_tokens(model="tiny", messages=QUESTION).input_tokens
    )


@pytest.mark.parametrize("tool_choice", [{"type": "any"}, {"type": "tool", "name": "get_time"}])
def test_a_forced_tool_choice_always_yields_a_schema_valid_tool_use(client, tool_choice):
    for seed in range(10):
        message, _ = _create(client, False, messages=QUESTION, tool_choice=tool_choice, extra_body={"seed": seed})
        [use] = message.content
        assert use.type == "tool_use" and message.stop_reason == "tool_use"
        assert tool_choice["type"] == "any" or use.name == tool_choice["name"]
        jsonschema.validate(use.input, SCHEMAS[use.name])


def test_output_config_format_gives_json_valid_against_its_schema(client):
    for seed in range(10):
        message = client.messages.create(
            model="tiny",
            max_tokens=80,
            messages=QUESTION,
            extra_body={"seed": seed},
            output_config={"format": {"type": "json_schema", "schema": WEATHER}},
        )
        assert message.stop_reason == "end_turn"
        jsonschema.validate(json.loads(message.content[0].text), WEATHER)


def test_the_clients_parse_with_an_output_format_type_gets_a_parsed_object(client):
    import typing

    import pydantic

    class Forecast(pydantic.BaseModel):  # the client drops maxLength from the schema: no free strings here
        unit: typing.Literal["C", "F"]
        sunny: bool

    message = client.messages.parse(
        model="tiny", max_tokens=80, messages=QUESTION, output_format=Forecast, extra_body={"seed": 3}
    )
    assert isinstance(message.parsed_output, Forecast)


def test_a_tool_result_marked_is_error_reaches_the_model_as_an_error(client):
    use = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}

    def counted(result: dict) -> int:
        history = [
            *QUESTION,
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", **result}]},
        ]
        return client.messages.count_tokens(model="tiny", messages=history, tools=TOOLS).input_tokens

    failed = counted({"content": "city not found", "is_error": True})
    assert failed == counted({"content": f"{histories.ERROR_RESULT_PREFIX}city not found"})
    assert failed > counted({"content": "city not found"}) == counted({"content": "city not found", "is_error": False})


ANSWER_WITH_TEXT_AFTER_CALL = (
    "Let me check.\n"
    + call_text("get_weather", {"city": "Paris"})
    + "\nI asked for Paris.\n"
    + call_text("get_time", {"zone": "CET"})
    + "\nDone."
)
"""An answer whose text goes on after each tool call (a model may explain what it called)."""


def _completion(text: str) -> Completion:
    return Completion(
        request_id="r",
        prompt_token_ids=(1, 2),
        token_ids=(3,) * 40,
        text=text,
        finish_reason="stop",
        cached_tokens=0,
        cache_written_tokens=0,
        stop_string=None,
        timings=Timings(0.0, 0.0, 0.0),
    )


def _streamed_message(text: str, pieces: int) -> anthropic.types.Message:
    """The answer streamed in `pieces`-character deltas, read back by the anthropic client's own accumulator."""
    fmt, completion = AnthropicFormat("tiny", parse_tools=True), _completion(text)
    raw = b"".join(fmt.opening(RequestUsage.of(completion)))
    for i in range(0, len(text), pieces):
        raw += b"".join(fmt.delta(0, StreamDelta(text[i : i + pieces], (3,), 0, 0)))
    raw += b"".join(fmt.finished(0, completion)) + b"".join(fmt.closing([completion]))
    snapshot, buffers = None, {}
    for block in raw.decode().strip().split("\n\n"):
        data = json.loads(block.split("data: ", 1)[1])
        if data["type"] != "ping":
            snapshot = accumulate_event(event=data, current_snapshot=snapshot, json_bufs=buffers)
    assert snapshot is not None
    return anthropic.types.Message.model_validate(snapshot.model_dump())


def test_text_after_a_tool_call_is_kept_in_order_whole_and_streamed():
    whole = anthropic.types.Message.model_validate(
        AnthropicFormat("tiny", parse_tools=True).whole([_completion(ANSWER_WITH_TEXT_AFTER_CALL)])
    )
    shape = [(b.type, b.text if b.type == "text" else (b.name, b.input)) for b in whole.content]
    assert shape == [
        ("text", "Let me check."),
        ("tool_use", ("get_weather", {"city": "Paris"})),
        ("text", "I asked for Paris."),
        ("tool_use", ("get_time", {"zone": "CET"})),
        ("text", "Done."),
    ]
    assert whole.stop_reason == "tool_use"
    for pieces in (1, 3, 7, len(ANSWER_WITH_TEXT_AFTER_CALL)):
        streamed = _streamed_message(ANSWER_WITH_TEXT_AFTER_CALL, pieces)
        assert [(b.type, b.text if b.type == "text" else (b.name, b.input)) for b in streamed.content] == shape
