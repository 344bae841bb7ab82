"""A wrapped client's raw and streaming responses reach the caller unread, as the bare client's do.

`with_raw_response` / `with_streaming_response` leave it to the caller when, and whether, the body is
read and parsed: kvwise reads nothing before the caller does (a streaming response's body is still
unconsumed inside its `with`, a raw response holds no parsed answer) and its span's bookkeeping
(usage, response id) comes from the caller's own `parse()`; a response read as bytes or lines, or
closed unread, ends the span with what is known. Each is compared with the bare client, over real
HTTP against the provider simulator.
"""

from __future__ import annotations

import gc
import json
from contextlib import AsyncExitStack, ExitStack
from typing import Any

import anthropic
import pytest

import sdk
from sdk import semconv as sc
from tests.sdk.helpers import anthropic_traces_itself, collect, resolve
from tests.sdk.telemetry.test_telemetry_spans import Otel, otel  # noqa: F401

USER = [{"role": "user", "content": "hi"}]
CLAUDE = "claude-sonnet-4-6"


def _create(client: Any, provider: str, form: str, **kwargs: Any) -> Any:
    """The provider's model call in the raw form `form`."""
    if provider == "openai":
        return getattr(client.chat.completions, form).create(model="m", messages=USER, **kwargs)
    return getattr(client.messages, form).create(model=CLAUDE, max_tokens=64, messages=USER, **kwargs)


async def _streaming(client: Any, provider: str, read: Any) -> tuple[bool, Any]:
    """Inside a `with_streaming_response` call: whether the body was consumed before the caller read
    anything, and what `read(response)` gives (awaited for the async client)."""
    manager = _create(client, provider, "with_streaming_response")
    if hasattr(manager, "__aenter__"):
        async with AsyncExitStack() as stack:
            response = await stack.enter_async_context(manager)
            return response.http_response.is_stream_consumed, await read(response)
    with ExitStack() as stack:
        response = stack.enter_context(manager)
        return response.http_response.is_stream_consumed, await read(response)


def _body(lines: list[str]) -> dict[str, Any]:
    """A JSON body read as lines, without what differs between two answers (id, time)."""
    body = json.loads("".join(lines))
    return {name: value for name, value in body.items() if name not in ("id", "created")}


def _output_tokens(answer: Any) -> int:
    usage = answer.usage
    return usage.completion_tokens if hasattr(usage, "completion_tokens") else usage.output_tokens


async def _lines(response: Any) -> list[str]:
    lines = response.iter_lines()
    if hasattr(lines, "__aiter__"):
        return [line async for line in lines]
    return list(lines)


async def _parse(response: Any) -> Any:
    return await resolve(response.parse())


async def _nothing(response: Any) -> None:
    return None


