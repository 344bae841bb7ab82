"""The streaming loop guard and truncated streams, end to end over loopback."""

from __future__ import annotations

import anthropic
import openai
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import sdk
from sdk import semconv as sc
from tests.sdk.helpers import DECODE_SECONDS_PER_TOKEN, collect, connection_errors, resolve

LOOP_UNIT = "I will keep repeating this sentence. "
CAP = 2000
USER = [{"role": "user", "content": "Tell me something."}]


async def test_chat_loop_is_cut_and_ends_with_finish_reason_length(simulator, openai_client):
    simulator.loop(LOOP_UNIT)
    simulator.token_delay = DECODE_SECONDS_PER_TOKEN
    wrapped = sdk.wrap(openai_client, sdk.Policy(max_output_tokens=CAP))
    stream = await resolve(wrapped.chat.completions.create(model="m", messages=USER, stream=True))
    events = await collect(stream)
    text = "".join(e.choices[0].delta.content or "" for e in events if e.choices)
    assert events[-1].choices[0].finish_reason == "length"
    assert text.count(LOOP_UNIT) <= 8
    record = simulator.streams[-1]
    assert record.client_closed and not record.completed
    assert record.tokens_sent < CAP // 10


async def test_anthropic_loop_is_cut_and_ends_with_stop_reason_max_tokens(simulator, anthropic_client):
    simulator.loop(LOOP_UNIT)
    simulator.token_delay = DECODE_SECONDS_PER_TOKEN
    wrapped = sdk.wrap(anthropic_client, sdk.Policy(max_output_tokens=CAP))
    stream = await resolve(wrapped.messages.create(model="claude-sonnet-4-6", messages=USER, stream=True))
    kinds = [(e.type, getattr(getattr(e, "delta", None), "stop_reason", None)) for e in await collect(stream)]
    assert kinds[-3:] == [("content_block_stop", None), ("message_delta", "max_tokens"), ("message_stop", None)]
    assert simulator.streams[-1].client_closed
    assert simulator.streams[-1].tokens_sent < CAP // 10


def test_messages_stream_helper_sees_a_cut_loop_as_max_tokens(simulator):
    simulator.loop(LOOP_UNIT)
    simulator.token_delay = DECODE_SECONDS_PER_TOKEN
    client = sdk.wrap(anthropic.Anthropic(base_url=simulator.anthropic_base_url, api_key="k", max_retries=0))
    with client.messages.stream(model="claude-sonnet-4-6", max_tokens=CAP, messages=USER) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert final.stop_reason == "max_tokens"
    assert text.count(LOOP_UNIT) <= 8
    assert simulator.streams[-1].client_closed


async def test_responses_loop_is_cut_and_ends_incomplete(simulator, openai_client):
    simulator.loop(LOOP_UNIT)
    simulator.token_delay = DECODE_SECONDS_PER_TOKEN
    wrapped = sdk.wrap(openai_client, sdk.Policy(max_output_tokens=CAP))
    stream = await resolve(wrapped.responses.create(model="gpt-5.4", input="go", stream=True))
    events = await collect(stream)
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"
    assert simulator.streams[-1].client_closed


async def test_ordinary_streamed_prose_is_not_cut(simulator, openai_client):
    simulator.reply = (
        "Prefill is one forward pass over the whole prompt. It sets the time to first token. "
        "Decode then produces one token at a time, reusing the keys and values stored in the KV cache. "
        "1. Keep stable content first.\n2. Move request IDs to the end.\n3. Ask for short answers.\n"
    )
    wrapped = sdk.wrap(openai_client)
    stream = await resolve(wrapped.chat.completions.create(model="m", messages=USER, stream=True))
    events = await collect(stream)
    text = "".join(e.choices[0].delta.content or "" for e in events if e.choices)
    assert text == simulator.reply
    assert events[-1].choices[0].finish_reason == "stop"


