"""The real server on a tiny checkpoint, through the real `openai` client: chat, completions, streams."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx2
import openai
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
GREEDY = {"temperature": 0, "extra_body": {"ignore_eos": True}}
CLI_KEY = "cli-secret-4f2a"
LONG_SYSTEM = " ".join(["Prefill computes the prompt; decode emits one token at a time."] * 12)


@pytest.fixture(scope="module")
def engine(llama_dir: Path) -> Iterator[Engine]:
    engine = Engine.from_pretrained(llama_dir, device="cpu", max_model_len=512, kv_cache_memory=2**21)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def base_url(engine: Engine) -> Iterator[str]:
    with serve_in_thread(create_app(engine, model_name="tiny")) as url:
        yield url


@pytest.fixture
def client(base_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0) as client:
        yield client


def _chat(client: openai.OpenAI, content: str, system: str | None = None, **kwargs):
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": content}]
    return client.chat.completions.create(model="tiny", messages=messages, **kwargs)


def test_chat_completion_returns_text_usage_and_timings(client):
    response = _chat(client, "Hello world", max_tokens=8, **GREEDY)
    assert response.object == "chat.completion" and response.model == "tiny"
    [choice] = response.choices
    assert choice.finish_reason == "length" and choice.message.role == "assistant" and choice.message.content
    assert response.usage.completion_tokens == 8
    assert response.usage.total_tokens == response.usage.prompt_tokens + 8
    timings = response.model_extra["timings"]
    assert set(timings) == TIMINGS_KEYS
    assert timings["predicted_n"] == 8
    assert timings["prompt_n"] + timings["cache_n"] == response.usage.prompt_tokens


def test_streamed_chat_matches_the_whole_answer_and_ends_with_usage_and_timings(client):
    whole = _chat(client, "The quick brown fox", max_tokens=12, **GREEDY)
    stream = _chat(
        client, "The quick brown fox", max_tokens=12, stream=True, stream_options={"include_usage": True}, **GREEDY
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    finishing = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finishing] == ["length"]
    assert set(finishing[0].model_extra["timings"]) == TIMINGS_KEYS
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == 12
    assert set(last.model_extra["timings"]) == TIMINGS_KEYS


def test_legacy_completions_stream_and_not(client):
    whole = client.completions.create(model="tiny", prompt="Hello world", max_tokens=6, **GREEDY)
    assert whole.object == "text_completion" and whole.usage.completion_tokens == 6
    assert set(whole.model_extra["timings"]) == TIMINGS_KEYS
    streamed = client.completions.create(model="tiny", prompt="Hello world", max_tokens=6, stream=True, **GREEDY)
    assert "".join(c.choices[0].text for c in streamed) == whole.choices[0].text


def test_repeated_long_system_prompt_reports_cached_tokens_on_the_second_call(client):
    system = "OpenAI cache test. " + LONG_SYSTEM
    first = _chat(client, "What is prefill?", system=system, max_tokens=2, prompt_cache_key="ignored")
    second = _chat(client, "What is decode?", system=system, max_tokens=2, prompt_cache_key="ignored")
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached > 0 and cached == second.model_extra["timings"]["cache_n"]


def test_stop_sequence_ends_the_text_before_it(client):
    free = _chat(client, "Stable bytes go first", max_tokens=30, **GREEDY).choices[0].message.content
    stop = free[8:11]
    stopped = _chat(client, "Stable bytes go first", max_tokens=30, stop=[stop], **GREEDY).choices[0]
    assert stopped.finish_reason == "stop"
    assert stopped.message.content == free[: free.find(stop)]


def test_seed_repeats_a_sampled_answer_and_penalties_are_accepted(client):
    kwargs = dict(
        max_completion_tokens=10,
        temperature=0.9,
        top_p=0.95,
        seed=7,
        frequency_penalty=0.5,
        presence_penalty=0.3,
        extra_body={"top_k": 40, "repetition_penalty": 1.1},
    )
    first = _chat(client, "Hello world", **kwargs).choices[0].message.content
    assert _chat(client, "Hello world", **kwargs).choices[0].message.content == first


def test_models_lists_the_served_model(client):
    [model] = client.models.list().data
    assert model.id == "tiny" and model.owned_by == "kvwise"


async def test_eight_concurrent_streams_return_what_each_returns_alone(base_url):
    prompts = [f"{word} is a block table" for word in ("one", "two", "three", "four", "five", "six", "seven", "eight")]
    async with openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0) as client:

        async def run(prompt: str, stream: bool) -> str:
            messages = [{"role": "user", "content": prompt}]
            if not stream:
                response = await client.chat.completions.create(
                    model="tiny", messages=messages, max_tokens=16, **GREEDY
                )
                return response.choices[0].message.content
            chunks = await client.chat.completions.create(
                model="tiny", messages=messages, max_tokens=16, stream=True, **GREEDY
            )
            return "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])

        alone = [await run(p, stream=False) for p in prompts]
        together = await asyncio.gather(*(run(p, stream=True) for p in prompts))
    assert together == alone


def test_cli_serves_a_checkpoint_prints_its_url_and_exits_zero_on_sigterm(llama_dir):
    command = [
        sys.executable,
        "-m",
        "local_backend",
        "serve",
        "--model",
        str(llama_dir),
        "--port",
        "0",
        "--kv-cache-memory",
        str(2**21),
        "--api-key",
        CLI_KEY,
        "--served-model-name",
        "tiny",
        "tiny-2",
        "--allowed-origins",
        "http://app.example",
    ]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        try:
            line = process.stdout.readline()
            url = re.search(r"ready at http://127\.0\.0\.1:(\d+) ", line)
            assert url is not None and int(url[1]) > 0, line + process.stderr.read()  # the port bound, not 0
            port = int(url[1])
            with openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=CLI_KEY, max_retries=0) as client:
                assert _chat(client, "Hello", max_tokens=2).usage.completion_tokens == 2
                assert [m.id for m in client.models.list()] == ["tiny", "tiny-2"]
            preflight = httpx2.options(
                f"http://127.0.0.1:{port}/v1/models",
                headers={"origin": "http://app.example", "access-control-request-method": "GET"},
            )
            assert preflight.headers["access-control-allow-origin"] == "http://app.example"
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=60) == 0
        logs = process.stdout.read() + process.stderr.read()
    assert "Shutting down" in logs and CLI_KEY not in logs
