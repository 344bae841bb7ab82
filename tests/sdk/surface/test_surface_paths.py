"""Every intercepted path of `sdk.surface`, sync and async, streamed and not, through the simulator.

The cases are generated from the table itself and from the client's own raw-response wrappers
(`with_raw_response` / `with_streaming_response`, at resource and client level): each call must give
exactly one kvwise span, reach the server in canonical order (tools sorted by name) with the cap,
and succeed after an injected 500 or 429 with kvwise's retry (the client's own retries are left on
at their default, and the span still counts 2 attempts: the client did not retry by itself).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pydantic
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import sdk
from sdk import semconv as sc
from sdk import surface
from sdk.call import Api
from sdk.surface import Kind
from tests.sdk.helpers import DECODE_SECONDS_PER_TOKEN, collect, require, resolve

CAP = 77
FORMS = (
    "plain",
    "with_raw_response",
    "with_streaming_response",
    "client.with_raw_response",
    "client.with_streaming_response",
)
_CAP_PARAM = {
    Api.CHAT: "max_completion_tokens",
    Api.RESPONSES: "max_output_tokens",
    Api.MESSAGES: "max_tokens",
    Api.COMPLETIONS: "max_tokens",
}


class StructuredAnswer(pydantic.BaseModel):
    answer: str


@dataclass(frozen=True)
class PathCase:
    package: str
    path: tuple[str, ...]
    method: str
    api: Api
    kind: Kind
    form: str
    stream: bool  # create(stream=True), or a stream helper

    def __str__(self) -> str:
        streamed = "-stream" if self.stream else ""
        return f"{self.form}:{'.'.join(self.path)}.{self.method}{streamed}"


def _bare(package: str) -> Any:
    if package == "openai":
        return openai.OpenAI(api_key="k", base_url="http://127.0.0.1:9/v1")
    return anthropic.Anthropic(api_key="k", base_url="http://127.0.0.1:9")


def _resolve_path(root: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        root = getattr(root, name)
    return root


def _has_form(bare: Any, resource: Any, path: tuple[str, ...], form: str, method: str) -> bool:
    if form == "plain":
        return True
    if form.startswith("client."):
        try:
            return hasattr(_resolve_path(getattr(bare, form.removeprefix("client.")), path), method)
        except AttributeError:
            return False
    return hasattr(getattr(resource, form), method)


def _streams(api: Api, method: str, kind: Kind) -> tuple[bool, ...]:
    if kind is not Kind.CALL or method == "parse":
        return (False,)
    if method == "stream":
        return (True,)
    return (False, True)


def _cases() -> Iterator[PathCase]:
    for package, resources in surface.INTERCEPTED.items():
        bare = _bare(package)
        for path, methods in resources.items():
            try:
                resource = _resolve_path(bare, path)
            except AttributeError:  # a resource of a newer release than the installed one
                continue
            for spec in methods:
                for form in FORMS:
                    if not _has_form(bare, resource, path, form, spec.method):
                        continue  # the client has no such raw form of this method
                    for stream in _streams(spec.api, spec.method, spec.kind):
                        yield PathCase(package, path, spec.method, spec.api, spec.kind, form, stream)
        for dotted in surface.REBOUND[package]:
            *path, method = dotted
            api = Api.CHAT if path[-1] == "completions" else Api.RESPONSES
            yield PathCase(package, tuple(path), method, api, Kind.CALL, "plain", True)


CASES = list(_cases())


def _tools(api: Api) -> list[dict[str, Any]]:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    if api is Api.CHAT:
        return [
            {"type": "function", "function": {"name": n, "description": n, "parameters": schema, "strict": True}}
            for n in ("zeta", "alpha")
        ]
    if api is Api.RESPONSES:
        return [
            {"type": "function", "name": n, "description": n, "parameters": schema, "strict": False}
            for n in ("zeta", "alpha")
        ]
    return [{"name": n, "description": n, "input_schema": schema} for n in ("zeta", "alpha")]


def request_kwargs(case: PathCase) -> dict[str, Any]:
    """A request of the case's API: tools out of order, no output cap, a structured format for parse."""
    system = f"Request ID: {uuid.uuid4()}\nYou answer in JSON."
    if case.api is Api.COMPLETIONS:
        kwargs: dict[str, Any] = {"model": "gpt-3.5-turbo-instruct", "prompt": "Say hi"}
    elif case.api is Api.CHAT:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": "hi"}]
        kwargs = {"model": "gpt-4.1", "messages": messages, "tools": _tools(case.api)}
    elif case.api is Api.RESPONSES:
        kwargs = {"model": "gpt-4.1", "instructions": system, "input": "hi", "tools": _tools(case.api)}
    else:
        kwargs = {
            "model": "claude-sonnet-4-6",
            "system": system,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": _tools(case.api),
        }
    if case.method == "parse":
        kwargs[{Api.CHAT: "response_format", Api.RESPONSES: "text_format", Api.MESSAGES: "output_format"}[case.api]] = (
            StructuredAnswer
        )
    if case.stream and case.method == "create":
        kwargs["stream"] = True
    if case.kind is Kind.BATCH:
        return {"requests": [{"custom_id": "a", "params": kwargs}, {"custom_id": "b", "params": dict(kwargs)}]}
    return kwargs


def _client(case: PathCase, simulator: Any, mode: str) -> Any:
    if case.package == "openai":
        cls = openai.OpenAI if mode == "sync" else openai.AsyncOpenAI
        return cls(base_url=simulator.openai_base_url, api_key="k")
    cls = anthropic.Anthropic if mode == "sync" else anthropic.AsyncAnthropic
    return cls(base_url=simulator.anthropic_base_url, api_key="k")