@pytest.fixture(params=["openai", "anthropic"])
def provider(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def client(provider: str, openai_client: Any, anthropic_client: Any) -> Any:
    return openai_client if provider == "openai" else anthropic_client


@pytest.mark.parametrize("read", [_lines, _parse, _nothing], ids=["iter_lines", "parse", "unread"])
async def test_a_streaming_response_is_the_callers_to_read(client, provider, otel, read):
    bare_consumed, bare_read = await _streaming(client, provider, read)
    wrapped = sdk.wrap(client, tracer_provider=otel.tracer_provider)
    consumed, got = await _streaming(wrapped, provider, read)
    assert consumed is bare_consumed is False  # the body is the caller's to read, wrapped as bare
    [span] = otel.spans()  # the call's one span ended with the response
    attributes = span.attributes or {}
    if read is _lines:
        assert _body(got) == _body(bare_read)  # the whole body, read by the caller alone
    if read is _parse:  # the caller's parse gave kvwise its bookkeeping
        assert type(got) is type(bare_read)
        assert attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == _output_tokens(got) > 0
        assert attributes[sc.GEN_AI_RESPONSE_ID] == got.id
    else:  # nothing parsed: nothing of the body recorded
        assert sc.GEN_AI_USAGE_OUTPUT_TOKENS not in attributes


async def test_a_raw_response_is_parsed_when_the_caller_parses_it(client, provider, otel):
    bare = await resolve(_create(client, provider, "with_raw_response"))
    wrapped = sdk.wrap(client, tracer_provider=otel.tracer_provider)
    raw = await resolve(_create(wrapped, provider, "with_raw_response"))
    assert type(raw) is type(bare)
    assert raw._parsed_by_type == bare._parsed_by_type == {}  # the client's parse cache: nothing parsed yet
    assert otel.spans() == ()  # the answer's bookkeeping waits for the caller's parse
    parsed = await resolve(raw.parse())
    assert type(parsed) is type(answer := await resolve(bare.parse()))
    assert parsed.model_dump(exclude={"id", "created"}) == answer.model_dump(exclude={"id", "created"})
    assert await resolve(raw.parse()) is parsed  # the client's own cache, as bare
    [span] = otel.spans()
    assert (span.attributes or {})[sc.GEN_AI_RESPONSE_ID] == parsed.id
    assert (span.attributes or {})[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == _output_tokens(parsed) > 0


async def test_a_raw_response_dropped_unparsed_ends_its_span(client, provider, otel):
    wrapped = sdk.wrap(client, tracer_provider=otel.tracer_provider)
    raw = await resolve(_create(wrapped, provider, "with_raw_response"))
    assert raw.http_response.status_code == 200
    del raw
    [span] = otel.spans()
    assert sc.GEN_AI_RESPONSE_ID not in (span.attributes or {})


async def test_a_raw_response_parsed_at_once_records_its_answer(client, provider, otel):
    wrapped = sdk.wrap(client, tracer_provider=otel.tracer_provider)
    parsed = await resolve((await resolve(_create(wrapped, provider, "with_raw_response"))).parse())  # raw then gone
    [span] = otel.spans()
    assert (span.attributes or {})[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == _output_tokens(parsed) > 0


def _text(provider: str, events: list[Any]) -> str:
    """The answer's text, from a stream's events."""
    if provider == "openai":
        return "".join(event.choices[0].delta.content or "" for event in events if event.choices)
    return "".join(event.delta.text for event in events if event.type == "content_block_delta")


async def test_a_streamed_raw_response_builds_its_stream_when_the_caller_parses_it(client, provider, otel, simulator):
    bare = await resolve(_create(client, provider, "with_raw_response", stream=True))
    wrapped = sdk.wrap(client, tracer_provider=otel.tracer_provider)
    raw = await resolve(_create(wrapped, provider, "with_raw_response", stream=True))
    assert type(raw) is type(bare)
    assert raw._parsed_by_type == bare._parsed_by_type == {}  # no stream built yet, as bare
    assert otel.spans() == ()
    stream = await resolve(raw.parse())
    assert isinstance(stream, type(bare_stream := await resolve(bare.parse())))
    assert await resolve(raw.parse()) is stream  # the client's own cache gives the same stream, as bare
    assert _text(provider, await collect(stream)) == _text(provider, await collect(bare_stream)) == simulator.reply
    [span] = [span for span in otel.spans() if span.parent is None]  # kvwise watched the stream the caller read
    assert (span.attributes or {})[sc.GEN_AI_USAGE_OUTPUT_TOKENS] > 0
    assert (span.attributes or {})[sc.KVWISE_STREAM_CHUNKS] > 0


@pytest.mark.skipif(not anthropic_traces_itself(), reason="the installed anthropic traces nothing of its own")
async def test_a_streamed_raw_response_dropped_unparsed_ends_the_clients_own_span_as_bare(simulator, mode, otel):
    """anthropic's own span of a streamed raw response ends when the caller drops it unread: wrapped, no
    stream of kvwise's keeps it alive (kvwise, given no provider, records nothing: none is global)."""
    cls = anthropic.Anthropic if mode == "sync" else anthropic.AsyncAnthropic
    for make in (lambda client: client, sdk.wrap):
        otel.spans_exporter.clear()
        client = make(
            cls(
                base_url=simulator.anthropic_base_url,
                api_key="test-key",
                open_telemetry={"tracer_provider": otel.tracer_provider},
            )
        )
        raw = await resolve(_create(client, "anthropic", "with_raw_response", stream=True))
        assert otel.spans() == ()  # the body is not read: the call is not over
        del raw
        gc.collect()
        [span] = otel.spans()
        assert span.name == "anthropic.messages.create" and sc.ERROR_TYPE not in (span.attributes or {})
