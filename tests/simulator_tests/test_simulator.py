"""The provider simulator as the real `openai` and `anthropic` clients see it over loopback."""

from __future__ import annotations

import json
import time
from typing import Any

import anthropic
import openai
import pytest

from tests.sdk.helpers import collect, connection_errors, http_library, in_stream, resolve
from tests.simulator import ProviderSimulator
from tests.simulator_tests import REPLY, REPLY_TOKENS

MODES = pytest.mark.parametrize("mode", ["sync", "async"])
USER = [{"role": "user", "content": "Tell me something."}]
LONG = "The stable system prompt says the same words on every call. " * 120  # ~1440 tokens


@MODES
async def test_chat_completions_json_and_stream_parse_with_text_and_usage(sim: ProviderSimulator, oai: Any) -> None:
    whole = await resolve(oai.chat.completions.create(model="gpt-sim-1", messages=USER))
    chunks = await collect(
        await resolve(
            oai.chat.completions.create(
                model="gpt-sim-1", messages=USER, stream=True, stream_options={"include_usage": True}
            )
        )
    )

    assert whole.choices[0].message.content == REPLY
    assert whole.choices[0].finish_reason == "stop"
    assert whole.usage.completion_tokens == REPLY_TOKENS
    assert whole.usage.prompt_tokens_details.cached_tokens == 0
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == REPLY
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == whole.usage.total_tokens
    assert sim.streams[-1].completed and sim.streams[-1].tokens_sent == REPLY_TOKENS


@MODES
async def test_responses_json_stream_and_helper_parse_with_text_and_usage(sim: ProviderSimulator, oai: Any) -> None:
    whole = await resolve(oai.responses.create(model="gpt-sim-1", input="Hi", instructions="Be brief."))
    events = await collect(await resolve(oai.responses.create(model="gpt-sim-1", input="Hi", stream=True)))
    final = await in_stream(
        oai.responses.stream(model="gpt-sim-1", input="Hi"), lambda stream: stream.get_final_response()
    )

    assert whole.output_text == REPLY and whole.status == "completed"
    assert whole.usage.output_tokens == REPLY_TOKENS and whole.usage.input_tokens_details.cached_tokens == 0
    assert [e.type for e in events[:4]] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert [e.type for e in events[-4:]] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == REPLY
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert final.output_text == REPLY and final.usage.output_tokens == REPLY_TOKENS


@MODES
async def test_anthropic_messages_json_stream_and_helper_parse_with_text_and_usage(claude: Any) -> None:
    whole = await resolve(claude.messages.create(model="claude-sim-1", max_tokens=100, messages=USER))
    events = await collect(
        await resolve(claude.messages.create(model="claude-sim-1", max_tokens=100, messages=USER, stream=True))
    )
    final = await in_stream(
        claude.messages.stream(model="claude-sim-1", max_tokens=100, messages=USER),
        lambda stream: stream.get_final_message(),
    )

    assert whole.content[0].text == REPLY and whole.stop_reason == "end_turn"
    assert (whole.usage.output_tokens, whole.usage.cache_read_input_tokens) == (REPLY_TOKENS, 0)
    assert [e.type for e in events] == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * REPLY_TOKENS,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert final.content[0].text == REPLY and final.stop_reason == "end_turn"
    assert final.usage.output_tokens == REPLY_TOKENS and final.usage.input_tokens == whole.usage.input_tokens


async def test_caps_end_each_api_with_its_own_truncation_signal(oai: Any, claude: Any) -> None:
    chat = oai.chat.completions.create(model="m", messages=USER, max_completion_tokens=3)
    resp = oai.responses.create(model="m", input="Hi", max_output_tokens=3)
    msg = claude.messages.create(model="c", messages=USER, max_tokens=3)

    assert (chat.choices[0].finish_reason, chat.choices[0].message.content) == ("length", "Prefill reads the")
    assert (resp.status, resp.incomplete_details.reason) == ("incomplete", "max_output_tokens")
    assert resp.usage.output_tokens == 3
    assert (msg.stop_reason, msg.usage.output_tokens) == ("max_tokens", 3)


