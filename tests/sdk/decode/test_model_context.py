"""Caps that fit (`sdk.decode.limits`, `sdk.send.refusals`) without a request the caller did not make:
no `GET /models`. A filled cap the server refuses gets the call once more as the caller wrote it, and
the context the refusal names is remembered per base URL and model, so the next call's cap fits;
`Policy.model_contexts` states a context outright, from the first call on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

import sdk
from sdk import semconv as sc
from sdk.decode.limits import OUTPUT_LIMIT
from tests.local_backend.serving import Served, served_engine
from tests.sdk.helpers import resolve
from tests.sdk.telemetry.test_telemetry_spans import Otel, otel  # noqa: F401

USER = [{"role": "user", "content": "What is prefill?"}]
CHAT = "max_completion_tokens"
MODEL = "gpt-sim-1"


def _chat(client: Any, model: str = MODEL, **extra: Any) -> Any:
    return client.chat.completions.create(model=model, messages=USER, **extra)


def _spans(otel: Otel) -> list[dict[str, Any]]:
    return [dict(span.attributes or {}) for span in otel.spans() if span.parent is None]


@pytest.fixture(scope="module")
def local_server() -> Iterator[Served]:
    """The bundled model behind the real local server: a 2,048-token context."""
    with served_engine("default") as served:
        yield served


async def _first_chunk(wrapped: Any, mode: str) -> Any:
    """Open a stream and read its first chunk (enough: the request was accepted); closing stops the decode."""
    stream = await resolve(wrapped.chat.completions.create(model="tiny", messages=USER, stream=True))
    try:
        return await anext(aiter(stream)) if mode == "async" else next(iter(stream))
    finally:
        await resolve(stream.close())


async def test_the_local_servers_refusal_teaches_its_context_and_the_next_call_fits_it(local_server, mode, otel):
    """The local server's 400 ("max_completion_tokens=4096 must be between 1 and the model's context of
    2048 tokens") gets the call once more as written; from then on the filled cap is fitted before the
    first send, and no request but the caller's reaches the server."""
    sent: list[tuple[str, str]] = []
    if mode == "sync":
        client: Any = openai.OpenAI(
            base_url=f"{local_server.url}/v1",
            api_key="local",
            max_retries=0,
            http_client=openai.DefaultHttpxClient(
                event_hooks={"request": [lambda r: sent.append((r.method, r.url.path))]}
            ),
        )
    else:

        async def note(request: Any) -> None:
            sent.append((request.method, request.url.path))

        client = openai.AsyncOpenAI(
            base_url=f"{local_server.url}/v1",
            api_key="local",
            max_retries=0,
            http_client=openai.DefaultAsyncHttpxClient(event_hooks={"request": [note]}),
        )
    context = local_server.engine.max_model_len
    assert context < sdk.Policy().max_output_tokens  # the default cap cannot fit
    wrapped = sdk.wrap(client, tracer_provider=otel.tracer_provider)

    assert (await _first_chunk(wrapped, mode)).model == "tiny"
    assert (await _first_chunk(wrapped, mode)).model == "tiny"

    assert sent == [("POST", "/v1/chat/completions")] * 3, "the refused request, its resend, the next call: no GET"
    refused, fitted = _spans(otel)
    assert refused[sc.KVWISE_GUARD_CAP_REFUSED] is True and refused[sc.KVWISE_ATTEMPTS] == 2
    assert f"max_tokens_refused:{CHAT}" in refused[sc.KVWISE_CANONICAL_CHANGES]
    assert f"max_tokens_not_filled:context:{context}" in fitted[sc.KVWISE_CANONICAL_CHANGES], "fitted before the send"
    assert sc.KVWISE_GUARD_CAP_REFUSED not in fitted and fitted[sc.KVWISE_ATTEMPTS] == 1


async def test_a_filled_cap_refused_once_is_fitted_to_the_context_the_refusal_named(simulator, openai_client, otel):
    simulator.context_tokens = 1024
    wrapped = sdk.wrap(openai_client, tracer_provider=otel.tracer_provider)
    for _ in range(3):
        answer = await resolve(_chat(wrapped))
        assert answer.choices[0].message.content == simulator.reply
    bodies = [request.body for request in simulator.requests]
    assert bodies[0][CHAT] == 4096 and all(CHAT not in body for body in bodies[1:]) and len(bodies) == 4
    assert bodies[1] == {key: value for key, value in bodies[0].items() if key != CHAT}, "sent again as written"
    assert simulator.model_list_reads == 0
    first, *later = _spans(otel)
    assert first[sc.KVWISE_GUARD_CAP_REFUSED] is True and sc.ERROR_TYPE not in first
    assert all("max_tokens_not_filled:context:1024" in span[sc.KVWISE_CANONICAL_CHANGES] for span in later)
    assert sc.KVWISE_OUTPUT_CAP_TOKENS not in later[0] and sc.GEN_AI_REQUEST_MAX_TOKENS not in later[0]


