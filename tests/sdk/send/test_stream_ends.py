"""A wrapped stream ends as the bare client's ends: a stream the loop guard cuts ends with the event
classes of the API called (the beta API's own included) and with the usage the caller asked for; a
stream the caller stops reading on purpose is no error. Real clients over loopback, the real
OpenTelemetry SDK."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from opentelemetry.trace import StatusCode

import sdk
from sdk import semconv as sc
from tests.sdk.helpers import DECODE_SECONDS_PER_TOKEN, collect, require, resolve
from tests.sdk.telemetry.test_telemetry_spans import Otel, otel  # noqa: F401

USER = [{"role": "user", "content": "Tell me about the KV cache."}]
CLAUDE = "claude-sonnet-4-6"
LOOP_UNIT = "I will keep repeating this sentence. "
CAP = 200
USAGE = {"include_usage": True}


def _wrap(client: Any, otel: Otel) -> Any:
    return sdk.wrap(
        client,
        sdk.Policy(max_output_tokens=CAP),
        tracer_provider=otel.tracer_provider,
        meter_provider=otel.meter_provider,
    )


def _root(otel: Otel) -> Any:
    [root] = [span for span in otel.spans() if span.parent is None]
    return root


BETA_STREAMS: dict[str, tuple[str, str, int, Callable[[Any], Any]]] = {  # fixture, classes' package, closing events
    "beta messages": (
        "anthropic_client",
        "anthropic.types.beta",
        3,
        lambda c: c.beta.messages.create(model=CLAUDE, max_tokens=CAP, messages=USER, stream=True),
    ),
    "beta responses": (
        "openai_client",
        "openai.types.beta",
        1,
        lambda c: c.beta.responses.create(
            model="gpt-5.4", input="Tell me about the KV cache.", max_output_tokens=CAP, stream=True
        ),
    ),
}


@pytest.mark.parametrize("api", list(BETA_STREAMS))
async def test_a_beta_stream_the_loop_guard_cuts_ends_with_the_beta_apis_own_event_classes(
    simulator: Any, request: pytest.FixtureRequest, mode: str, api: str, otel: Otel
) -> None:
    fixture, beta_module, closing, create = BETA_STREAMS[api]
    client = request.getfixturevalue(fixture)
    require(client, "beta.responses" if api == "beta responses" else "beta.messages")
    simulator.loop(LOOP_UNIT)
    bare = await collect(await resolve(create(client)))  # runs to the cap: the API's own end
    cut = await collect(await resolve(create(_wrap(client, otel))))
    assert len(cut) < len(bare)
    assert [type(event).__module__.split(".")[:3] for event in cut] == [beta_module.split(".")] * len(cut)
    assert [type(event) for event in cut[-closing:]] == [type(event) for event in bare[-closing:]]
    assert _root(otel).attributes[sc.KVWISE_GUARD_TRIPPED] == "loop"


async def test_a_beta_messages_stream_cut_by_the_loop_guard_reports_its_stop_reason_and_output_tokens(
    simulator: Any, anthropic_client: Any, otel: Otel
) -> None:
    from anthropic.types.beta import BetaRawMessageDeltaEvent

    simulator.loop(LOOP_UNIT)
    events = await collect(
        await resolve(
            _wrap(anthropic_client, otel).beta.messages.create(model=CLAUDE, max_tokens=CAP, messages=USER, stream=True)
        )
    )
    [delta] = [event for event in events if isinstance(event, BetaRawMessageDeltaEvent)]  # what frameworks match on
    deltas = sum(event.type == "content_block_delta" for event in events)
    assert delta.delta.stop_reason == "max_tokens"
    assert delta.usage.output_tokens == deltas == _root(otel).attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] > 1


@dataclass(frozen=True, slots=True)
class UsageStream:
    """A streamed call whose end carries usage, and how a caller reads that usage off its events."""

    fixture: str
    open: Callable[[Any], Any]
    usage: Callable[[list[Any]], tuple[int, int] | None]  # (input, output) the caller is told, None: not told


def _chunk_usage(events: list[Any]) -> tuple[int, int] | None:
    last = events[-1]
    if last.choices or last.usage is None:
        return None
    return last.usage.prompt_tokens, last.usage.completion_tokens


def _response_usage(events: list[Any]) -> tuple[int, int] | None:
    usage = events[-1].response.usage
    return None if usage is None else (usage.input_tokens, usage.output_tokens)


USAGE_STREAMS = {
    "chat, usage asked for": UsageStream(
        "openai_client",
        lambda c: c.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True, stream_options=USAGE),
        _chunk_usage,
    ),
    "chat, usage asked for in extra_body": UsageStream(
        "openai_client",
        lambda c: c.chat.completions.create(
            model="gpt-4o-mini", messages=USER, stream=True, extra_body={"stream_options": USAGE}
        ),
        _chunk_usage,
    ),
    "chat, usage on every chunk": UsageStream(
        "openai_client",
        lambda c: c.chat.completions.create(
            model="gpt-4o-mini", messages=USER, stream=True, stream_options={**USAGE, "continuous_usage_stats": True}
        ),
        _chunk_usage,
    ),
    "legacy completions, usage asked for": UsageStream(
        "openai_client",
        lambda c: c.completions.create(
            model="gpt-3.5-turbo-instruct",
            prompt="Tell me about the KV cache.",
            max_tokens=CAP,
            stream=True,
            stream_options=USAGE,
        ),
        _chunk_usage,
    ),
    "responses": UsageStream(
        "openai_client",
        lambda c: c.responses.create(model="gpt-5.4", input="Tell me about the KV cache.", stream=True),
        _response_usage,
    ),
}


@pytest.mark.parametrize("api", list(USAGE_STREAMS))
async def test_a_stream_the_loop_guard_cuts_ends_with_the_usage_the_caller_asked_for(
    simulator: Any, request: pytest.FixtureRequest, mode: str, api: str, otel: Otel
) -> None:
    case = USAGE_STREAMS[api]
    client = request.getfixturevalue(case.fixture)
    simulator.loop(LOOP_UNIT)
    bare = await collect(await resolve(case.open(client)))
    cut = await collect(await resolve(case.open(_wrap(client, otel))))
    assert len(cut) < len(bare)
    told, bare_told = case.usage(cut), case.usage(bare)
    assert told is not None and bare_told is not None  # the bare stream's end carries usage: so does the cut one's
    assert type(cut[-1]) is type(bare[-1])
    attributes = _root(otel).attributes
    assert told == (attributes[sc.GEN_AI_USAGE_INPUT_TOKENS], attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS])
    assert 1 < told[1] < bare_told[1]  # the output up to the cut
    if attributes.get(sc.KVWISE_USAGE_ESTIMATED):
        assert told[0] > 0
    else:  # the server had sent its figures: they are passed on as sent
        assert told[0] == bare_told[0]


async def test_a_cut_chat_stream_gives_no_usage_chunk_to_a_caller_who_did_not_ask_for_one(
    simulator: Any, openai_client: Any, otel: Otel
) -> None:
    simulator.loop(LOOP_UNIT)
    chunks = await collect(
        await resolve(
            _wrap(openai_client, otel).chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True)
        )
    )
    assert chunks[-1].choices[0].finish_reason == "length"
    assert all(chunk.choices and chunk.usage is None for chunk in chunks)
    assert _root(otel).attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] > 1  # kvwise still records it


async def _first(stream: Any) -> None:
    await anext(stream) if hasattr(stream, "__anext__") else next(stream)


async def _close(stream: Any) -> None:
    await _first(stream)
    await resolve(stream.aclose() if hasattr(stream, "aclose") else stream.close())


async def _break(stream: Any) -> None:
    """A loop left with `break`, the stream then let go (the caller's reference is the test's, dropped after)."""
    if hasattr(stream, "__aiter__"):
        async for _ in stream:
            break
    else:
        for _ in stream:
            break


async def _with_exit(stream: Any) -> None:
    if hasattr(stream, "__aenter__"):
        async with stream:
            await _first(stream)
    else:
        with stream:
            await _first(stream)


STOPS: dict[str, Callable[[Any], Any]] = {"close": _close, "break": _break, "with exit": _with_exit}
OPEN: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "chat": ("openai_client", lambda c: c.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True)),
    "responses": ("openai_client", lambda c: c.responses.create(model="gpt-5.4", input="Go on.", stream=True)),
    "messages": (
        "anthropic_client",
        lambda c: c.messages.create(model=CLAUDE, max_tokens=CAP, messages=USER, stream=True),
    ),
}


@pytest.mark.parametrize("api", list(OPEN))
@pytest.mark.parametrize("stop", list(STOPS))
async def test_a_stream_the_caller_stops_on_purpose_ends_its_span_without_error_marked_abandoned(
    simulator: Any, request: pytest.FixtureRequest, mode: str, api: str, stop: str, otel: Otel
) -> None:
    fixture, create = OPEN[api]
    simulator.reply, simulator.token_delay = "word " * 1000, DECODE_SECONDS_PER_TOKEN
    stream = await resolve(create(_wrap(request.getfixturevalue(fixture), otel)))
    await STOPS[stop](stream)
    del stream
    for _ in range(5):
        await asyncio.sleep(0)  # a dropped async stream closes its response in a task
    root = _root(otel)
    attributes = root.attributes or {}
    assert attributes[sc.KVWISE_STREAM_ABANDONED] is True
    assert sc.ERROR_TYPE not in attributes and root.status.status_code is not StatusCode.ERROR
    assert sc.GEN_AI_RESPONSE_FINISH_REASONS not in attributes  # the answer never reached an end of its own
    [duration] = otel.metrics()[sc.GEN_AI_CLIENT_OPERATION_DURATION].data.data_points
    assert sc.ERROR_TYPE not in duration.attributes
    assert simulator.wait_idle() and simulator.streams[-1].client_closed


async def test_a_stream_whose_connection_drops_stays_an_error_and_is_not_abandoned(
    simulator: Any, openai_client: Any, otel: Otel
) -> None:
    simulator.cut_stream_after(3, mode="drop")
    stream = await resolve(
        _wrap(openai_client, otel).chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True)
    )
    with pytest.raises(sdk.StreamTruncated):
        await collect(stream)
    root = _root(otel)
    assert root.attributes[sc.ERROR_TYPE] == "stream_truncated" and root.status.status_code is StatusCode.ERROR
    assert sc.KVWISE_STREAM_ABANDONED not in root.attributes


async def test_a_stream_whose_reading_task_is_cancelled_is_abandoned_not_failed(simulator: Any, otel: Otel) -> None:
    client = openai.AsyncOpenAI(base_url=simulator.openai_base_url, api_key="test-key")
    simulator.reply, simulator.token_delay = "word " * 1000, DECODE_SECONDS_PER_TOKEN
    stream = await _wrap(client, otel).chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True)
    reading = asyncio.Event()

    async def read() -> None:
        async for _ in stream:
            reading.set()

    task = asyncio.create_task(read())
    await reading.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    root = _root(otel)
    assert root.attributes[sc.KVWISE_STREAM_ABANDONED] is True
    assert sc.ERROR_TYPE not in root.attributes and root.status.status_code is not StatusCode.ERROR
    assert stream.response.is_closed
    await client.close()
