"""A wrapped stream owns its telemetry: the client's type, one span ended exactly once however the
stream ends, the HTTP response always closed, no reference cycle (the cycle collector is off in
these tests), the client's stream helpers working on it, and a re-sent stream under the call span."""

from __future__ import annotations

import asyncio
import gc
import inspect
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

import sdk
from sdk import semconv as sc
from tests.sdk.helpers import anthropic_traces_itself, collect, connection_errors, http_library, resolve
from tests.sdk.telemetry.test_telemetry_spans import Otel, otel  # noqa: F401

USER = [{"role": "user", "content": "Tell me something."}]
CLAUDE = "claude-sonnet-4-6"
PROSE = "Prefill reads the whole prompt at once; decode then writes the answer one token at a time."
LONG_REPLY = "word " * 1000  # still streaming when the caller lets go after the first events (2 s at TOKEN_DELAY)
TOKEN_DELAY = 0.002
READER_WAIT_S = 10.0  # a bound, never reached unless the reader hangs
CREATE: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "chat": ("openai_client", lambda c: c.chat.completions.create(model="m", messages=USER, stream=True)),
    "responses": ("openai_client", lambda c: c.responses.create(model="gpt-5.4", input="go", stream=True)),
    "messages": (
        "anthropic_client",
        lambda c: c.messages.create(model=CLAUDE, max_tokens=500, messages=USER, stream=True),
    ),
}
CLIENT_TYPES = {"chat": openai, "responses": openai, "messages": anthropic}


@pytest.fixture
def no_cycle_collector() -> Iterator[None]:
    """Only reference counting frees objects: a stream kept alive by a cycle stays alive."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _roots(otel: Otel) -> list[ReadableSpan]:
    return [span for span in otel.spans() if span.parent is None]


async def _maybe(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def _first(stream: Any) -> Any:
    return await anext(stream) if hasattr(stream, "__anext__") else next(stream)


async def _settle() -> None:
    """Let tasks a dropped async stream scheduled (its response's close) run."""
    for _ in range(5):
        await asyncio.sleep(0)


async def _open(request: pytest.FixtureRequest, api: str, otel: Otel) -> Any:
    fixture, create = CREATE[api]
    client = sdk.wrap(
        request.getfixturevalue(fixture), sdk.Policy(loop_guard=False), tracer_provider=otel.tracer_provider
    )
    return await resolve(create(client))


@pytest.mark.parametrize("api", sorted(CREATE))
async def test_a_wrapped_stream_is_still_the_clients_stream_type(
    simulator: Any, request: pytest.FixtureRequest, mode: str, api: str, otel: Otel
) -> None:
    stream = await _open(request, api, otel)
    module = CLIENT_TYPES[api]
    assert isinstance(stream, module.Stream if mode == "sync" else module.AsyncStream)
    assert type(stream.response) is http_library(module).Response  # the client's own response, as the bare stream's
    await collect(stream)


async def _exhaust(stream: Any) -> None:
    await collect(stream)


async def _close(stream: Any) -> None:
    await _first(stream)
    await _maybe(stream.close())


async def _with_exit(stream: Any) -> None:
    if hasattr(stream, "__aenter__"):
        async with stream as entered:
            assert entered is stream
            await _first(entered)
    else:
        with stream as entered:
            assert entered is stream
            next(entered)


async def _response_close(stream: Any) -> None:
    """What the client's stream helpers do: they close the response they read at their start."""
    response = stream.response
    await _first(stream)
    await _maybe(response.aclose() if hasattr(stream, "__anext__") else response.close())


ENDINGS: dict[str, Callable[[Any], Any] | None] = {
    "read to the end": _exhaust,
    "close() half-read": _close,
    "with exit half-read": _with_exit,
    "response.close() half-read": _response_close,
    "dropped half-read": _first,
    "dropped unread": None,
}


@pytest.mark.parametrize("api", sorted(CREATE))
@pytest.mark.parametrize("ending", list(ENDINGS))
async def test_the_call_span_ends_exactly_once_and_the_response_is_closed_however_the_stream_ends(
    simulator: Any,
    request: pytest.FixtureRequest,
    mode: str,
    api: str,
    ending: str,
    otel: Otel,
    no_cycle_collector: None,
) -> None:
    simulator.reply, simulator.token_delay = LONG_REPLY, TOKEN_DELAY
    stream = await _open(request, api, otel)
    http_response = stream.response  # the client's own httpx2 response (its close hooked)
    assert _roots(otel) == []
    if (end := ENDINGS[ending]) is not None:
        await end(stream)
    del stream  # the caller lets go: with the cycle collector off, only a cycle-free stream is freed
    await _settle()

    [root] = _roots(otel)
    assert http_response.is_closed
    attributes = root.attributes or {}
    assert (
        sc.ERROR_TYPE not in attributes and root.status.status_code is not StatusCode.ERROR
    )  # the caller's end is no error
    if ending == "read to the end":
        assert sc.KVWISE_STREAM_ABANDONED not in attributes
    else:
        assert attributes[sc.KVWISE_STREAM_ABANDONED] is True
        assert simulator.streams[-1].client_closed


async def test_a_dropped_stream_is_freed_by_reference_counting_alone(
    simulator: Any, openai_client: Any, otel: Otel, no_cycle_collector: None
) -> None:
    simulator.reply, simulator.token_delay = LONG_REPLY, TOKEN_DELAY
    wrapped = sdk.wrap(openai_client, tracer_provider=otel.tracer_provider)
    stream = await resolve(wrapped.chat.completions.create(model="m", messages=USER, stream=True))
    await _first(stream)
    alive = weakref.ref(stream)
    del stream
    assert alive() is None
    assert len(_roots(otel)) == 1


def _helper_text(api: str, event: Any) -> str:
    if api == "messages":
        return event.delta.text if event.type == "content_block_delta" and event.delta.type == "text_delta" else ""
    if api == "chat":
        return event.delta if event.type == "content.delta" else ""
    return event.delta if event.type == "response.output_text.delta" else ""


HELPERS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "chat": ("openai_client", lambda c: c.chat.completions.stream(model="m", messages=USER)),
    "responses": ("openai_client", lambda c: c.responses.stream(model="gpt-5.4", input="go")),
    "messages": ("anthropic_client", lambda c: c.messages.stream(model=CLAUDE, max_tokens=500, messages=USER)),
}


