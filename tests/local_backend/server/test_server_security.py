"""Tenants and secrets: one key never reads another key's prefix cache, and no key, Authorization
header or prompt text reaches the logs, the metrics or the SDK's spans."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx2
import openai
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import sdk
from local_backend.__main__ import _api_keys
from local_backend.server import create_app
from local_backend.server._constants import API_KEY_ENV
from local_backend.server.auth import tenant_id
from tests.local_backend.serving import Served, ServedEngines

KEY_A = "sk-tenant-a-7f3e9c21d4b8"
KEY_B = "sk-tenant-b-0a6d5e4f3c2b"
METRICS_KEY = "sk-metrics-5d1c8a7b9e0f"
SECRET_PROMPT = "zebra-quokka-passphrase-314159 is the launch code"
LONG_PROMPT = " ".join(["Stable bytes go first, dynamic bytes last: prefix caching works."] * 10)
LOGGERS = ("", "local_backend", "sdk", "uvicorn", "uvicorn.error", "uvicorn.access")
OURS = ("local_backend", "sdk", "uvicorn", "starlette")
"""Loggers of the server and of kvwise (the HTTP clients log their own requests at DEBUG: not ours)."""


@pytest.fixture(scope="module")
def served(serve: ServedEngines, llama_dir: Path) -> Served:
    return serve(
        llama_dir, {"api_key": [KEY_A, KEY_B], "metrics_key": METRICS_KEY}, max_model_len=512, kv_cache_memory=2**21
    )


def _openai_cached(url: str, key: str, content: str) -> int:
    with openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0) as client:
        response = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": content}], max_tokens=2
        )
    return response.usage.prompt_tokens_details.cached_tokens


def _anthropic_cached(url: str, key: str, content: str) -> int:
    with anthropic.Anthropic(base_url=url, api_key=key, max_retries=0) as client:
        response = client.messages.create(model="tiny", messages=[{"role": "user", "content": content}], max_tokens=2)
    return response.usage.cache_read_input_tokens


@pytest.mark.parametrize("cached", [_openai_cached, _anthropic_cached], ids=["openai", "anthropic"])
def test_a_key_reads_its_own_prefix_cache_and_never_another_keys(served, cached):
    prompt = f"{cached.__name__}: {LONG_PROMPT}"
    first_a = cached(served.url, KEY_A, prompt)
    second_a = cached(served.url, KEY_A, prompt)
    first_b = cached(served.url, KEY_B, prompt)
    second_b = cached(served.url, KEY_B, prompt)
    assert (first_a, first_b) == (0, 0)
    assert second_a > 0 and second_b == second_a


def test_anthropic_stream_reports_the_exact_cache_split_from_message_start(served):
    prompt = "stream split: " + LONG_PROMPT
    with anthropic.Anthropic(base_url=served.url, api_key=KEY_A, max_retries=0) as client:
        for _ in range(2):
            with client.messages.stream(
                model="tiny", messages=[{"role": "user", "content": prompt}], max_tokens=2
            ) as s:
                events = list(s)
    start = next(e for e in events if e.type == "message_start").message.usage
    final = s.get_final_message().usage
    assert start.cache_read_input_tokens > 0
    fields = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    assert [getattr(start, f) for f in fields] == [getattr(final, f) for f in fields]


def _metrics(url: str, key: str) -> httpx2.Response:
    with httpx2.Client(base_url=url) as http:
        return http.get("/metrics", headers={"authorization": f"Bearer {key}"})


def _hit_tokens(exposition: str) -> float:
    [line] = [line for line in exposition.splitlines() if line.startswith("kvwise_prefix_cache_hit_tokens_total ")]
    return float(line.split()[1])


def test_tenant_bs_metrics_do_not_move_when_tenant_a_works(served):
    before_b, before_operator = _metrics(served.url, KEY_B), _metrics(served.url, METRICS_KEY)
    prompt = "tenant a's own work: " + LONG_PROMPT
    _openai_cached(served.url, KEY_A, prompt)
    assert _openai_cached(served.url, KEY_A, prompt) > 0
    after_b, after_operator = _metrics(served.url, KEY_B), _metrics(served.url, METRICS_KEY)
    assert before_b.status_code == after_b.status_code == 403
    assert before_b.json() == after_b.json() and after_b.json()["error"]["code"] == "forbidden"
    assert "kvwise_" not in after_b.text
    assert _hit_tokens(after_operator.text) > _hit_tokens(before_operator.text)  # the work was there to see


def test_the_metrics_key_reads_only_the_metrics(served):
    with httpx2.Client(base_url=served.url) as http:
        chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        assert http.post("/v1/chat/completions", json=chat, headers={"x-api-key": METRICS_KEY}).status_code == 401
        assert http.get("/metrics").status_code == 401
    assert _metrics(served.url, METRICS_KEY).status_code == 200


def test_a_metrics_key_that_is_also_a_tenant_key_is_refused(served):
    with pytest.raises(ValueError, match="metrics_key"):
        create_app(served.engine, api_key=[KEY_A, KEY_B], metrics_key=KEY_B)


def test_tenant_ids_are_distinct_hashes_that_do_not_contain_the_key():
    assert tenant_id(KEY_A) != tenant_id(KEY_B) and tenant_id(KEY_A) == tenant_id(KEY_A)
    assert KEY_A not in tenant_id(KEY_A)


@pytest.mark.parametrize(
    ("given", "env", "keys"),
    [
        (["a"], None, ["a"]),
        (["a,b", "c"], None, ["a", "b", "c"]),
        (None, "x,y", ["x", "y"]),
        (None, None, []),
        (["a"], "ignored", ["a"]),
    ],
)
def test_api_keys_come_repeated_or_comma_separated_or_from_the_environment(monkeypatch, given, env, keys):
    if env is None:
        monkeypatch.delenv(API_KEY_ENV, raising=False)
    else:
        monkeypatch.setenv(API_KEY_ENV, env)
    assert _api_keys(given) == keys


def test_an_empty_api_key_is_refused(served):
    with pytest.raises(ValueError, match="api_key"):
        create_app(served.engine, api_key=[KEY_A, ""])


@contextlib.contextmanager
def _every_log_record(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Capture every record at DEBUG from the root, ours and uvicorn's (which does not propagate)."""
    saved = [(logging.getLogger(name), logging.getLogger(name).level) for name in LOGGERS]
    for logger, _ in saved:
        logger.setLevel(logging.DEBUG)
        if logger.name.startswith("uvicorn"):
            logger.addHandler(caplog.handler)
    try:
        yield
    finally:
        for logger, level in saved:
            logger.setLevel(level)
            logger.removeHandler(caplog.handler)