async def test_a_context_stated_in_the_policy_fits_the_first_call(simulator, openai_client):
    simulator.context_tokens = 1024
    wrapped = sdk.wrap(openai_client, sdk.Policy(model_contexts={MODEL: 1024}))
    await resolve(_chat(wrapped))
    assert len(simulator.requests) == 1 and CHAT not in simulator.requests[0].body
    assert simulator.model_list_reads == 0


async def test_a_filled_cap_that_fits_the_stated_context_is_sent(simulator, openai_client):
    simulator.context_tokens = 32_768
    await resolve(_chat(sdk.wrap(openai_client, sdk.Policy(max_output_tokens=512, model_contexts={MODEL: 32_768}))))
    assert simulator.requests[-1].body[CHAT] == 512 and len(simulator.requests) == 1


async def test_a_learnt_context_is_the_models_behind_that_base_url_only(simulator, openai_client):
    simulator.context_tokens = 1024
    wrapped = sdk.wrap(openai_client)
    await resolve(_chat(wrapped))
    simulator.reset()
    await resolve(_chat(wrapped, model="other-model"))  # its context was never named: the cap goes, and is refused
    assert [CHAT in request.body for request in simulator.requests] == [True, False]


async def test_the_callers_own_limit_is_never_taken_out_whatever_the_context(simulator, openai_client):
    simulator.context_tokens = 1024
    await resolve(_chat(sdk.wrap(openai_client, sdk.Policy(model_contexts={MODEL: 1024})), max_completion_tokens=50))
    assert simulator.requests[-1].body[CHAT] == 50 and simulator.model_list_reads == 0


async def test_a_refusal_naming_no_context_leaves_that_model_without_kvwises_cap(simulator, openai_client, otel):
    simulator.fail(400, message=f"{CHAT} is not supported with this model", times=1)
    wrapped = sdk.wrap(openai_client, tracer_provider=otel.tracer_provider)
    await resolve(_chat(wrapped))
    await resolve(_chat(wrapped))
    assert [CHAT in request.body for request in simulator.requests] == [True, False, False]
    assert f"max_tokens_withheld:{CHAT}" in _spans(otel)[1][sc.KVWISE_CANONICAL_CHANGES]


async def test_a_clamped_limit_refused_is_sent_again_as_the_caller_wrote_it(simulator, openai_client):
    simulator.context_tokens = 1024
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


@pytest.mark.parametrize(
    ("message", "context"),
    [
        ("This model's maximum context length is 2048 tokens. However, you requested 4196 tokens", 2048),  # vLLM
        ("'max_tokens' is too large: 4096. This model's maximum context length is 8,192 tokens and ...", 8192),
        ("Requested token count exceeds the model's maximum context length of 32768 tokens.", 32768),  # SGLang
        ("max_completion_tokens=4096 must be between 1 and the model's context of 2048 tokens", 2048),  # local backend
        ("max_tokens is too large: 100000. This model supports at most 16384 completion tokens", None),
        ("the model's context of 0 tokens", None),
        ("max_tokens must be at least 1", None),
    ],
)
def test_the_context_a_refusal_names_is_read_from_its_text(message, context):
    assert OUTPUT_LIMIT.context_named(message) == context


@pytest.mark.parametrize("contexts", [{"m": 0}, {"m": True}, {"m": "2048"}, {1: 2048}, [("m", 2048)]])
def test_policy_model_contexts_takes_only_positive_token_counts_by_model_id(contexts):
    with pytest.raises(ValueError, match="model_contexts"):
        sdk.Policy(model_contexts=contexts)


async def test_a_learnt_context_is_kept_in_the_state_store_for_the_next_wrapped_client(
    simulator, openai_client, tmp_path
):
    """Another process, or the next run of a short-lived one, fits its first call: no refusal again."""
    simulator.context_tokens = 1024
    state = f"sqlite:///{tmp_path / 'state.sqlite3'}"
    await resolve(_chat(sdk.wrap(openai_client, state=state)))
    await resolve(_chat(sdk.wrap(openai_client, state=state)))  # a new wrapped client, the same store
    await resolve(_chat(sdk.wrap(openai_client, state="memory")))  # a store that never learnt it
    assert [CHAT in request.body for request in simulator.requests] == [True, False, False, True, False]
