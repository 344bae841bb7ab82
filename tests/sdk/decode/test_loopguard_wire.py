"""The loop guard through real wrapped clients over loopback: repeated records arrive whole, loops are cut."""

from __future__ import annotations

import json
from typing import Any

import sdk
from tests.sdk.decode.loop_corpus import LEGITIMATE, TWELVE_RECORDS_JSON_OBJECT
from tests.sdk.helpers import DECODE_SECONDS_PER_TOKEN, collect, resolve

USER = [{"role": "user", "content": "Export the inventory as JSON."}]
JSON_OBJECT = {"type": "json_object"}
LOOP_IN_A_STRING = "I am not sure about this part of the answer. "


def _chat_text(events: list) -> str:
    return "".join(e.choices[0].delta.content or "" for e in events if e.choices)


async def _stream_json_answer(simulator: Any, client: Any, reply: str) -> list[Any]:
    """The events of a streamed json_object Chat call through a wrapped client, the server saying `reply`."""
    simulator.reply = reply
    wrapped = sdk.wrap(client)
    stream = await resolve(
        wrapped.chat.completions.create(model="m", messages=USER, stream=True, response_format=JSON_OBJECT)
    )
    return await collect(stream)


async def test_twelve_identical_json_records_under_json_object_arrive_whole_with_finish_reason_stop(
    simulator, openai_client
):
    events = await _stream_json_answer(simulator, openai_client, TWELVE_RECORDS_JSON_OBJECT)
    text = _chat_text(events)
    assert text == TWELVE_RECORDS_JSON_OBJECT
    assert len(json.loads(text)["records"]) == 12
    assert events[-1].choices[0].finish_reason == "stop"
    assert simulator.streams[-1].completed and not simulator.streams[-1].client_closed
    assert simulator.requests[-1].body["response_format"] == JSON_OBJECT


async def test_every_legitimate_answer_of_the_corpus_streams_through_a_wrapped_client_uncut(simulator, openai_client):
    wrapped = sdk.wrap(openai_client)
    for name, answer in LEGITIMATE.items():
        simulator.reply = answer.text
        extra = {"response_format": JSON_OBJECT} if answer.structured_output else {}
        stream = await resolve(wrapped.chat.completions.create(model="m", messages=USER, stream=True, **extra))
        events = await collect(stream)
        assert _chat_text(events) == answer.text, name
        assert events[-1].choices[0].finish_reason == "stop", name


async def test_a_responses_json_answer_of_repeated_records_completes(simulator, openai_client):
    simulator.reply = TWELVE_RECORDS_JSON_OBJECT
    wrapped = sdk.wrap(openai_client)
    text_format = {"format": {"type": "json_object"}}
    events = await collect(
        await resolve(wrapped.responses.create(model="gpt-5.4", input="go", stream=True, text=text_format))
    )
    assert events[-1].type == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == TWELVE_RECORDS_JSON_OBJECT


async def test_a_prose_loop_inside_a_json_string_is_still_cut_within_3_periods(simulator, openai_client):
    head = '{"answer": "'
    simulator.token_delay = DECODE_SECONDS_PER_TOKEN
    events = await _stream_json_answer(simulator, openai_client, head + LOOP_IN_A_STRING * 40 + '"}')
    text = _chat_text(events)
    assert events[-1].choices[0].finish_reason == "length"
    pieces = [e.choices[0].delta.content for e in events if e.choices and e.choices[0].delta.content]
    assert len(text) - len(pieces[-1]) < len(head) + 3 * len(LOOP_IN_A_STRING)  # cut on the third copy
    record = simulator.streams[-1]
    assert record.client_closed and not record.completed


async def test_a_json_string_of_3000_zeros_under_json_object_arrives_whole(simulator, openai_client):
    """A value of one repeated character inside a JSON string is no loop (the guard used to cut it)."""
    reply = '{"padding": "' + "0" * 3000 + '", "blank": "' + " " * 3000 + '"}'
    events = await _stream_json_answer(simulator, openai_client, reply)
    assert _chat_text(events) == reply
    assert events[-1].choices[0].finish_reason == "stop"
    assert simulator.streams[-1].completed and not simulator.streams[-1].client_closed
