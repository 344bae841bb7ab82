"""The prefix fingerprint and the cause of a cache break across calls."""

from __future__ import annotations

import pytest

import sdk
from sdk.adapters import adapter_for
from sdk.call import Api, Provider
from sdk.pipeline import Pipeline

TOOLS = [
    {
        "type": "function",
        "function": {"name": "a", "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}},
    },
    {"type": "function", "function": {"name": "b", "parameters": {"type": "object"}}},
]


def _run(pipeline: Pipeline, messages: list, tools: list | None = None):
    adapter = adapter_for(Api.CHAT)
    call = adapter.to_call({"model": "m", "messages": messages, "tools": tools or []}, Provider.OPENAI)
    pipeline.prepare(call)
    return call


def _messages(system: str, *turns: str) -> list:
    roles = ["user", "assistant"]
    return [{"role": "system", "content": system}] + [{"role": roles[i % 2], "content": t} for i, t in enumerate(turns)]


def test_a_new_turn_extends_the_prefix_without_a_break():
    pipeline = Pipeline(sdk.Policy())
    first = _run(pipeline, _messages("Be brief.", "q1"))
    second = _run(pipeline, _messages("Be brief.", "q1", "a1", "q2"))
    assert (
        first.decided.fingerprint
        and second.decided.fingerprint
        and first.decided.fingerprint != second.decided.fingerprint
    )
    assert second.decided.break_at is None and second.decided.break_cause is None


@pytest.mark.parametrize(
    ("policy", "before", "after", "at", "cause"),
    [
        (sdk.Policy(), _messages("Be brief.", "q"), _messages("Be terse.", "q"), "system[0]", "system_changed"),
        (
            sdk.Policy(volatile="warn"),
            _messages("Now 2026-11-29T08:55:21Z", "q"),
            _messages("Now 2026-11-29T09:01:02Z", "q"),
            "system[0]",
            "volatile_content",
        ),
        (
            sdk.Policy(),
            _messages("S", "q1", "a1", "q2"),
            _messages("S", "q1 edited", "a1", "q2"),
            "messages[0]",
            "history_rewritten",
        ),
    ],
)
def test_the_first_changed_segment_and_its_cause_are_named(policy, before, after, at, cause):
    pipeline = Pipeline(policy)
    _run(pipeline, before)
    call = _run(pipeline, after)
    assert (call.decided.break_at, call.decided.break_cause) == (at, cause)


def test_tool_reorder_is_named_when_canonical_order_is_off():
    pipeline = Pipeline(sdk.Policy(canonicalize=False))
    _run(pipeline, _messages("S", "q"), TOOLS)
    call = _run(pipeline, _messages("S", "q"), list(reversed(TOOLS)))
    assert (call.decided.break_at, call.decided.break_cause) == ("tools[0]", "tool_reorder")


def test_tool_schema_change_and_unstable_serialisation_are_told_apart():
    pipeline = Pipeline(sdk.Policy(canonicalize=False))
    _run(pipeline, _messages("S", "q"), TOOLS)
    changed = [{"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}}, TOOLS[1]]
    assert _run(pipeline, _messages("S", "q"), changed).decided.break_cause == "tool_schema_changed"
    reordered_keys = [{"function": TOOLS[0]["function"], "type": "function"}, TOOLS[1]]
    _run(pipeline, _messages("S", "q"), TOOLS)
    assert _run(pipeline, _messages("S", "q"), reordered_keys).decided.break_cause == "unstable_serialisation"


def test_canonical_order_removes_the_tool_reorder_break():
    pipeline = Pipeline(sdk.Policy())
    first = _run(pipeline, _messages("S", "q"), TOOLS)
    second = _run(pipeline, _messages("S", "q"), list(reversed(TOOLS)))
    assert second.decided.break_at is None and first.decided.fingerprint == second.decided.fingerprint
