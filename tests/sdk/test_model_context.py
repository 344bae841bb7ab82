"""Caps that fit (`sdk.decode.limits`, `sdk.decode.model_context`): a default cap is filled only where it fits the
model's context, read once per base URL from an OpenAI-compatible server's `/v1/models`, and a 400
naming the output limit gets the call once more with the limit as the caller wrote it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest

import sdk
from sdk.decode.model_context import Listing, listing_of
from sdk.telemetry import semconv as sc
from tests.local_backend.serving import Served, served_engine
from tests.sdk.helpers import resolve
from tests.sdk.test_telemetry_spans import Otel, otel  # noqa: F401

USER = [{"role": "user", "content": "What is prefill?"}]
CHAT = "max_completion_tokens"


def _chat(client: Any, **extra: Any) -> Any:
    return client.chat.completions.create(model="gpt-sim-1", messages=USER, **extra)


def _spans(otel: Otel) -> list[dict[str, Any]]:
    return [dict(span.attributes or {}) for span in otel.spans() if span.parent is None]


@pytest.fixture(scope="module")
def local_server() -> Iterator[Served]:
    """The bundled model behind the real local server: a 2,048-token context."""
    with served_engine("default") as served:
        yield served


async def test_a_call_without_a_limit_succeeds_against_the_local_server_under_the_default_policy(local_server, mode, otel):
    cls = openai.OpenAI if mode == "sync" else openai.AsyncOpenAI
    client = cls(base_url=f"{local_server.url}/v1", api_key="local", max_retries=0)
    context = local_server.engine.max_model_len
    assert context < sdk.Policy().max_output_tokens  # the default cap cannot fit
    wrapped = sdk.wrap(client, tracer_provider=otel.tracer_provider)

    stream = await resolve(wrapped.chat.completions.create(model="tiny", messages=USER, stream=True))
    try:  # the request was accepted (no 400): the first chunk is enough, closing stops the decode
        first = await anext(aiter(stream)) if mode == "async" else next(iter(stream))
    finally:
        await resolve(stream.close())
    assert first.model == "tiny"
    [span] = _spans(otel)
    assert f"max_tokens_not_filled:context:{context}" in span[sc.KVWISE_CANONICAL_CHANGES], "fitted before the first attempt"
    assert sc.KVWISE_GUARD_CAP_REFUSED not in span and span[sc.KVWISE_ATTEMPTS] == 1


async def test_a_filled_cap_that_does_not_fit_the_listed_context_is_not_sent(simulator, openai_client, otel):
    simulator.context_tokens = 1024
    wrapped = sdk.wrap(openai_client, tracer_provider=otel.tracer_provider)
    for _ in range(3):
        answer = await resolve(_chat(wrapped))
        assert answer.choices[0].message.content == simulator.reply
    assert simulator.model_list_reads == 1, "the context is read once per base URL"
    assert len(simulator.requests) == 3 and all(CHAT not in request.body for request in simulator.requests)
    span = _spans(otel)[0]
    assert sc.KVWISE_OUTPUT_CAP_TOKENS not in span and sc.GEN_AI_REQUEST_MAX_TOKENS not in span
    assert "max_tokens_not_filled:context:1024" in span[sc.KVWISE_CANONICAL_CHANGES]


async def test_concurrent_first_calls_read_the_context_once(simulator, openai_client, mode):
    simulator.context_tokens = 1024
    wrapped = sdk.wrap(openai_client)
    if mode == "async":
        await asyncio.gather(*(_chat(wrapped) for _ in range(4)))
    else:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda _: _chat(wrapped), range(4)))
    assert simulator.model_list_reads == 1 and len(simulator.requests) == 4
    assert all(CHAT not in request.body for request in simulator.requests)


async def test_a_filled_cap_that_fits_the_listed_context_is_sent(simulator, openai_client):
    simulator.context_tokens = 32_768
    await resolve(_chat(sdk.wrap(openai_client, sdk.Policy(max_output_tokens=512))))
    assert simulator.requests[-1].body[CHAT] == 512


async def test_the_callers_own_limit_is_never_taken_out_whatever_the_context(simulator, openai_client):
    simulator.context_tokens = 1024
    await resolve(_chat(sdk.wrap(openai_client), max_completion_tokens=50))
    assert simulator.requests[-1].body[CHAT] == 50 and simulator.model_list_reads == 0


@pytest.mark.parametrize("model_list", ["without_context", "missing"])
async def test_a_server_that_lists_no_context_refusing_the_filled_cap_gets_one_resend_as_written(
    simulator, openai_client, otel, model_list
):
    simulator.context_tokens, simulator.model_list = 1024, model_list
    with pytest.raises(openai.BadRequestError):  # the bare client's request, with the cap kvwise fills in
        await resolve(_chat(openai_client, max_completion_tokens=sdk.Policy().max_output_tokens))
    simulator.reset()
    wrapped = sdk.wrap(openai_client, tracer_provider=otel.tracer_provider)

    answer = await resolve(_chat(wrapped))

    assert answer.choices[0].message.content == simulator.reply
    refused, resent = (request.body for request in simulator.requests)
    assert refused[CHAT] == 4096 and CHAT not in resent and resent == {k: v for k, v in refused.items() if k != CHAT}
    [span] = _spans(otel)
    assert span[sc.KVWISE_GUARD_CAP_REFUSED] is True and sc.ERROR_TYPE not in span
    assert f"max_tokens_refused:{CHAT}" in span[sc.KVWISE_CANONICAL_CHANGES]

    await resolve(_chat(wrapped))  # the server is remembered: one request, without kvwise's cap

    assert len(simulator.requests) == 3 and CHAT not in simulator.requests[-1].body
    assert simulator.model_list_reads == 1, "a failed read is remembered too"


async def test_a_clamped_limit_refused_is_sent_again_as_the_caller_wrote_it(simulator, openai_client):
    simulator.context_tokens, simulator.model_list = 1024, "without_context"
    with pytest.raises(openai.BadRequestError) as bare:
        await resolve(_chat(openai_client, max_completion_tokens=9000))
    simulator.reset()
    with pytest.raises(openai.BadRequestError) as ours:  # the caller's own limit does not fit: theirs to get
        await resolve(_chat(sdk.wrap(openai_client), max_completion_tokens=9000))
    assert ours.value.status_code == bare.value.status_code == 400
    assert [request.body[CHAT] for request in simulator.requests] == [4096, 9000]


async def test_a_400_that_names_neither_the_limit_nor_the_context_is_not_sent_again(simulator, openai_client):
    simulator.fail(status=400, times=1)
    with pytest.raises(openai.BadRequestError):
        await resolve(_chat(sdk.wrap(openai_client)))
    assert len(simulator.requests) == 1


async def test_the_context_is_not_read_from_hosted_openai(simulator, openai_client):
    simulator.context_tokens = 32_768
    await resolve(_chat(sdk.wrap(openai_client, provider="openai")))
    assert simulator.model_list_reads == 0 and simulator.requests[-1].body[CHAT] == 4096


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"data": [{"id": "a", "max_model_len": 2048}, {"id": "b", "max_model_len": 8192}]}, Listing({"a": 2048, "b": 8192})),
        ({"data": [{"id": "a"}]}, None),  # llama.cpp: no context listed
        ({"data": [{"id": "a", "max_model_len": True}, {"id": "b", "max_model_len": "2048"}]}, None),
        ({"data": [{"id": "a", "max_model_len": 0}]}, None),
        ({"object": "list"}, None),
        ("Not Found", None),
    ],
)
def test_listing_of_reads_only_positive_integer_contexts(body, expected):
    assert listing_of(body) == expected


def test_a_model_the_list_lacks_gets_the_smallest_listed_context():
    listing = Listing({"a": 2048, "b": 8192})
    assert (listing.context_of("b"), listing.context_of("alias")) == (8192, 2048)
