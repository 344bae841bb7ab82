"""`client.responses.create` (streamed and not) and `client.responses.stream` against the real
server on the bundled model: the same answer as Chat Completions for the same turns, the Responses
event sequence, `incomplete` when the cap cuts the answer."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.local_backend.serving import ServedEngines

QUESTION = "What is the capital of France?"
INSTRUCTIONS = "You answer briefly."
GREEDY = {"model": "tiny", "temperature": 0}
EVENTS = ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
CLOSING = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]


@pytest.fixture(scope="module")
def client(serve: ServedEngines) -> Iterator[openai.OpenAI]:
    served = serve("default", max_model_len=512, kv_cache_memory=2**22)
    with openai.OpenAI(base_url=f"{served.url}/v1", api_key="x", max_retries=0) as client:
        yield client


def _chat(client: openai.OpenAI, messages: list[dict[str, str]], **kwargs):
    return client.chat.completions.create(messages=messages, **GREEDY, **kwargs)


def test_a_string_input_with_instructions_answers_as_chat_does(client):
    response = client.responses.create(input=QUESTION, instructions=INSTRUCTIONS, **GREEDY)
    chat = _chat(client, [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": QUESTION}])
    assert response.object == "response" and response.status == "completed" and response.model == "tiny"
    assert response.output_text == chat.choices[0].message.content
    [item] = response.output
    assert item.type == "message" and item.role == "assistant" and item.status == "completed"
    assert response.usage.input_tokens == chat.usage.prompt_tokens
    assert response.usage.output_tokens == chat.usage.completion_tokens
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
    assert response.instructions == INSTRUCTIONS and response.incomplete_details is None


def test_item_inputs_carry_the_history_with_text_parts(client):
    items = [
        {"role": "developer", "content": INSTRUCTIONS},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello!"}]},
        {"role": "user", "content": QUESTION},
    ]
    response = client.responses.create(input=items, **GREEDY)
    chat = _chat(
        client,
        [
            {"role": "system", "content": INSTRUCTIONS},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": QUESTION},
        ],
    )
    assert response.output_text == chat.choices[0].message.content
    assert response.usage.input_tokens == chat.usage.prompt_tokens


def test_max_output_tokens_cuts_the_answer_and_the_response_is_incomplete(client):
    response = client.responses.create(input=QUESTION, max_output_tokens=3, **GREEDY)
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert response.usage.output_tokens == 3 and response.output[0].status == "incomplete"
    assert response.max_output_tokens == 3


@pytest.mark.parametrize("max_output_tokens", [None, 3])
def test_the_stream_sends_the_event_sequence_and_ends_with_the_whole_response(client, max_output_tokens):
    cap = {} if max_output_tokens is None else {"max_output_tokens": max_output_tokens}
    whole = client.responses.create(input=QUESTION, **GREEDY, **cap)
    events = list(client.responses.create(input=QUESTION, stream=True, **GREEDY, **cap))
    kinds = [e.type for e in events]
    final = "response.completed" if max_output_tokens is None else "response.incomplete"
    assert kinds[:4] == EVENTS and kinds[-4:] == [*CLOSING, final]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == whole.output_text == events[-4].text
    last = events[-1].response
    assert last.output_text == text and last.status == whole.status
    assert last.usage.output_tokens == whole.usage.output_tokens


def test_the_clients_stream_helper_builds_the_final_response(client):
    with client.responses.stream(input=QUESTION, instructions=INSTRUCTIONS, **GREEDY) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert (
        final.output_text
        == "".join(deltas)
        == client.responses.create(input=QUESTION, instructions=INSTRUCTIONS, **GREEDY).output_text
    )


@pytest.mark.parametrize(
    ("request_", "param"),
    [
        ({"store": True}, "store"),
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"input": [{"type": "file_search_call", "id": "fs_1"}]}, "input[0]"),
        ({"model": "gpt-unknown"}, "model"),
    ],
)
def test_what_the_backend_cannot_do_is_refused_naming_the_field(client, request_, param):
    with pytest.raises(openai.APIStatusError) as caught:
        client.responses.create(**{"input": QUESTION, **GREEDY, **request_})
    assert caught.value.status_code == (404 if param == "model" else 400) and caught.value.param == param


WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}}, "required": ["city"]}
FUNCTION = {"type": "function", "name": "get_weather", "description": "Weather of a city", "parameters": WEATHER}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_function_tool_loop_calls_gets_the_output_and_answers(client, stream):
    import json

    import jsonschema

    kwargs = dict(
        input=QUESTION,
        tools=[FUNCTION],
        tool_choice="required",
        max_output_tokens=80,
        model="tiny",
        extra_body={"seed": 2},
    )
    if stream:
        events = list(client.responses.create(stream=True, **kwargs))
        response = events[-1].response
        deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
        [done] = [e for e in events if e.type == "response.function_call_arguments.done"]
        assert deltas == done.arguments
    else:
        response = client.responses.create(**kwargs)
    [call] = [item for item in response.output if item.type == "function_call"]
    assert call.name == "get_weather" and call.call_id.startswith("call_") and call.status == "completed"
    jsonschema.validate(json.loads(call.arguments), WEATHER)
    history = [
        {"role": "user", "content": QUESTION},
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
    ]
    answer = client.responses.create(input=history, tools=[FUNCTION], tool_choice="none", **GREEDY)
    assert answer.output_text and not [i for i in answer.output if i.type == "function_call"]
    shorter = client.responses.create(input=QUESTION, tools=[FUNCTION], tool_choice="none", **GREEDY)
    assert answer.usage.input_tokens > shorter.usage.input_tokens


def test_text_format_json_schema_gives_json_valid_against_it(client):
    import json

    import jsonschema

    text = {"format": {"type": "json_schema", "name": "w", "schema": WEATHER, "strict": True}}
    for seed in range(5):
        response = client.responses.create(
            input=QUESTION, text=text, model="tiny", max_output_tokens=80, extra_body={"seed": seed}
        )
        assert response.status == "completed"
        jsonschema.validate(json.loads(response.output_text), WEATHER)


def test_an_earlier_responses_output_passed_back_as_input_carries_the_history(client):
    first = client.responses.create(input=QUESTION, **GREEDY)
    passed_back = [item.model_dump(exclude_none=True) for item in first.output]  # with its id, status, annotations
    assert {"id", "status"} <= set(passed_back[0])
    follow_up = client.responses.create(
        input=[{"role": "user", "content": QUESTION}, *passed_back, {"role": "user", "content": "Again?"}], **GREEDY
    )
    chat = _chat(
        client,
        [
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": first.output_text},
            {"role": "user", "content": "Again?"},
        ],
    )
    assert follow_up.usage.input_tokens == chat.usage.prompt_tokens
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(input=[{"role": "user", "content": QUESTION, "name": "ann"}], **GREEDY)
    assert caught.value.param == "input[0].name"
