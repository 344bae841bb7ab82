"""Retries: tenacity with Retry-After, the client's own errors when attempts run out, and as many
attempts as the caller's own `max_retries` allows (client, `with_options`, request), never more."""

from __future__ import annotations

import email.utils
import json
import time
from typing import Any

import httpx2
import openai
import pytest
from openai.types.chat import ChatCompletion

import sdk
from sdk.send.retry import is_retryable, retries_for, retry_after_seconds
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


def test_the_clients_own_max_retries_is_kvwises_number_of_retries_and_its_own_retries_stay_off(simulator):
    client = openai.OpenAI(base_url=simulator.openai_base_url, api_key="k", max_retries=5)
    simulator.fail(status=500, times=20, headers={"retry-after-ms": "5"})
    with pytest.raises(openai.InternalServerError):
        sdk.wrap(client, sdk.Policy(retries=2)).chat.completions.create(model="m", messages=USER)
    # 6 attempts, as the bare client makes, each counted by kvwise (not 6 client retries per kvwise attempt)
    assert [request.headers["x-stainless-retry-count"] for request in simulator.requests] == ["0", "1", "2", "3", "4", "5"]


def _attempt_client(simulator: Any, mode: str, where: str, retries: int | None) -> Any:
    cls = openai.OpenAI if mode == "sync" else openai.AsyncOpenAI
    own = {"max_retries": retries} if where == "client" and retries is not None else {}
    return cls(base_url=simulator.openai_base_url, api_key="k", **own)


def _attempt(client: Any, where: str, retries: int | None) -> Any:
    """One chat call, with the caller's `max_retries` (None: none) set `where` the caller sets it."""
    if where == "request":  # the request's own options, as a framework posting through the client sets them
        options = {"max_retries": retries} if retries is not None else {}
        body = {"model": "m", "messages": USER}
        return client.post("/chat/completions", cast_to=ChatCompletion, body=body, options=options)
    if where == "with_options" and retries is not None:
        client = client.with_options(max_retries=retries)
    return client.chat.completions.create(model="m", messages=USER)


@pytest.mark.parametrize("retries", [0, 1, None], ids=["max_retries=0", "max_retries=1", "default"])
@pytest.mark.parametrize("where", ["client", "with_options", "request"])
async def test_a_wrapped_client_makes_as_many_attempts_against_a_429_as_the_bare_one(simulator, mode, where, retries):
    async def attempts(client: Any) -> int:
        simulator.fail(status=429, times=10, headers={"retry-after-ms": "5"})
        with pytest.raises(openai.RateLimitError):
            await resolve(_attempt(client, where, retries))
        made = len(simulator.requests)
        simulator.reset()
        return made

    bare = await attempts(_attempt_client(simulator, mode, where, retries))
    wrapped = await attempts(sdk.wrap(_attempt_client(simulator, mode, where, retries)))
    assert wrapped == bare == (2 if retries is None else retries) + 1


def test_policy_retries_applies_where_the_caller_set_no_max_retries(simulator):
    client = openai.OpenAI(base_url=simulator.openai_base_url, api_key="k")
    simulator.fail(status=503, times=10, headers={"retry-after-ms": "5"})
    with pytest.raises(openai.InternalServerError):
        sdk.wrap(client, sdk.Policy(retries=4)).chat.completions.create(model="m", messages=USER)
    assert len(simulator.requests) == 5


@pytest.mark.parametrize(
    ("client_retries", "options", "expected"),
    [
        (openai.DEFAULT_MAX_RETRIES, {}, 7),  # the class default: the caller set none
        (0, {}, 0),
        (5, {}, 5),
        (5, {"max_retries": 1}, 1),  # the request's own beats the client's
        (openai.DEFAULT_MAX_RETRIES, {"max_retries": 0}, 0),
        (openai.DEFAULT_MAX_RETRIES, {"max_retries": openai.NOT_GIVEN}, 7),
        (0, {"max_retries": True}, 0),  # not a count: the client's
    ],
)
def test_retries_for_reads_the_callers_max_retries_before_the_policys(client_retries, options, expected):
    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="k", max_retries=client_retries)
    assert retries_for(client, options, 7) == expected


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
    assert is_retryable(_status_error(status, {}), openai.OpenAI(api_key="k")) is retryable


@pytest.mark.parametrize(
    ("status", "headers", "retryable"),
    [(500, {"x-should-retry": "false"}, False), (400, {"x-should-retry": "true"}, True), (429, {"retry-after": "600"}, False),
     (429, {"retry-after": "60"}, True)],
)
def test_an_error_answer_is_retried_by_the_clients_own_rules(status, headers, retryable):
    """openai's own retries obey x-should-retry and refuse a Retry-After over two minutes; so do kvwise's."""
    assert is_retryable(_status_error(status, headers), openai.OpenAI(api_key="k")) is retryable


def test_a_200_whose_body_is_not_json_is_not_retried():
    assert not is_retryable(json.JSONDecodeError("Expecting value", "{", 1), openai.OpenAI(api_key="k"))
