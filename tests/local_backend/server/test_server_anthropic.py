"""The real server on a tiny checkpoint, through the real `anthropic` client: messages, streamed and not."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx2
import pytest

from local_backend import Engine
from local_backend.server import create_app, serve_in_thread

TIMINGS_KEYS = {
    "prompt_n",
    "prompt_ms",
    "prompt_per_second",
    "predicted_n",
    "predicted_ms",
    "predicted_per_second",
    "cache_n",
    "queue_ms",
}
GREEDY = {"extra_body": {"temperature": 0, "ignore_eos": True}}  # anthropic 2.x has no temperature argument
LONG_SYSTEM = " ".join(["A KV cache stores keys and values for every layer and token."] * 12)


@pytest.fixture(scope="module")
def base_url(llama_dir: Path) -> Iterator[str]:
    engine = Engine.from_pretrained(llama_dir, device="cpu", max_model_len=512, kv_cache_memory=2**21)
    with serve_in_thread(create_app(engine, model_name="tiny")) as url:
        yield url
    engine.close()


@pytest.fixture
def client(base_url: str) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=base_url, api_key="unused", max_retries=0) as client:
        yield client


def _create(client: anthropic.Anthropic, content: str, **kwargs):
    return client.messages.create(model="tiny", messages=[{"role": "user", "content": content}], **kwargs)


def _prompt_tokens(usage: anthropic.types.Usage) -> int:
    return usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens


def test_message_returns_text_stop_reason_usage_and_timings(client):
    message = _create(client, "Hello world", max_tokens=8, **GREEDY)
    assert message.type == "message" and message.role == "assistant" and message.model == "tiny"
    assert message.stop_reason == "max_tokens" and message.content[0].text
    assert message.usage.output_tokens == 8
    timings = message.model_extra["timings"]
    assert set(timings) == TIMINGS_KEYS
    assert _prompt_tokens(message.usage) == timings["prompt_n"] + timings["cache_n"]


def test_streamed_message_matches_the_whole_one(client):
    whole = _create(client, "The quick brown fox", max_tokens=12, **GREEDY)
    with client.messages.stream(
        model="tiny", messages=[{"role": "user", "content": "The quick brown fox"}], max_tokens=12, **GREEDY
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == final.content[0].text == whole.content[0].text
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 12
    assert _prompt_tokens(final.usage) == _prompt_tokens(whole.usage)


def test_stream_sends_the_full_event_sequence_with_timings_last(base_url):
    body = {
        "model": "tiny",
        "max_tokens": 5,
        "stream": True,
        "temperature": 0,
        "ignore_eos": True,
        "messages": [{"role": "user", "content": "Hello"}],
    }
    with httpx2.Client() as http, http.stream("POST", f"{base_url}/v1/messages", json=body) as response:
        lines = [line for line in response.iter_lines() if line]
    events = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    data = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: ")]
    assert events[:3] == ["message_start", "content_block_start", "ping"]
    assert set(events[3:-3]) == {"content_block_delta"}
    assert events[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert [d["type"] for d in data] == events
    assert set(data[-1]["timings"]) == set(data[-2]["timings"]) == TIMINGS_KEYS


def test_repeated_long_system_prompt_reads_the_cache_on_the_second_call(client):
    system = [{"type": "text", "text": "Anthropic cache test. " + LONG_SYSTEM, "cache_control": {"type": "ephemeral"}}]
    first = _create(client, "What is prefill?", system=system, max_tokens=2)
    second = _create(client, "What is decode?", system=system, max_tokens=2)
    assert first.usage.cache_read_input_tokens == 0 and first.usage.cache_creation_input_tokens > 0
    assert second.usage.cache_read_input_tokens > 0
    assert second.usage.cache_read_input_tokens == second.model_extra["timings"]["cache_n"]


def test_system_as_a_string_and_as_blocks_give_the_same_answer(client):
    as_string = _create(client, "Hi", system="Be brief.", max_tokens=6, **GREEDY)
    as_blocks = _create(client, "Hi", system=[{"type": "text", "text": "Be brief."}], max_tokens=6, **GREEDY)
    assert as_string.content[0].text == as_blocks.content[0].text


def test_stop_sequence_ends_the_text_and_is_reported(client):
    free = _create(client, "Stable bytes go first", max_tokens=30, **GREEDY).content[0].text
    stop = free[8:11]
    stopped = _create(client, "Stable bytes go first", max_tokens=30, stop_sequences=[stop], **GREEDY)
    assert stopped.content[0].text == free[: free.find(stop)]
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == stop
