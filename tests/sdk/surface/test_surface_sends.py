"""The roads below the resources: the client's own `post` and `request`, as frameworks use them.

LiteLLM sends a Chat call as `client.post("/chat/completions", body=..., cast_to=ChatCompletion,
options=..., stream=..., stream_cls=...)` (with the raw-response header, reading `.parse()`), so a
wrapped client passed to it must run the same chain and send as `chat.completions.create`: one
kvwise span, the rewritten request. A send to any other path reaches the server as it was written.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

import anthropic
import openai
import pytest
from openai._models import FinalRequestOptions
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import sdk
from sdk import semconv as sc
from sdk.call import Api
from sdk.surface import Kind
from tests.sdk.helpers import collect, resolve
from tests.sdk.surface.test_surface_paths import _CAP_PARAM, CASES, PathCase, request_kwargs, run_case, target_method

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # LiteLLM reads its cost map from the network otherwise
litellm = pytest.importorskip("litellm")

CAP = 77  # the cap of `test_surface_paths`' cases, whose requests these re-send
MODEL = "gpt-4.1"
_SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}
TOOLS = [
    {"type": "function", "function": {"name": name, "description": name, "parameters": _SCHEMA}}
    for name in ("zeta", "alpha")
]
MESSAGES = [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "What is prefill?"}]


@pytest.fixture
def spans() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def _wrapped(client: Any, spans: InMemorySpanExporter) -> Any:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    return sdk.wrap(client, sdk.Policy(max_output_tokens=CAP), tracer_provider=provider)


def _client_spans(spans: InMemorySpanExporter) -> list[Any]:
    return [span for span in spans.get_finished_spans() if span.kind is SpanKind.CLIENT]


def _tool_names(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body["tools"]]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_litellm_with_a_wrapped_client_sends_the_rewritten_request_under_one_kvwise_span(
    simulator, openai_client, mode, spans, stream
):
    wrapped = _wrapped(openai_client, spans)
    complete = litellm.completion if mode == "sync" else litellm.acompletion
    params = dict(
        model=f"openai/{MODEL}", messages=MESSAGES, tools=TOOLS, api_base=simulator.openai_base_url, api_key="test-key"
    )

    response = await resolve(complete(client=wrapped, stream=stream, **params))
    events = await collect(response) if stream else [response]

    assert _text(events, stream) == simulator.reply
    (sent,) = simulator.requests
    assert sent.body["max_completion_tokens"] == CAP
    assert _tool_names(sent.body) == ["alpha", "zeta"]
    (span,) = _client_spans(spans)
    assert span.name == f"chat {MODEL}"
    assert span.attributes[sc.GEN_AI_REQUEST_MAX_TOKENS] == CAP
    assert span.attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] > 0


def _text(events: list[Any], stream: bool) -> str:
    if stream:
        return "".join(event.choices[0].delta.content or "" for event in events if event.choices)
    return str(events[0].choices[0].message.content)


def _send(client: Any, via: str, path: str, body: dict[str, Any], cast_to: Any, stream: bool) -> Any:
    """`client.post(...)`, or the `client.request(...)` that `post` itself makes of it."""
    stream_cls = (openai.Stream if isinstance(client, openai.OpenAI) else openai.AsyncStream)[ChatCompletionChunk]
    if via == "post":
        return client.post(
            path, body=body, cast_to=cast_to, options={"headers": {"x-app": "1"}}, stream=stream, stream_cls=stream_cls
        )
    options = FinalRequestOptions.construct(method="post", url=path, json_data=body, headers={"x-app": "1"})
    return client.request(cast_to, options, stream=stream, stream_cls=stream_cls)


@pytest.mark.parametrize("via", ["post", "request"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_raw_send_to_a_model_path_goes_through_kvwise_and_answers_as_the_bare_client_does(
    simulator, openai_client, mode, spans, via, stream
):
    body = {"model": MODEL, "messages": MESSAGES, "tools": TOOLS, **({"stream": True} if stream else {})}
    bare = await resolve(_send(openai_client, via, "/chat/completions", dict(body), ChatCompletion, stream))
    bare_events = await collect(bare) if stream else [bare]
    simulator.fail(429, headers={"retry-after-ms": "1"})
    wrapped = _wrapped(openai_client, spans)

    answer = await resolve(_send(wrapped, via, "/chat/completions", dict(body), ChatCompletion, stream))
    events = await collect(answer) if stream else [answer]

    assert answer.__class__ is bare.__class__
    assert [type(event) for event in events] == [type(event) for event in bare_events]
    assert _text(events, stream) == _text(bare_events, stream) == simulator.reply
    _, refused, sent = simulator.requests
    assert refused.body == sent.body and sent.headers["x-stainless-retry-count"] == "1"
    assert sent.headers["x-app"] == "1"
    assert sent.body["max_completion_tokens"] == CAP and _tool_names(sent.body) == ["alpha", "zeta"]
    (span,) = _client_spans(spans)
    assert span.attributes[sc.KVWISE_ATTEMPTS] == 2


@pytest.mark.parametrize("via", ["post", "request"])
async def test_a_raw_send_to_any_other_path_reaches_the_server_as_written(simulator, openai_client, mode, spans, via):
    body = {"model": MODEL, "messages": MESSAGES, "tools": TOOLS, "purpose": "batch"}
    wrapped = _wrapped(openai_client, spans)

    with pytest.raises(openai.NotFoundError):  # the simulator serves no /files: the bare client's own error
        await resolve(_send(wrapped, via, "/files", dict(body), object, False))

    (sent,) = simulator.requests
    assert sent.path.endswith("/files") and sent.body == body
    assert _client_spans(spans) == []


ROUTE_CASES = [case for case in CASES if case.form == "plain" and case.method in ("create", "count", "count_tokens")]
"""Each intercepted method whose request a framework could post itself, streamed and not, beta included."""


def _fresh(case: PathCase, simulator: Any, mode: str) -> Any:
    sync = mode == "sync"
    if case.package == "openai":
        return (openai.OpenAI if sync else openai.AsyncOpenAI)(base_url=simulator.openai_base_url, api_key="k")
    return (anthropic.Anthropic if sync else anthropic.AsyncAnthropic)(
        base_url=simulator.anthropic_base_url, api_key="k"
    )


def _recording_post(client: Any, sent: list[tuple[tuple[Any, ...], dict[str, Any], list[Any]]]) -> None:
    """Make `client.post` record its arguments and what it returned (set before any resource binds it)."""
    original = client.post

    def post(*args: Any, **kwargs: Any) -> Any:
        returned: list[Any] = []
        sent.append((args, kwargs, returned))
        result = original(*args, **kwargs)
        if not inspect.isawaitable(result):
            returned.append(result)
            return result

        async def awaited() -> Any:
            returned.append(await result)
            return returned[0]

        return awaited()

    client.post = post


@pytest.mark.parametrize("case", ROUTE_CASES, ids=str)
async def test_what_each_intercepted_method_posts_goes_through_kvwise_when_a_framework_posts_it_itself(
    case, simulator, mode, spans
):
    bare = _fresh(case, simulator, mode)
    sent: list[tuple[tuple[Any, ...], dict[str, Any], list[Any]]] = []
    _recording_post(bare, sent)
    kwargs = request_kwargs(case)
    if (
        case.api is Api.MESSAGES and case.kind is not Kind.COUNT
    ):  # the bare client needs a limit; kvwise clamps it to the cap
        for params in [request["params"] for request in kwargs["requests"]] if case.kind is Kind.BATCH else [kwargs]:
            params["max_tokens"] = 1000
    await run_case(case, target_method(bare, case), kwargs)
    ((args, post_kwargs, (bare_answer,)),) = sent
    wrapped = _wrapped(_fresh(case, simulator, mode), spans)

    answer = await resolve(wrapped.post(*args, **post_kwargs))
    if case.stream:
        await collect(answer)

    assert answer.__class__ is bare_answer.__class__
    body = simulator.requests[-1].body
    bodies = [request["params"] for request in body["requests"]] if case.kind is Kind.BATCH else [body]
    for body in bodies:
        if case.api is not Api.COMPLETIONS:
            assert [tool.get("name") or tool["function"]["name"] for tool in body["tools"]] == ["alpha", "zeta"]
        if case.kind is Kind.COUNT:
            assert _CAP_PARAM[case.api] not in body
        else:
            assert body[_CAP_PARAM[case.api]] == CAP
    assert len(_client_spans(spans)) == 1
