"""Expected against read: a call that reads less than kvwise sent before says so, and why.

Real clients over loopback against the simulator made to lose its cache three ways (the TTL passes
on its clock and kvwise's; a proxy in front strips `cache_control`; an eviction empties it), the
real OpenTelemetry SDK with in-memory exporters. A healthy run, a growing conversation and
repeats of a long system prompt, records no miss.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

import sdk
import sdk.cache.expected_reads
import sdk.cache.fingerprint
import sdk.memories
from sdk import semconv as sc
from sdk.report.build import Report, build, summary
from sdk.report.spans import calls, from_readable
from tests.sdk.agent_workload import workload
from tests.sdk.helpers import LONG_SYSTEM, resolve
from tests.sdk.telemetry.test_telemetry_spans import Otel, otel  # noqa: F401

CLAUDE, GPT = "claude-sonnet-4-6", "gpt-5.4"
PAST_5M_TTL_S = 301.0
TURNS = [
    {"role": "user", "content": "What is prefill?"},
    {"role": "assistant", "content": "The pass over the prompt."},
    {"role": "user", "content": "And decode?"},
]


def _misses(otel: Otel) -> list[tuple[Any, Any, Any]]:
    """Per call span: (expected, missed, cause), None where the call read what it should."""
    return [
        tuple(
            (span.attributes or {}).get(name)
            for name in (
                sc.KVWISE_CACHE_EXPECTED_READ_TOKENS,
                sc.KVWISE_CACHE_MISSED_TOKENS,
                sc.KVWISE_CACHE_MISS_CAUSE,
            )
        )
        for span in otel.spans()
        if span.name.startswith("chat ")
    ]


def _missed_counter(otel: Otel) -> dict[str, int]:
    metric = otel.metrics().get(sc.KVWISE_CACHE_MISSED_TOKENS)
    if metric is None:
        return {}
    return {str(point.attributes[sc.KVWISE_CACHE_MISS_CAUSE]): int(point.value) for point in metric.data.data_points}


def _report(otel: Otel) -> Report:
    return build(calls(from_readable(otel.spans())))


def _wrap(client: Any, otel: Otel) -> Any:
    return sdk.wrap(client, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)


async def _ask(wrapped: Any, turns: list[Any]) -> Any:
    if not hasattr(wrapped, "chat"):  # an Anthropic client
        return await resolve(wrapped.messages.create(model=CLAUDE, max_tokens=32, system=LONG_SYSTEM, messages=turns))
    return await resolve(
        wrapped.chat.completions.create(model=GPT, messages=[{"role": "system", "content": LONG_SYSTEM}, *turns])
    )


@pytest.fixture
def clock(simulator: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """`advance(seconds)` moves the simulator's cache clock and kvwise's together."""
    offset = [0.0]
    real = sdk.cache.expected_reads.monotonic
    monkeypatch.setattr(sdk.cache.expected_reads, "monotonic", lambda: real() + offset[0])
    monkeypatch.setattr(sdk.cache.fingerprint, "monotonic", lambda: real() + offset[0])
    wall = sdk.memories.time
    monkeypatch.setattr(sdk.memories, "time", lambda: wall() + offset[0])  # the shared stores' clock

    def advance(seconds: float) -> None:
        simulator.wait_idle()
        offset[0] += seconds
        simulator.advance_clock(seconds)

    return advance


@pytest.mark.parametrize("package", ["openai", "anthropic"])
async def test_a_healthy_run_records_no_missed_tokens(simulator, openai_client, anthropic_client, otel, package):
    wrapped = _wrap(openai_client if package == "openai" else anthropic_client, otel)
    for turns in (TURNS[:1], TURNS[:1], TURNS, TURNS, [{"role": "user", "content": "Explain the KV cache."}]):
        await _ask(wrapped, [dict(turn) for turn in turns])
    assert _misses(otel) == [(None, None, None)] * 5 and _missed_counter(otel) == {}
    report = _report(otel)
    assert report.misses == () and "0 cached tokens the provider missed" in summary(report)


@pytest.mark.parametrize("package", ["openai", "anthropic"])
async def test_an_eviction_is_named_evicted_with_the_tokens_expected_and_missed(
    simulator, openai_client, anthropic_client, otel, package
):
    wrapped = _wrap(openai_client if package == "openai" else anthropic_client, otel)
    await _ask(wrapped, TURNS[:1])
    simulator.reset()  # the provider drops every cached prefix
    answer = await _ask(wrapped, TURNS[:1])
    expected, missed, cause = _misses(otel)[-1]
    assert cause == "evicted" and expected > 1000 and missed == expected, _misses(otel)
    assert _missed_counter(otel) == {"evicted": missed}
    [row] = _report(otel).misses  # in the report, in tokens and dollars, as the provider's
    assert (row.cause, row.by_provider, row.calls, row.tokens) == ("evicted", True, 1, missed) and row.usd > 0
    assert f"{missed} cached tokens the provider missed" in summary(_report(otel))
    read = (
        answer.usage.cache_read_input_tokens
        if package == "anthropic"
        else answer.usage.prompt_tokens_details.cached_tokens
    )
    assert not read


async def test_a_lapsed_lifetime_is_named_lifetime_passed(simulator, anthropic_client, otel, clock):
    wrapped = _wrap(anthropic_client, otel)
    await _ask(wrapped, TURNS[:1])
    clock(PAST_5M_TTL_S)
    await _ask(wrapped, TURNS[:1])
    assert [cause for _, _, cause in _misses(otel)] == [None, "lifetime_passed"]
    [row] = _report(otel).misses
    assert row.cause == "lifetime_passed" and not row.by_provider  # explained: apart from the provider's misses


@pytest.fixture
def stripping_proxy(simulator: Any) -> Iterator[str]:
    """A gateway in front of the simulator that drops every `cache_control` from the request body."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: strip(item) for key, item in value.items() if key != "cache_control"}
        return [strip(item) for item in value] if isinstance(value, list) else value

    class Proxy(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = json.dumps(strip(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))).encode()
            headers = {
                k: v for k, v in self.headers.items() if k.lower() not in ("content-length", "host", "accept-encoding")
            }
            upstream = urllib.request.Request(
                simulator.anthropic_base_url.rstrip("/") + self.path, body, headers, method="POST"
            )
            with urllib.request.urlopen(upstream) as answer:
                data = answer.read()
                self.send_response(answer.status)
                for key, value in answer.headers.items():
                    if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def test_a_proxy_that_strips_cache_control_is_named_breakpoint_ignored(
    simulator, anthropic_client, otel, stripping_proxy
):
    wrapped = _wrap(anthropic_client.with_options(base_url=stripping_proxy), otel)
    await _ask(wrapped, TURNS[:1])
    await _ask(wrapped, TURNS[:1])
    expected, missed, cause = _misses(otel)[-1]
    assert cause == "breakpoint_ignored" and missed == expected > 1000
    assert all("cache_control" not in json.dumps(request.body) for request in simulator.requests)  # the proxy at work
    assert [(row.cause, row.by_provider) for row in _report(otel).misses] == [("breakpoint_ignored", True)]


async def test_the_interleaved_agent_workload_records_no_missed_tokens(simulator, openai_client, otel):
    wrapped = _wrap(openai_client, otel)
    for call in workload():  # three prompt families, tool loops growing their history, interleaved
        await resolve(wrapped.chat.completions.create(model=GPT, messages=call.caller, tools=call.tools))
    assert {cause for _, _, cause in _misses(otel)} == {None} and _report(otel).misses == ()


def test_a_prompt_too_short_ever_to_be_cached_is_not_remembered_and_a_long_one_is():
    from sdk.adapters import adapter_for
    from sdk.cache.expected_reads import SentPrefixes
    from sdk.call import Api, Provider

    adapter, sent = adapter_for(Api.CHAT), SentPrefixes()
    short = adapter.to_call({"model": GPT, "messages": [{"role": "user", "content": "hi"}]}, Provider.OPENAI)
    long = adapter.to_call(
        {"model": GPT, "messages": [{"role": "system", "content": LONG_SYSTEM}, *TURNS[:1]]}, Provider.OPENAI
    )
    assert sent.expect(short, None) == (None, None)
    expectation, learner = sent.expect(long, None)
    assert expectation is None and learner is not None  # the first of its prefix: nothing to expect, remembered
