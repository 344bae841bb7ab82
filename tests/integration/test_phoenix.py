"""Wrapped calls to the local backend, exported to a real Arize Phoenix and read back by its REST and GraphQL APIs."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from examples import export_phoenix
from examples.phoenix import Phoenix
from sdk import semconv as sc
from tests.integration.conftest import MODEL, Traced, span_id, trace_id

STREAMED = ("streamed", "cached", "looping")
USAGE_REPORTED = ("streamed", "cached", "non-streamed")
"""The calls that ran to their end and so carry usage and cost (the loop guard cuts the fourth)."""
SPANS_PER_STREAMED_CALL = 3  # the call, its prefill and its decode
EXAMPLE_TIMEOUT_S = 120
AS_SENT_PREFIXES = ("gen_ai.usage.", "llm.token_count.", "llm.cost.", "kvwise.cost.", "kvwise.guard.", "kvwise.cache.")
"""Attributes compared between what was sent and what Phoenix stored: usage, cache, cost, guards."""


def _as_sent(span: ReadableSpan) -> dict[str, Any]:
    attributes = dict(span.attributes or {})
    return {
        key: list(value) if isinstance(value, tuple) else value
        for key, value in attributes.items()
        if key.startswith(AS_SENT_PREFIXES)
    }


def _as_stored(traced: Traced, span: ReadableSpan) -> dict[str, Any]:
    attributes = traced.stored[span_id(span)]["attributes"]
    return {key: value for key, value in attributes.items() if key.startswith(AS_SENT_PREFIXES)}


def test_phoenix_stores_every_span_that_was_sent(traced: Traced) -> None:
    assert traced.stored.keys() == traced.sent.keys()


def test_each_streamed_call_is_an_llm_span_with_prefill_and_decode_children_in_its_trace(traced: Traced) -> None:
    for name in STREAMED:
        root = traced.roots[name]
        stored = traced.stored[span_id(root)]
        assert (stored["name"], stored["span_kind"], stored["parent_id"]) == (f"chat {MODEL}", "LLM", None), name
        children = traced.stored_children(root)
        assert sorted(child["name"] for child in children) == ["decode", "prefill"], name
        assert {child["context"]["trace_id"] for child in children} == {trace_id(root)}, name


def test_a_non_streamed_call_is_one_llm_span_without_phases(traced: Traced) -> None:
    root = traced.roots["non-streamed"]
    assert traced.stored[span_id(root)]["span_kind"] == "LLM"
    assert traced.stored_children(root) == []


def test_token_counts_cache_reads_and_cost_are_stored_as_sent(traced: Traced) -> None:
    for name in USAGE_REPORTED:
        root = traced.roots[name]
        sent = _as_sent(root)
        assert sent.keys() >= {
            sc.GEN_AI_USAGE_INPUT_TOKENS,
            sc.GEN_AI_USAGE_OUTPUT_TOKENS,
            sc.LLM_TOKEN_COUNT_PROMPT,
            sc.LLM_TOKEN_COUNT_PROMPT_DETAILS_CACHE_READ,
            sc.LLM_COST_TOTAL,
            sc.KVWISE_COST_USD,
        }, name
        assert _as_stored(traced, root) == sent, name
    cached = traced.stored[span_id(traced.roots["cached"])]["attributes"]
    assert cached[sc.LLM_TOKEN_COUNT_PROMPT_DETAILS_CACHE_READ] > 0
    assert cached[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == cached[sc.LLM_TOKEN_COUNT_PROMPT_DETAILS_CACHE_READ]


def test_phoenix_prices_each_call_at_kvwises_cost_and_its_phases_at_nothing(traced: Traced) -> None:
    for name in USAGE_REPORTED:
        root = traced.roots[name]
        cost = traced.sent[span_id(root)].attributes[sc.LLM_COST_TOTAL]
        assert cost > 0, name
        assert traced.phoenix.span_cost(span_id(root)) == pytest.approx(cost, rel=1e-9), name
        children = traced.stored_children(root)
        assert [traced.phoenix.span_cost(child["context"]["span_id"]) for child in children] == [None] * len(
            children
        ), name


def test_the_loop_guard_trip_is_stored_as_sent(traced: Traced) -> None:
    root = traced.roots["looping"]
    stored = _as_stored(traced, root)
    assert stored[sc.KVWISE_GUARD_TRIPPED] == "loop"
    assert stored == _as_sent(root)


def test_the_export_phoenix_example_lands_its_two_calls_in_its_project(phoenix: Phoenix, local_url: str) -> None:
    command = [
        sys.executable,
        "-c",
        f"from examples import export_phoenix; export_phoenix.main({local_url!r}, {phoenix.url!r}, {MODEL!r})",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=EXAMPLE_TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-3000:]
    spans = phoenix.wait_for_spans(export_phoenix.PROJECT, SPANS_PER_STREAMED_CALL * 2)
    roots = [span for span in spans if span["parent_id"] is None]
    assert [root["span_kind"] for root in roots] == ["LLM", "LLM"]
    first, second = sorted(root["attributes"][sc.LLM_TOKEN_COUNT_PROMPT_DETAILS_CACHE_READ] for root in roots)
    assert first == 0 < second  # the second call read the first one's prefix from the cache