def target_method(wrapped: Any, case: PathCase) -> Any:
    """The method the case calls, reached the way its form says."""
    if case.form.startswith("client."):
        return getattr(_resolve_path(getattr(wrapped, case.form.removeprefix("client.")), case.path), case.method)
    resource = _resolve_path(wrapped, case.path)
    if case.form != "plain":
        resource = getattr(resource, case.form)
    return getattr(resource, case.method)


async def _drain(value: Any) -> list[Any]:
    if hasattr(value, "__aiter__") or hasattr(value, "__iter__") and not isinstance(value, pydantic.BaseModel):
        return await collect(value)
    return [value]


async def run_case(case: PathCase, method: Any, kwargs: dict[str, Any]) -> list[Any]:
    """Call `method` and read what it gave to the end, as an app would: the events or the object."""
    result = method(**kwargs)
    if "streaming" in case.form:  # a context manager whose response is read inside it
        if hasattr(result, "__aenter__"):
            async with result as response:
                return await _drain(await resolve(response.parse()))
        with result as response:
            return await _drain(response.parse())
    if case.method == "stream" and not case.form.endswith("raw_response"):  # the stream helpers' managers
        if hasattr(result, "__aenter__"):
            async with result as stream:
                return [event async for event in stream]
        with result as stream:
            return list(stream)
    result = await resolve(result)
    if "raw_response" in case.form:
        result = await resolve(result.parse())
    return await _drain(result) if case.stream else [result]


@pytest.fixture
def spans() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def _tool_names(api: Api, tools: list[dict[str, Any]]) -> list[str]:
    return [tool["function"]["name"] if api is Api.CHAT else tool["name"] for tool in tools]


@pytest.mark.parametrize("case", CASES, ids=str)
async def test_every_intercepted_path_gives_one_span_canonical_order_the_cap_and_retries(case, simulator, mode, spans):
    simulator.reply = '{"answer": "ok"}'
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    wrapped = sdk.wrap(_client(case, simulator, mode), sdk.Policy(max_output_tokens=CAP), tracer_provider=provider)
    simulator.fail(500 if CASES.index(case) % 2 else 429, headers={"retry-after-ms": "1"})

    events = await run_case(case, target_method(wrapped, case), request_kwargs(case))

    assert events, "the call gave nothing"
    kvwise_spans = [span for span in spans.get_finished_spans() if span.kind is SpanKind.CLIENT]
    assert len(kvwise_spans) == 1
    assert kvwise_spans[0].attributes[sc.KVWISE_ATTEMPTS] == 2
    first, second = simulator.requests
    assert first.body == second.body
    assert second.headers["x-stainless-retry-count"] == "1"
    bodies = [request["params"] for request in second.body["requests"]] if case.kind is Kind.BATCH else [second.body]
    for body in bodies:
        if case.api is not Api.COMPLETIONS:
            assert _tool_names(case.api, body["tools"]) == ["alpha", "zeta"]
        if case.kind is Kind.COUNT:
            assert _CAP_PARAM[case.api] not in body
        else:
            assert body[_CAP_PARAM[case.api]] == CAP


LOOP_UNIT = "I will keep repeating this sentence. "


def _one_span(spans: InMemorySpanExporter) -> Any:
    (span,) = [span for span in spans.get_finished_spans() if span.kind is SpanKind.CLIENT]
    return span


@pytest.mark.parametrize("stream", [False, True], ids=["object", "stream"])
async def test_beta_responses_are_read_as_responses_usage_finish_and_output_text(simulator, mode, spans, stream):
    simulator.reply = "Beta answers are read too."
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    client = _client(
        PathCase("openai", ("beta", "responses"), "create", Api.RESPONSES, Kind.CALL, "plain", stream), simulator, mode
    )
    require(client, "beta.responses")
    wrapped = sdk.wrap(client, sdk.Policy(capture_content=True), tracer_provider=provider)

    result = await resolve(wrapped.beta.responses.create(model="gpt-4.1", input="hi", stream=stream))
    events = await collect(result) if stream else [result]

    final = events[-1].response if stream else events[-1]
    assert type(final).__name__ == "BetaResponse"
    span = _one_span(spans)
    assert span.attributes[sc.GEN_AI_USAGE_INPUT_TOKENS] == final.usage.input_tokens > 0
    assert sc.KVWISE_USAGE_ESTIMATED not in span.attributes
    assert span.attributes[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("completed",)
    assert "Beta answers are read too." in span.attributes[sc.GEN_AI_OUTPUT_MESSAGES]


async def test_a_cut_beta_responses_stream_ends_with_the_beta_incomplete_event(simulator, openai_client):
    simulator.loop(LOOP_UNIT)
    simulator.token_delay = (
        DECODE_SECONDS_PER_TOKEN  # still sending at the cut (without it, a busy client read all first)
    )
    require(openai_client, "beta.responses")
    wrapped = sdk.wrap(openai_client, sdk.Policy(max_output_tokens=2000))
    events = await collect(await resolve(wrapped.beta.responses.create(model="gpt-4.1", input="go", stream=True)))
    assert type(events[-1]).__name__ == "BetaResponseIncompleteEvent"
    assert type(events[-1].response).__name__ == "BetaResponse"
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"
    assert type(events[-1].response.output[0]).__name__ == "BetaResponseOutputMessage"
    assert LOOP_UNIT in events[-1].response.output[0].content[0].text
    assert simulator.streams[-1].client_closed
