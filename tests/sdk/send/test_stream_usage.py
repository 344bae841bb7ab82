"""Usage on every stream: a streamed Chat call without `stream_options` still records its input,
cache reads and cost (kvwise asks for `include_usage` and keeps that chunk from the caller, who gets
exactly the bare client's chunks), and a stream cut short still records its input tokens: exact
where the server reported them, else estimated and marked `kvwise.usage.estimated`.

The simulator caches like OpenAI: a prompt of 1024 tokens or more is cached once answered, so a
second call of the same long prompt reads it (`cached_tokens`); see `tests/simulator/cache.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

import sdk
from sdk import semconv as sc
from tests.sdk.helpers import DECODE_SECONDS_PER_TOKEN, LONG_SYSTEM, collect, resolve
from tests.sdk.send.test_fault_matrix import events_of
from tests.sdk.telemetry.test_telemetry_spans import Otel, otel  # noqa: F401

MODEL = "gpt-4o-mini"
CLAUDE = "claude-sonnet-4-6"
MESSAGES = [{"role": "system", "content": LONG_SYSTEM}, {"role": "user", "content": "What is prefill?"}]
LOOP_UNIT = "I will keep repeating this sentence. "
CAP = 2000
READ_BEFORE_CLOSING = 3
ESTIMATE_FACTOR = 2.0  # a character-count estimate is within this factor of the server's count
USAGE = {"include_usage": True}


def _root(otel: Otel, index: int = -1) -> dict[str, Any]:
    roots = [span for span in otel.spans() if span.parent is None]
    return dict(roots[index].attributes or {})


def _wrap(client: Any, otel: Otel, policy: sdk.Policy | None = None) -> Any:
    return sdk.wrap(client, policy, tracer_provider=otel.tracer_provider)


async def _server_usage(openai_client: Any) -> Any:
    """The usage the server reports for `MESSAGES`, asked for by a bare client."""
    chunks = await collect(
        await resolve(
            openai_client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True, stream_options=USAGE)
        )
    )
    return chunks[-1].usage


async def test_a_streamed_chat_call_without_stream_options_records_its_usage_cache_reads_and_cost(
    simulator: Any, openai_client: Any, otel: Otel
) -> None:
    wrapped = _wrap(openai_client, otel)
    for _ in range(2):
        await collect(await resolve(wrapped.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)))
    assert simulator.requests[-1].body["stream_options"] == USAGE
    server = await _server_usage(openai_client)
    span = _root(otel, 1)
    assert span[sc.GEN_AI_USAGE_INPUT_TOKENS] == server.prompt_tokens
    assert span[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == server.prompt_tokens_details.cached_tokens > 0
    assert span[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == server.completion_tokens
    assert span[sc.KVWISE_COST_USD] > 0 and sc.KVWISE_USAGE_ESTIMATED not in span


def _without_ids(value: Any) -> Any:
    """A chunk's dump without what differs on every request (ids, timestamps)."""
    if isinstance(value, dict):
        return {key: _without_ids(item) for key, item in value.items() if key not in ("id", "created")}
    if isinstance(value, list):
        return [_without_ids(item) for item in value]
    return value


def _seen(chunks: list[Any]) -> list[tuple[type, Any, Any]]:
    """What a caller can see of each chunk: its type, its fields, and which fields were set."""
    return [(type(c), _without_ids(c.model_dump()), _without_ids(c.model_dump(exclude_unset=True))) for c in chunks]


@pytest.mark.parametrize(
    ("tool", "reply"),
    [(None, "Prefill reads the prompt; decode writes the answer."), ("get_weather", '{"city": "Paris"}')],
    ids=["text", "tool call"],
)
@pytest.mark.parametrize("stream_options", [None, {"include_obfuscation": False}], ids=["no options", "other options"])
async def test_the_caller_gets_exactly_the_chunks_the_bare_client_gets(
    simulator: Any, openai_client: Any, otel: Otel, tool: str | None, reply: str, stream_options: dict[str, Any] | None
) -> None:
    simulator.tool_call, simulator.reply = tool, reply
    options = {} if stream_options is None else {"stream_options": stream_options}
    bare = await collect(
        await resolve(openai_client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True, **options))
    )
    wrapped = await collect(
        await resolve(
            _wrap(openai_client, otel).chat.completions.create(model=MODEL, messages=MESSAGES, stream=True, **options)
        )
    )
    assert simulator.requests[-1].body["stream_options"] == {**(stream_options or {}), **USAGE}
    assert len(wrapped) == len(bare)
    assert _seen(wrapped) == _seen(bare)
    assert [c.choices[0].finish_reason for c in wrapped] == [c.choices[0].finish_reason for c in bare]
    assert _root(otel)[sc.GEN_AI_USAGE_INPUT_TOKENS] > 0


async def test_a_caller_who_asked_for_usage_gets_the_usage_chunk_as_sent(
    simulator: Any, openai_client: Any, otel: Otel
) -> None:
    chunks = await collect(
        await resolve(
            _wrap(openai_client, otel).chat.completions.create(
                model=MODEL, messages=MESSAGES, stream=True, stream_options=USAGE
            )
        )
    )
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert all("usage" in chunk.model_fields_set for chunk in chunks)
    assert _root(otel)[sc.GEN_AI_USAGE_INPUT_TOKENS] == chunks[-1].usage.prompt_tokens