def test_no_key_header_or_prompt_reaches_logs_metrics_or_sdk_spans(served, caplog):
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    metrics = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[metrics])
    messages = [{"role": "user", "content": SECRET_PROMPT}]
    with _every_log_record(caplog):
        with openai.OpenAI(base_url=f"{served.url}/v1", api_key=KEY_A, max_retries=0) as raw:
            client = sdk.wrap(raw, tracer_provider=tracer_provider, meter_provider=meter_provider)
            client.chat.completions.create(model="tiny", messages=messages, max_tokens=4)
            list(client.chat.completions.create(model="tiny", messages=messages, max_tokens=4, stream=True))
        with anthropic.Anthropic(base_url=served.url, api_key=KEY_B, max_retries=0) as client:
            client.messages.create(model="tiny", messages=messages, max_tokens=4)
        with httpx2.Client(base_url=served.url) as http:
            bad = {"model": "tiny", "messages": messages, "max_tokens": -1}
            assert (
                http.post("/v1/chat/completions", json=bad, headers={"authorization": f"Bearer {KEY_A}"}).status_code
                == 400
            )
            assert http.post("/v1/messages", json=bad, headers={"x-api-key": "sk-wrong-" + KEY_B}).status_code == 401
            exposition = http.get("/metrics", headers={"x-api-key": METRICS_KEY}).text
            assert "kvwise_prompt_tokens_total" in exposition
    ours = [r for r in caplog.records if r.name.split(".")[0] in OURS]
    assert any(r.name == "uvicorn.access" for r in ours)  # the capture saw the requests
    logs = "\n".join(f"{r.name} {r.getMessage()} {r.args!r}" for r in ours)
    telemetry = (
        json.dumps(
            [
                {
                    "name": s.name,
                    "attributes": dict(s.attributes or {}),
                    "events": [dict(e.attributes or {}) for e in s.events],
                }
                for s in spans.get_finished_spans()
            ],
            default=str,
        )
        + metrics.get_metrics_data().to_json()
    )
    assert spans.get_finished_spans()
    for where, text in (("logs", logs), ("metrics", exposition), ("spans", telemetry)):
        for secret in (KEY_A, KEY_B, "zebra-quokka", "Bearer", "authorization"):
            assert secret not in text, f"{secret!r} found in the {where}"