@pytest.mark.parametrize("api", sorted(HELPERS))
@pytest.mark.parametrize("read_all", [True, False], ids=["read to the end", "left half-read"])
async def test_the_clients_stream_helpers_work_on_a_wrapped_stream_and_end_its_span_on_exit(
    simulator: Any, request: pytest.FixtureRequest, mode: str, api: str, read_all: bool, otel: Otel
) -> None:
    simulator.reply = PROSE
    fixture, open_helper = HELPERS[api]
    manager = open_helper(sdk.wrap(request.getfixturevalue(fixture), tracer_provider=otel.tracer_provider))
    text = ""
    if hasattr(manager, "__aenter__"):
        async with manager as stream:
            async for event in stream:
                text += _helper_text(api, event)
                if not read_all and text:
                    break
    else:
        with manager as stream:
            for event in stream:
                text += _helper_text(api, event)
                if not read_all and text:
                    break
    [root] = _roots(otel)
    assert (text == simulator.reply) is read_all
    assert sc.ERROR_TYPE not in (root.attributes or {})
    assert (root.attributes or {}).get(sc.KVWISE_STREAM_ABANDONED, False) is not read_all


async def test_a_streamed_raw_response_parses_to_the_guarded_stream(
    simulator: Any, openai_client: Any, otel: Otel
) -> None:
    wrapped = sdk.wrap(openai_client, tracer_provider=otel.tracer_provider)
    raw = await resolve(wrapped.chat.completions.with_raw_response.create(model="m", messages=USER, stream=True))
    stream = await _maybe(raw.parse())
    assert isinstance(stream, (openai.Stream, openai.AsyncStream))
    events = await collect(stream)
    assert "".join(e.choices[0].delta.content or "" for e in events if e.choices) == simulator.reply
    [root] = _roots(otel)
    assert root.attributes is not None and sc.ERROR_TYPE not in root.attributes


@pytest.mark.skipif(not anthropic_traces_itself(), reason="the installed anthropic traces nothing of its own")
async def test_a_stream_sent_again_is_sent_under_the_call_span(simulator: Any, mode: str, otel: Otel) -> None:
    cls = anthropic.Anthropic if mode == "sync" else anthropic.AsyncAnthropic
    client = cls(
        base_url=simulator.anthropic_base_url,
        api_key="test-key",  # retries as the Policy says: one re-send
        open_telemetry={"tracer_provider": otel.tracer_provider},
    )
    simulator.fail(503, headers={"retry-after-ms": "5"})
    wrapped = sdk.wrap(client, tracer_provider=otel.tracer_provider)
    stream = await resolve(wrapped.messages.create(model=CLAUDE, max_tokens=64, messages=USER, stream=True))
    await collect(stream)
    [root] = _roots(otel)  # the client's own span stays, under ours; each send names it as its parent
    [own] = [span for span in otel.spans() if span.name.startswith("anthropic.")]  # its retries run inside it
    assert own.parent is not None and own.parent.span_id == root.context.span_id
    assert len(simulator.requests) == 2
    parent = f"{own.context.span_id:016x}"
    assert all(request.headers["traceparent"].split("-")[2] == parent for request in simulator.requests)