async def test_stop_sequences_end_the_reply_before_the_stop_text(oai: Any, claude: Any) -> None:
    chat = oai.chat.completions.create(model="m", messages=USER, stop=["once", "zzz"])
    msg = claude.messages.create(model="c", messages=USER, max_tokens=50, stop_sequences=["decode"])

    assert (chat.choices[0].finish_reason, chat.choices[0].message.content) == ("stop", "Prefill reads the prompt ")
    assert (msg.stop_reason, msg.stop_sequence) == ("stop_sequence", "decode")
    assert msg.content[0].text == "Prefill reads the prompt once; "


async def test_requests_the_real_apis_refuse_get_their_400(oai: Any, claude: Any) -> None:
    with pytest.raises(openai.BadRequestError, match="at most 4"):
        oai.chat.completions.create(model="m", messages=USER, stop=list("abcde"))
    marked = [{"type": "text", "text": str(i), "cache_control": {"type": "ephemeral"}} for i in range(5)]
    with pytest.raises(anthropic.BadRequestError, match="maximum of 4 blocks with cache_control"):
        claude.messages.create(model="c", max_tokens=5, messages=[{"role": "user", "content": marked}])
    with pytest.raises(anthropic.BadRequestError, match="max_tokens: Field required") as missing:
        claude.post("/v1/messages", body={"model": "c", "messages": USER}, cast_to=object)
    assert missing.value.type == "invalid_request_error"


@MODES
async def test_openai_cache_counts_the_longest_seen_prefix_in_128_token_steps(sim: ProviderSimulator, oai: Any) -> None:

    async def chat(question: str) -> Any:
        messages = [{"role": "system", "content": LONG}, {"role": "user", "content": question}]
        return (await resolve(oai.chat.completions.create(model="gpt-sim-1", messages=messages))).usage

    first, again, other = await chat("What is a KV cache?"), await chat("What is a KV cache?"), await chat("Why?")
    short = [await resolve(oai.chat.completions.create(model="gpt-sim-1", messages=USER)) for _ in range(2)]
    resp = [await resolve(oai.responses.create(model="gpt-sim-1", instructions=LONG, input="Hi")) for _ in range(2)]

    assert first.prompt_tokens_details.cached_tokens == 0
    assert first.prompt_tokens_details.cache_write_tokens == first.prompt_tokens // 128 * 128
    assert again.prompt_tokens_details.cached_tokens == first.prompt_tokens // 128 * 128 >= 1024
    assert again.prompt_tokens_details.cache_write_tokens == 0
    assert 1024 <= other.prompt_tokens_details.cached_tokens < other.prompt_tokens
    assert other.prompt_tokens_details.cached_tokens % 128 == 0
    assert [r.usage.prompt_tokens_details.cached_tokens for r in short] == [0, 0]
    cached = [r.usage.input_tokens_details.cached_tokens for r in resp]
    assert cached[0] == 0 and cached[1] >= 1024 and cached[1] % 128 == 0