async def test_loop_guard_off_lets_the_server_run_to_the_cap(simulator, openai_client):
    simulator.loop(LOOP_UNIT)
    wrapped = sdk.wrap(openai_client, sdk.Policy(max_output_tokens=120, loop_guard=False))
    events = await collect(await resolve(wrapped.chat.completions.create(model="m", messages=USER, stream=True)))
    assert events[-1].choices[0].finish_reason == "length"
    assert simulator.streams[-1].tokens_sent == 120


async def test_a_stream_whose_connection_drops_mid_way_raises_stream_truncated_not_a_silent_end(
    simulator, openai_client
):
    simulator.reply = "word " * 50
    simulator.cut_stream_after(5, mode="drop")
    wrapped = sdk.wrap(openai_client)
    stream = await resolve(wrapped.chat.completions.create(model="m", messages=USER, stream=True))
    with pytest.raises(sdk.StreamTruncated) as info:
        await collect(stream)
    assert isinstance(info.value, connection_errors(openai))


async def test_an_anthropic_stream_whose_connection_drops_mid_way_raises_the_clients_connection_error(
    simulator, anthropic_client
):
    simulator.reply = "word " * 50
    simulator.cut_stream_after(5, mode="drop")
    wrapped = sdk.wrap(anthropic_client)
    stream = await resolve(wrapped.messages.create(model="claude-sonnet-4-6", messages=USER, stream=True))
    with pytest.raises(connection_errors(anthropic)):
        await collect(stream)


@pytest.mark.parametrize("cut_mode", ["drop", "reset"])
async def test_a_connection_lost_mid_stream_raises_stream_truncated_for_both_clients(
    simulator, openai_client, anthropic_client, cut_mode
):
    simulator.reply = "word " * 50
    for client, create in (
        (openai_client, lambda c: c.chat.completions.create(model="m", messages=USER, stream=True)),
        (anthropic_client, lambda c: c.messages.create(model="claude-sonnet-4-6", messages=USER, stream=True)),
    ):
        simulator.cut_stream_after(5, mode=cut_mode)
        stream = await resolve(create(sdk.wrap(client)))
        with pytest.raises(sdk.StreamTruncated):
            await collect(stream)


async def test_a_stream_that_breaks_before_its_first_content_chunk_is_not_sent_again(
    simulator, openai_client, anthropic_client
):
    simulator.cut_stream_after(0, mode="drop")
    wrapped = sdk.wrap(openai_client)
    with pytest.raises(connection_errors(openai)):
        await collect(await resolve(wrapped.chat.completions.create(model="m", messages=USER, stream=True)))
    simulator.cut_stream_after(0, mode="reset")
    wrapped_anthropic = sdk.wrap(anthropic_client)
    stream = await resolve(wrapped_anthropic.messages.create(model="claude-sonnet-4-6", messages=USER, stream=True))
    with pytest.raises(connection_errors(anthropic)):
        await collect(stream)
    assert len(simulator.requests) == 2


async def test_a_responses_stream_whose_connection_drops_mid_way_raises_stream_truncated(simulator, openai_client):
    simulator.reply = "word " * 50
    simulator.cut_stream_after(5, mode="drop")
    stream = await resolve(sdk.wrap(openai_client).responses.create(model="gpt-5.4", input="go", stream=True))
    with pytest.raises(sdk.StreamTruncated):
        await collect(stream)


async def test_the_tokens_a_loop_cut_saves_are_counted_against_the_cap_the_guards_decided(simulator, openai_client):
    simulator.loop(LOOP_UNIT)
    simulator.token_delay = DECODE_SECONDS_PER_TOKEN
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    wrapped = sdk.wrap(openai_client, sdk.Policy(max_output_tokens=CAP), tracer_provider=provider)
    # both limits given: the request's limit is the smaller one, which the guards record as `call.cap`
    stream = await resolve(
        wrapped.chat.completions.create(
            model="m", messages=USER, stream=True, max_tokens=1500, max_completion_tokens=1000
        )
    )
    await collect(stream)
    (span,) = [span for span in spans.get_finished_spans() if span.kind is SpanKind.CLIENT]
    attributes = span.attributes or {}
    assert attributes[sc.KVWISE_GUARD_TRIPPED] == "loop"
    assert attributes[sc.KVWISE_GUARD_TOKENS_SAVED] + attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 1000