def test_a_stream_closed_from_another_thread_stops_its_reader_as_the_bare_client_does(
    simulator: Any, otel: Otel
) -> None:
    simulator.reply, simulator.token_delay = LONG_REPLY, TOKEN_DELAY
    client = openai.OpenAI(base_url=simulator.openai_base_url, api_key="test-key", max_retries=0)
    wrapped = sdk.wrap(client, sdk.Policy(loop_guard=False), tracer_provider=otel.tracer_provider)
    outcomes: dict[str, list[bool]] = {}
    for name, source in (("bare", client), ("wrapped", wrapped)):
        stream = source.chat.completions.create(model="m", messages=USER, stream=True)
        reading, errors = threading.Event(), []

        def read(
            stream: Any = stream, reading: threading.Event = reading, errors: list[BaseException] = errors
        ) -> None:
            try:
                for _ in stream:
                    reading.set()
            except Exception as exc:  # what the reader sees is the subject of the test
                errors.append(exc)

        reader = threading.Thread(target=read)
        reader.start()
        assert reading.wait(READER_WAIT_S)
        stream.close()
        reader.join(READER_WAIT_S)
        assert not reader.is_alive()
        outcomes[name] = [isinstance(error, connection_errors(openai)) for error in errors]
    assert outcomes["wrapped"] == outcomes["bare"] == [True]  # the client's connection error, or a subclass
    [root] = _roots(otel)
    assert root.end_time is not None


async def _two_loops(stream: Any) -> list[Any]:
    """The events of `stream` read by a loop left with `break` after two, then a second loop."""
    events: list[Any] = []
    if hasattr(stream, "__aiter__"):
        async for event in stream:
            events.append(event)
            if len(events) == 2:
                break
        events += [event async for event in stream]
    else:
        for event in stream:
            events.append(event)
            if len(events) == 2:
                break
        events += list(stream)
    return events


async def test_a_loop_left_with_break_can_be_taken_up_again_as_with_the_bare_client(
    simulator: Any, openai_client: Any, otel: Otel
) -> None:
    simulator.reply = PROSE
    create = lambda c: c.chat.completions.create(model="m", messages=USER, stream=True)  # noqa: E731
    bare = await _two_loops(await resolve(create(openai_client)))
    wrapped = await _two_loops(await resolve(create(sdk.wrap(openai_client, tracer_provider=otel.tracer_provider))))
    assert [e.choices[0].delta.content for e in wrapped] == [e.choices[0].delta.content for e in bare]
    assert "".join(e.choices[0].delta.content or "" for e in wrapped) == PROSE
    [root] = _roots(otel)
    assert sc.ERROR_TYPE not in (root.attributes or {})


@pytest.mark.parametrize("name", list(CREATE))
async def test_a_stream_read_to_its_end_calls_the_clients_close_as_often_and_when_bare_does(
    request: pytest.FixtureRequest, name: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At its end the client's stream closes its HTTP response itself; its `close()` runs only when the
    caller (or a stream helper's `with` exit) closes it, wrapped as bare. An app or library that hooks
    `close` (anthropic's tool runner, closing a compaction stream) sees the same calls."""
    fixture, create = CREATE[name]
    client = request.getfixturevalue(fixture)
    package = CLIENT_TYPES[name]
    cls = package.Stream if mode == "sync" else package.AsyncStream
    calls: list[str] = []
    original = cls.close
    if mode == "sync":

        def close(stream: Any) -> None:
            calls.append("close")
            original(stream)
    else:

        async def close(stream: Any) -> None:
            calls.append("close")
            await original(stream)

    monkeypatch.setattr(cls, "close", close)
    seen = {}
    for how, source in (("bare", client), ("wrapped", sdk.wrap(client))):
        stream = await resolve(create(source))
        await collect(stream)
        at_end = list(calls)
        await _maybe(stream.close())
        seen[how] = (at_end, list(calls))
        calls.clear()
    assert seen["wrapped"] == seen["bare"] == ([], ["close"])