@MODES
async def test_anthropic_cache_reads_and_writes_only_at_breakpoints(sim: ProviderSimulator, claude: Any) -> None:
    marker = {"type": "ephemeral"}

    async def ask(*turns: dict, system_marker: dict | None = marker) -> Any:
        system = [{"type": "text", "text": LONG, **({"cache_control": system_marker} if system_marker else {})}]
        call = claude.messages.create(model="claude-sim-1", max_tokens=20, system=system, messages=list(turns))
        return (await resolve(call)).usage

    def user(text: str, cached: bool = False) -> dict:
        block = {"type": "text", "text": text, **({"cache_control": marker} if cached else {})}
        return {"role": "user", "content": [block]}

    unmarked = await ask(user("Q1"), system_marker=None)
    first = await ask(user("Q1", cached=True))
    second = await ask(user("Q1"), {"role": "assistant", "content": "A1"}, user("Q2", cached=True))
    sim.anthropic_min_cache_tokens = 100_000
    too_short = await ask(user("Q3", cached=True))

    assert (unmarked.cache_read_input_tokens, unmarked.cache_creation_input_tokens) == (0, 0)
    assert first.cache_read_input_tokens == 0 and first.cache_creation_input_tokens > 1024
    assert first.cache_creation.ephemeral_5m_input_tokens == first.cache_creation_input_tokens
    assert first.input_tokens == 0  # everything up to the last breakpoint was written
    assert unmarked.input_tokens == first.cache_creation_input_tokens
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens  # looked back to Q1's breakpoint
    assert second.cache_creation_input_tokens > 0 and second.input_tokens == 0
    assert too_short.cache_read_input_tokens < first.cache_creation_input_tokens  # only the system entry
    assert too_short.cache_creation_input_tokens == 0


@MODES
async def test_scripted_429_is_a_rate_limit_error_with_retry_after(
    sim: ProviderSimulator, oai: Any, claude: Any
) -> None:
    sim.fail(status=429, times=2, headers={"retry-after": "7"})
    with pytest.raises(openai.RateLimitError) as oai_error:
        await resolve(oai.chat.completions.create(model="m", messages=USER))
    with pytest.raises(anthropic.RateLimitError) as claude_error:
        await resolve(claude.messages.create(model="c", max_tokens=5, messages=USER))
    ok = await resolve(claude.messages.create(model="c", max_tokens=5, messages=USER))

    assert oai_error.value.response.headers["retry-after"] == "7"
    assert oai_error.value.code == "rate_limit_exceeded"
    assert claude_error.value.type == "rate_limit_error"
    assert str(claude_error.value.request_id).startswith("req_")
    assert ok.stop_reason == "max_tokens" and len(sim.requests) == 3


async def test_reset_before_answer_is_a_connection_error(sim: ProviderSimulator, oai: Any, claude: Any) -> None:
    sim.fail(reset=True, times=2)
    with pytest.raises(openai.APIConnectionError):
        oai.chat.completions.create(model="m", messages=USER)
    with pytest.raises(anthropic.APIConnectionError):
        claude.messages.create(model="c", max_tokens=5, messages=USER)


@MODES
async def test_loop_stream_stops_decoding_when_the_client_hangs_up(
    sim: ProviderSimulator, oai: Any, claude: Any
) -> None:
    sim.loop("I keep saying this. ")
    sim.token_delay = 0.005  # 4000 tokens would take 20 s: a late hang-up could not go unnoticed
    stream = await resolve(oai.chat.completions.create(model="m", messages=USER, max_tokens=4000, stream=True))
    chunks = await collect(stream, stop_after=20)
    events = await collect(
        await resolve(claude.messages.create(model="c", max_tokens=4000, messages=USER, stream=True)), stop_after=20
    )

    assert "I keep saying this. I keep" in "".join(c.choices[0].delta.content or "" for c in chunks)
    assert len(events) == 20
    for record in sim.streams:
        assert record.client_closed and not record.completed
        assert record.tokens_sent < 400


async def test_cut_stream_ends_silently_or_with_a_transport_error(
    sim: ProviderSimulator, oai: Any, claude: Any
) -> None:
    sim.cut_stream_after(3)
    chunks = list(oai.chat.completions.create(model="m", messages=USER, stream=True))
    sim.cut_stream_after(3)
    with claude.messages.stream(model="c", max_tokens=50, messages=USER) as stream:
        partial = stream.get_final_message()
    sim.cut_stream_after(3, mode="drop", times=2)
    with pytest.raises(connection_errors(openai)):  # its transport's own error where a release lets it escape
        list(oai.responses.create(model="m", input="Hi", stream=True))
    # Some anthropic releases raise the transport error itself mid-stream, others wrap it in their
    # APIConnectionError: either way the cut reaches the caller as a transport error.
    transport = http_library(anthropic).TransportError
    with pytest.raises((transport, anthropic.APIConnectionError)) as cut:
        list(claude.messages.create(model="c", max_tokens=50, messages=USER, stream=True))
    assert isinstance(cut.value, transport) or isinstance(cut.value.__cause__, transport)

    assert [c.choices[0].finish_reason for c in chunks] == [None] * 4
    assert (partial.content[0].text, partial.stop_reason) == ("Prefill reads the", None)
    assert [(s.tokens_sent, s.completed, s.client_closed) for s in sim.streams] == [(3, False, False)] * 4


