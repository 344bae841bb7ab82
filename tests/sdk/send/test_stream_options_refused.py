"""Never worse than the bare client on a server that refuses `stream_options` (`sdk.send.stream_options`):
the usage request kvwise added is taken back and the call sent again once as the caller wrote it,
the server is remembered for the wrapped client, and the span's usage is an estimate, marked."""

from __future__ import annotations

from typing import Any

import openai
import pytest

import sdk
from sdk import semconv as sc
from tests.sdk.helpers import collect, in_stream, resolve
from tests.sdk.telemetry.test_telemetry_spans import Otel, otel  # noqa: F401
from tests.sdk.test_request_safety import _assert_every_difference_is_recorded, _kind

USER = [{"role": "user", "content": "What is prefill?"}]


def _create(client: Any, api: str, **extra: Any) -> Any:
    if api == "chat":
        return client.chat.completions.create(model="m", messages=USER, stream=True, **extra)
    return client.completions.create(model="m", prompt="What is prefill?", stream=True, **extra)


def _roots(otel: Otel) -> list[dict[str, Any]]:
    return [dict(span.attributes or {}) for span in otel.spans() if span.parent is None]


@pytest.mark.parametrize("api", ["chat", "completions"])
async def test_a_refused_usage_request_is_sent_again_as_the_caller_wrote_it_and_remembered(
    simulator, openai_client, otel, api
):
    simulator.refuse_stream_options = True
    bare = await collect(await resolve(_create(openai_client, api)))
    wrapped = sdk.wrap(openai_client, tracer_provider=otel.tracer_provider)

    ours = await collect(await resolve(_create(wrapped, api)))

    assert [_kind(chunk) for chunk in ours] == [_kind(chunk) for chunk in bare]
    sent_bare, refused, resent = (request.body for request in simulator.requests)
    assert refused["stream_options"] == {"include_usage": True} and "stream_options" not in resent
    [span] = _roots(otel)
    changes = span[sc.KVWISE_CANONICAL_CHANGES]
    assert "stream_usage_refused" in changes and "stream_usage_requested" not in changes
    _assert_every_difference_is_recorded(sent_bare, resent, changes)
    assert span[sc.KVWISE_USAGE_ESTIMATED] is True and span[sc.GEN_AI_USAGE_INPUT_TOKENS] > 0
    assert sc.ERROR_TYPE not in span

    await collect(await resolve(_create(wrapped, api)))  # the server is remembered: one request, as written

    assert len(simulator.requests) == 4 and "stream_options" not in simulator.requests[-1].body
    assert "stream_usage_refused" in _roots(otel)[-1][sc.KVWISE_CANONICAL_CHANGES]


async def test_a_server_that_takes_stream_options_is_asked_for_usage_by_another_wrapped_client(
    simulator, openai_client
):
    simulator.refuse_stream_options = True
    await collect(await resolve(_create(sdk.wrap(openai_client), "chat")))
    simulator.refuse_stream_options = False
    await collect(await resolve(_create(sdk.wrap(openai_client), "chat")))
    assert simulator.requests[-1].body["stream_options"] == {"include_usage": True}


async def test_the_callers_own_stream_options_refused_fail_as_with_the_bare_client_and_are_not_sent_again(
    simulator, openai_client
):
    simulator.refuse_stream_options = True
    options = {"include_obfuscation": False}
    with pytest.raises(openai.BadRequestError) as bare:
        await resolve(_create(openai_client, "chat", stream_options=options))
    with pytest.raises(openai.BadRequestError) as ours:
        await resolve(_create(sdk.wrap(openai_client), "chat", stream_options=options))
    assert ours.value.status_code == bare.value.status_code == 400
    assert len(simulator.requests) == 2


async def test_a_400_that_does_not_name_stream_options_is_not_sent_again(simulator, openai_client):
    with pytest.raises(openai.BadRequestError) as bare:
        await resolve(_create(openai_client, "chat", max_tokens=0))
    with pytest.raises(openai.BadRequestError) as ours:
        await resolve(_create(sdk.wrap(openai_client), "chat", max_tokens=0))
    assert "max_tokens" in str(ours.value) and type(ours.value) is type(bare.value)
    assert len(simulator.requests) == 2
    assert simulator.requests[-1].body["stream_options"] == {"include_usage": True}


async def test_the_stream_helper_and_the_raw_forms_on_a_refusing_server_get_their_answer(simulator, openai_client):
    simulator.refuse_stream_options = True
    wrapped = sdk.wrap(openai_client)
    final = await in_stream(
        wrapped.chat.completions.stream(model="m", messages=USER), lambda stream: stream.get_final_completion()
    )
    assert final.choices[0].message.content
    raw = await resolve(
        sdk.wrap(openai_client).chat.completions.with_raw_response.create(model="m", messages=USER, stream=True)
    )
    chunks = await collect(await resolve(raw.parse()))
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert [("stream_options" in request.body) for request in simulator.requests] == [True, False, True, False]
