"""`/metrics` read back with `prometheus_client`'s own parser: the latency histograms count every
finished request, and the pool and token numbers agree with the engine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx2
import openai
import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from tests.local_backend.serving import Served, served_engine, wait_idle

HISTOGRAMS = (
    "time_to_first_token_seconds",
    "time_per_output_token_seconds",
    "request_queue_time_seconds",
    "request_prefill_time_seconds",
    "request_decode_time_seconds",
    "e2e_request_latency_seconds",
)
MAX_TOKENS = 5
MESSAGES = [{"role": "user", "content": "Hello world"}]


@pytest.fixture
def served(llama_dir: Path) -> Iterator[Served]:
    with served_engine(llama_dir, max_model_len=256, kv_cache_memory=2**20) as served:
        yield served


def _scrape(url: str) -> dict[str, Metric]:
    with httpx2.Client() as http:
        response = http.get(f"{url}/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return {family.name: family for family in text_string_to_metric_families(response.text)}


def _value(family: Metric, suffix: str = "", **labels: str) -> float:
    [value] = [s.value for s in family.samples if s.name == family.name + suffix and s.labels == labels]
    return value


def _requests(url: str) -> int:
    """Three finished requests, each of MAX_TOKENS tokens: a chat, a chat stream, a message."""
    greedy = {"temperature": 0, "max_tokens": MAX_TOKENS, "extra_body": {"ignore_eos": True}}
    with openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as client:
        client.chat.completions.create(model="tiny", messages=MESSAGES, **greedy)
        list(client.chat.completions.create(model="tiny", messages=MESSAGES, stream=True, **greedy))
    with anthropic.Anthropic(base_url=url, api_key="x", max_retries=0) as client:
        client.messages.create(
            model="tiny", messages=MESSAGES, max_tokens=MAX_TOKENS, extra_body={"temperature": 0, "ignore_eos": True}
        )
    return 3


def test_latency_histograms_count_every_finished_request_in_cumulative_buckets(served):
    before = _scrape(served.url)
    assert all(before["kvwise_" + name].type == "histogram" for name in HISTOGRAMS)
    assert all(_value(before["kvwise_" + name], "_count") == 0 for name in HISTOGRAMS)
    finished = _requests(served.url)
    wait_idle(served.engine)
    after = _scrape(served.url)
    for name in HISTOGRAMS:
        family = after["kvwise_" + name]
        count = _value(family, "_count")
        buckets = [(float(s.labels["le"]), s.value) for s in family.samples if s.name.endswith("_bucket")]
        assert count == finished, name
        assert [v for _, v in buckets] == sorted(v for _, v in buckets), name  # cumulative
        assert buckets[-1] == (float("inf"), count), name
        assert _value(family, "_sum") >= 0
    assert _value(after["kvwise_e2e_request_latency_seconds"], "_sum") > 0
    assert _value(after["kvwise_request_success"], "_total", finished_reason="length") == finished


def test_pool_gauges_and_token_counters_agree_with_the_engine(served):
    _requests(served.url)
    stats = wait_idle(served.engine)
    metrics = _scrape(served.url)
    blocks = metrics["kvwise_kv_blocks"]
    assert blocks.type == "gauge"
    assert sum(_value(blocks, state=s) for s in ("used", "cached", "free")) == stats.num_blocks
    assert _value(blocks, state="used") == 0
    assert _value(metrics["kvwise_kv_blocks_capacity"]) == stats.num_blocks
    assert _value(metrics["kvwise_requests_in_flight"]) == 0
    assert metrics["kvwise_generation_tokens"].type == "counter"
    assert _value(metrics["kvwise_generation_tokens"], "_total") == stats.generation_tokens == 3 * MAX_TOKENS
    assert _value(metrics["kvwise_prompt_tokens"], "_total") == stats.prompt_tokens > 0
    assert _value(metrics["kvwise_prefix_cache_hit_tokens"], "_total") == stats.prefix_cache_hit_tokens


def test_two_servers_in_one_process_keep_their_numbers_apart(served, llama_dir):
    with served_engine(llama_dir, max_model_len=256, kv_cache_memory=2**20) as other:
        _requests(served.url)
        wait_idle(served.engine)
        assert _value(_scrape(served.url)["kvwise_e2e_request_latency_seconds"], "_count") == 3
        assert _value(_scrape(other.url)["kvwise_e2e_request_latency_seconds"], "_count") == 0