@dataclass(frozen=True, slots=True)
class Cut:
    """A stream cut short, and whether the server had reported its input tokens by then."""

    client_fixture: str
    open: Callable[[Any], Any]
    how: str  # "loop": the loop guard cuts it; "close": the caller closes it early; "stop": a client-side stop
    exact: bool
    policy: sdk.Policy | None = None


CUTS = {
    "chat, loop guard": Cut(
        "openai_client",
        lambda c: c.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True),
        "loop",
        exact=False,
    ),
    "chat, closed by the caller": Cut(
        "openai_client",
        lambda c: c.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True),
        "close",
        exact=False,
    ),
    "chat, usage on every chunk, closed by the caller": Cut(
        "openai_client",
        lambda c: c.chat.completions.create(
            model=MODEL, messages=MESSAGES, stream=True, stream_options={**USAGE, "continuous_usage_stats": True}
        ),
        "close",
        exact=True,
    ),
    "responses, loop guard": Cut(
        "openai_client", lambda c: c.responses.create(model=MODEL, input=MESSAGES, stream=True), "loop", exact=False
    ),
    "responses, client-side stop": Cut(
        "openai_client",
        lambda c: c.responses.create(model=MODEL, input=MESSAGES, stream=True),
        "stop",
        exact=False,
        policy=sdk.Policy(stop=("decode",)),
    ),
    "messages, loop guard": Cut(
        "anthropic_client",
        lambda c: c.messages.create(
            model=CLAUDE, max_tokens=CAP, system=LONG_SYSTEM, messages=MESSAGES[1:], stream=True
        ),
        "loop",
        exact=True,
    ),
    "messages, closed by the caller": Cut(
        "anthropic_client",
        lambda c: c.messages.create(
            model=CLAUDE, max_tokens=CAP, system=LONG_SYSTEM, messages=MESSAGES[1:], stream=True
        ),
        "close",
        exact=True,
    ),
}


async def _read(stream: Any, how: str) -> list[Any]:
    if how != "close":
        return await collect(stream)
    count = 0
    async for _ in events_of(stream):
        count += 1
        if count == READ_BEFORE_CLOSING:
            break
    closed = stream.close()
    if closed is not None:
        await closed
    return []


@pytest.mark.parametrize("name", list(CUTS))
async def test_a_stream_cut_short_still_records_its_input_tokens(
    simulator: Any, request: pytest.FixtureRequest, mode: str, name: str, otel: Otel
) -> None:
    cut = CUTS[name]
    client = request.getfixturevalue(cut.client_fixture)
    wrapped = _wrap(client, otel, cut.policy or sdk.Policy(max_output_tokens=CAP))
    simulator.reply = "Prefill is one pass over the prompt, and it sets the time to the first token."
    await collect(await resolve(cut.open(wrapped)))  # a first, whole call: the long prefix is cached
    simulator.reply += " Then decode writes the answer one token at a time."
    if cut.how == "loop":
        simulator.loop(LOOP_UNIT)
    simulator.token_delay = DECODE_SECONDS_PER_TOKEN
    events = await _read(await resolve(cut.open(wrapped)), cut.how)
    whole, span = _root(otel, 0), _root(otel, 1)
    assert sc.KVWISE_USAGE_ESTIMATED not in whole
    assert span.get(sc.KVWISE_GUARD_TRIPPED) == ("loop" if cut.how == "loop" else None)
    assert sc.ERROR_TYPE not in span  # a cut is a normal end, and so is the caller's own close
    assert span.get(sc.KVWISE_STREAM_ABANDONED, False) is (cut.how == "close")
    if cut.how == "stop":
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert text and "decode" not in text and events[-1].type == "response.completed"
    truth = whole[sc.GEN_AI_USAGE_INPUT_TOKENS]
    if cut.how != "close":  # kvwise cut it: the output counts what reached the caller, not the server's early count
        assert span[sc.GEN_AI_USAGE_OUTPUT_TOKENS] >= _content_events(events) > 1
    if cut.exact:
        assert sc.KVWISE_USAGE_ESTIMATED not in span
        assert span[sc.GEN_AI_USAGE_INPUT_TOKENS] == truth
        assert span[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] > 0
    else:
        assert span[sc.KVWISE_USAGE_ESTIMATED] is True
        assert truth / ESTIMATE_FACTOR <= span[sc.GEN_AI_USAGE_INPUT_TOKENS] <= truth * ESTIMATE_FACTOR
        assert span[sc.GEN_AI_USAGE_OUTPUT_TOKENS] > 0


def _content_events(events: list[Any]) -> int:
    """The text-carrying events a caller read, whatever the API."""
    count = 0
    for event in events:
        kind = getattr(event, "type", None)
        if kind in ("content_block_delta", "response.output_text.delta"):
            count += 1
        elif kind is None and event.choices and event.choices[0].delta.content:
            count += 1
    return count


async def test_a_caller_who_stops_reading_at_the_finish_chunk_still_leaves_the_exact_usage_recorded(
    simulator: Any, openai_client: Any, otel: Otel
) -> None:
    stream = await resolve(
        _wrap(openai_client, otel).chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
    )
    async for chunk in events_of(stream):
        if chunk.choices and chunk.choices[0].finish_reason is not None:
            break
    closed = stream.close()
    if closed is not None:
        await closed
    server = await _server_usage(openai_client)
    span = _root(otel, 0)
    assert sc.KVWISE_USAGE_ESTIMATED not in span and sc.ERROR_TYPE not in span
    assert span[sc.GEN_AI_USAGE_INPUT_TOKENS] == server.prompt_tokens