async def test_first_token_delay_holds_back_the_first_chunk(sim: ProviderSimulator, oai: Any) -> None:
    sim.first_token_delay = 0.2
    started = time.monotonic()
    first = next(iter(oai.chat.completions.create(model="m", messages=USER, stream=True)))
    assert first.choices[0].delta.role == "assistant"
    assert time.monotonic() - started >= 0.2


async def test_requests_are_recorded_and_other_paths_answer_like_the_apis(
    sim: ProviderSimulator, oai: Any, claude: Any
) -> None:
    oai.chat.completions.create(model="m", messages=USER, extra_headers={"X-Trace": "t1"})
    models = oai.models.list()
    claude_models = claude.models.list()
    with pytest.raises(openai.NotFoundError, match="Invalid URL"):
        oai.post("/nowhere", body={}, cast_to=object)

    first = sim.requests[0]
    assert (first.method, first.path, first.body["messages"], first.headers["x-trace"]) == (
        "POST",
        "/v1/chat/completions",
        USER,
        "t1",
    )
    assert b'"messages"' in first.raw
    assert [m.id for m in models.data] == [m.id for m in claude_models.data] == ["gpt-sim-1", "claude-sim-1"]
    sim.reset()
    assert sim.requests == [] and sim.streams == []


async def test_a_stall_trips_the_client_read_timeout_once(sim: ProviderSimulator, oai: Any) -> None:
    http = http_library(openai)
    timeout = http.Timeout(10.0, read=2.0)  # room for a loaded machine on every read but the stalled one
    sim.stall(10.0, at_token=2)
    with pytest.raises(
        (openai.APITimeoutError, http.TimeoutException)
    ):  # the transport's, where a release lets it escape
        list(oai.with_options(timeout=timeout).chat.completions.create(model="m", messages=USER, stream=True))
    again = oai.with_options(timeout=timeout).chat.completions.create(model="m", messages=USER)

    assert again.choices[0].message.content == REPLY
    assert [(s.tokens_sent, s.client_closed) for s in sim.streams] == [(2, True)]


async def test_injected_events_reach_the_clients_as_each_api_would_send_them(
    sim: ProviderSimulator, oai: Any, claude: Any
) -> None:
    def chat() -> list[Any]:
        return list(oai.chat.completions.create(model="m", messages=USER, stream=True))

    def messages() -> list[Any]:
        return list(claude.messages.create(model="c", max_tokens=50, messages=USER, stream=True))

    for create in (chat, messages):
        sim.inject_event("bad_json", at_token=2)
        with pytest.raises(json.JSONDecodeError):  # neither client wraps a malformed `data:` line
            create()
    sim.inject_event("unknown", at_token=2, times=2)
    chunks, events = chat(), messages()
    sim.inject_event("error", at_token=2, times=2)
    with pytest.raises(openai.APIError, match="Overloaded"):
        chat()
    with pytest.raises(anthropic.APIStatusError) as overloaded:
        messages()

    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == REPLY
    # anthropic 1.x on hands an event of an unknown type on; 0.x skips it, and goes on
    assert [e.type for e in events].count("simulator.unknown") in (0, 1)
    assert events[-1].type == "message_stop"
    assert overloaded.value.body["error"]["type"] == "overloaded_error"
    assert [(s.tokens_sent, s.completed) for s in sim.streams[-2:]] == [(2, False)] * 2
