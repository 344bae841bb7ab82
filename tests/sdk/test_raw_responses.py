"""A wrapped client's raw and streaming responses reach the caller unread, as the bare client's do.

`with_raw_response` / `with_streaming_response` leave it to the caller when, and whether, the body is
read and parsed: kvwise reads nothing before the caller does (a streaming response's body is still
unconsumed inside its `with`, a raw response holds no parsed answer) and its span's bookkeeping
(usage, response id) comes from the caller's own `parse()`; a response read as bytes or lines, or
closed unread, ends the span with what is known. Each is compared with the bare client, over real
HTTP against the provider simulator.
"""

from __future__ import annotations

import json
from contextlib import AsyncExitStack, ExitStack
from typing import Any

import pytest

import sdk
from sdk.telemetry import semconv as sc
from tests.sdk.helpers import resolve
from tests.sdk.test_telemetry_spans import Otel, otel  # noqa: F401

USER = [{"role": "user", "content": "hi"}]
CLAUDE = "claude-sonnet-4-6"


def _create(client: Any, provider: str, form: str) -> Any:
    """The provider's model call in the raw form `form`."""
    if provider == "openai":
        return getattr(client.chat.completions, form).create(model="m", messages=USER)
    return getattr(client.messages, form).create(model=CLAUDE, max_tokens=64, messages=USER)


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
