"""Decode guards on the wire: caps, stops, penalties, Anthropic's required max_tokens."""

from __future__ import annotations

import anthropic
import openai
import pytest

import sdk
from sdk import semconv as sc
from tests.sdk.helpers import collect, resolve
from tests.sdk.telemetry.test_telemetry_spans import otel  # noqa: F401

USER = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({}, {"max_completion_tokens": 100}),
        ({"max_tokens": 5000}, {"max_tokens": 100}),
        ({"max_completion_tokens": 40}, {"max_completion_tokens": 40}),
        ({"max_completion_tokens": 9999}, {"max_completion_tokens": 100}),
    ],
)
async def test_chat_output_cap_is_filled_or_clamped(simulator, openai_client, given, expected):
    wrapped = sdk.wrap(openai_client, sdk.Policy(max_output_tokens=100))
    await resolve(wrapped.chat.completions.create(model="m", messages=USER, **given))
    body = simulator.requests[-1].body
    for key, value in expected.items():
        assert body[key] == value
    assert not ({"max_tokens", "max_completion_tokens"} - set(expected)) & set(body)


async def test_anthropic_max_tokens_is_filled_from_the_cap(simulator, anthropic_client):
    wrapped = sdk.wrap(anthropic_client, sdk.Policy(max_output_tokens=77))
    message = await resolve(wrapped.messages.create(model="claude-sonnet-4-6", messages=USER))
    assert isinstance(message, anthropic.types.Message)
    assert simulator.requests[-1].body["max_tokens"] == 77


async def test_chat_stops_merge_within_the_limit_of_four_and_the_rest_is_enforced_client_side(simulator, openai_client):
    simulator.reply = "alpha beta gamma delta epsilon"
    policy = sdk.Policy(stop=("END", "STOP", "gamma"))
    wrapped = sdk.wrap(openai_client, policy)
    response = await resolve(wrapped.chat.completions.create(model="m", messages=USER, stop="x1"))
    assert simulator.requests[-1].body["stop"] == ["x1", "END", "STOP", "gamma"]
    assert response.choices[0].message.content == "alpha beta "
    response = await resolve(wrapped.chat.completions.create(model="m", messages=USER, stop=["x1", "x2", "x3"]))
    assert simulator.requests[-1].body["stop"] == ["x1", "x2", "x3", "END"]
    assert response.choices[0].message.content == "alpha beta "
    assert response.choices[0].finish_reason == "stop"


async def test_responses_api_stops_are_enforced_on_the_stream(simulator, openai_client):
    simulator.reply = "one two three four five six"
    wrapped = sdk.wrap(openai_client, sdk.Policy(stop=("four",)))
    stream = await resolve(wrapped.responses.create(model="gpt-5.4", input="count", stream=True))
    events = await collect(stream)
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert text == "one two three "
    assert events[-1].type == "response.completed"
    assert "stop" not in simulator.requests[-1].body


async def test_penalties_are_defaulted_only_where_the_caller_set_none(simulator, openai_client):
    wrapped = sdk.wrap(openai_client, sdk.Policy(frequency_penalty=0.5, presence_penalty=0.25))
    await resolve(wrapped.chat.completions.create(model="m", messages=USER, presence_penalty=0.0))
    body = simulator.requests[-1].body
    assert body["frequency_penalty"] == 0.5
    assert body["presence_penalty"] == 0.0


async def test_a_penalty_the_caller_set_in_extra_body_is_not_defaulted_over(simulator, openai_client, otel):
    policy = sdk.Policy(frequency_penalty=0.5)
    wrapped = sdk.wrap(openai_client, policy, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)
    await resolve(wrapped.chat.completions.create(model="m", messages=USER, extra_body={"frequency_penalty": 0.0}))
    assert simulator.requests[-1].body["frequency_penalty"] == 0.0
    [span] = otel.spans()
    assert "frequency_penalty" not in (span.attributes or {}).get(sc.KVWISE_CANONICAL_CHANGES, ())


async def test_anthropic_gets_no_penalty_fields(simulator, anthropic_client):
    wrapped = sdk.wrap(anthropic_client, sdk.Policy(frequency_penalty=0.5))
    await resolve(wrapped.messages.create(model="claude-sonnet-4-6", messages=USER))
    assert "frequency_penalty" not in simulator.requests[-1].body


@pytest.mark.parametrize("kwargs", [{"max_tokens": "many"}, {"max_tokens": 0}, {"stop": 5}])
async def test_values_only_the_api_can_judge_reach_it_untouched_and_fail_as_they_do_for_the_bare_client(
    simulator, openai_client, kwargs
):
    arguments = {"model": "m", "messages": USER, **kwargs}
    with pytest.raises(openai.BadRequestError) as bare:
        await resolve(openai_client.chat.completions.create(**arguments))
    wrapped = sdk.wrap(openai_client, sdk.Policy(stop=("END",)))
    with pytest.raises(openai.BadRequestError) as ours:
        await resolve(wrapped.chat.completions.create(**arguments))
    assert str(ours.value) == str(bare.value)
    [name] = kwargs
    assert simulator.requests[-1].body[name] == simulator.requests[0].body[name] == kwargs[name]


async def test_messages_that_are_not_a_list_of_turns_are_refused_before_sending(simulator, openai_client):
    wrapped = sdk.wrap(openai_client)
    with pytest.raises(TypeError, match="chat.completions.create: messages"):
        await resolve(wrapped.chat.completions.create(model="m", messages="hello"))
    assert simulator.requests == []


def test_policy_rejects_bad_values_naming_the_field():
    with pytest.raises(ValueError, match="max_output_tokens"):
        sdk.Policy(max_output_tokens=0)
    with pytest.raises(ValueError, match="volatile"):
        sdk.Policy(volatile="drop")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="retries"):
        sdk.Policy(retries=-1)


def test_explicit_none_from_the_caller_survives_the_wrapper(simulator):
    client = sdk.wrap(openai.OpenAI(base_url=simulator.openai_base_url, api_key="k", max_retries=0))
    client.chat.completions.create(model="m", messages=USER, max_tokens=None)
    body = simulator.requests[-1].body
    assert body["max_tokens"] is None and "max_completion_tokens" not in body
