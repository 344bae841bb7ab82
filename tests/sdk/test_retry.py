"""Retries: tenacity with Retry-After, the client's own errors when attempts run out."""

from __future__ import annotations

import email.utils
import time

import httpx2
import openai
import pytest

import sdk
from sdk.retry import is_retryable, retry_after_seconds
from tests.sdk.helpers import collect, resolve

USER = [{"role": "user", "content": "hi"}]


async def test_two_429s_then_success_is_one_successful_call_with_three_attempts(simulator, openai_client):
    simulator.fail(status=429, times=2, headers={"retry-after-ms": "5"})
    wrapped = sdk.wrap(openai_client)
    response = await resolve(wrapped.chat.completions.create(model="m", messages=USER))
    assert response.choices[0].message.content == simulator.reply
    assert len(simulator.requests) == 3


async def test_anthropic_overloaded_529_is_retried(simulator, anthropic_client):
    simulator.fail(status=529, times=1, headers={"retry-after-ms": "5"})
    wrapped = sdk.wrap(anthropic_client)
    message = await resolve(wrapped.messages.create(model="claude-sonnet-4-6", messages=USER))
    assert message.content[0].text == simulator.reply
    assert len(simulator.requests) == 2


async def test_when_retries_run_out_the_caller_sees_the_clients_own_error(simulator, openai_client):
    simulator.fail(status=429, times=5, headers={"retry-after-ms": "5"})
    wrapped = sdk.wrap(openai_client, sdk.Policy(retries=1))
    with pytest.raises(openai.RateLimitError):
        await resolve(wrapped.chat.completions.create(model="m", messages=USER))
    assert len(simulator.requests) == 2


async def test_a_400_is_not_retried(simulator, openai_client):
    simulator.fail(status=400, times=1)
    with pytest.raises(openai.BadRequestError):
        await resolve(sdk.wrap(openai_client).chat.completions.create(model="m", messages=USER))
    assert len(simulator.requests) == 1


async def test_a_stream_is_retried_when_it_fails_before_its_first_chunk(simulator, openai_client):
    simulator.fail(status=503, times=1, headers={"retry-after-ms": "5"})
    wrapped = sdk.wrap(openai_client)
    events = await collect(await resolve(wrapped.chat.completions.create(model="m", messages=USER, stream=True)))
    assert events[-1].choices[0].finish_reason == "stop"
    assert len(simulator.requests) == 2


def test_the_wrapped_clients_own_retries_are_turned_off(simulator):
    client = openai.OpenAI(base_url=simulator.openai_base_url, api_key="k", max_retries=5)
    simulator.fail(status=500, times=10, headers={"retry-after-ms": "5"})
    with pytest.raises(openai.InternalServerError):
        sdk.wrap(client, sdk.Policy(retries=2)).chat.completions.create(model="m", messages=USER)
    assert len(simulator.requests) == 3


def _status_error(status: int, headers: dict[str, str]) -> openai.APIStatusError:
    request = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx2.Response(status, headers=headers, request=request)
    return openai.APIStatusError("error", response=response, body=None)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after": "2"}, 2.0),
        ({"retry-after": "0"}, None),
        ({"retry-after": "3600"}, None),
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after_is_parsed_and_capped(headers, expected):
    assert retry_after_seconds(_status_error(429, headers)) == expected


def test_retry_after_accepts_an_http_date():
    date = email.utils.formatdate(time.time() + 10, usegmt=True)
    value = retry_after_seconds(_status_error(429, {"retry-after": date}))
    assert value is not None and 5 < value <= 10


@pytest.mark.parametrize(("status", "retryable"), [(408, True), (409, True), (429, True), (500, True), (529, True), (400, False), (401, False), (404, False)])
def test_which_statuses_are_retried(status, retryable):
    assert is_retryable(_status_error(status, {})) is retryable
