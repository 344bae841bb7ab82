"""Guards never turn a valid request into an invalid one.

Every case sends the same call with the bare client and with the wrapped one to the provider
simulator (which refuses what the real APIs refuse, with their own 400s): what the bare client gets
answered, the wrapped client gets answered too, and every difference between the two request bodies
is one kvwise recorded in `kvwise.canonical.changes`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import sdk
from sdk import semconv as sc
from sdk.adapters import adapter_for
from sdk.cache.hints import count_breakpoints
from sdk.call import Api, OutputCap, Provider
from sdk.pipeline import Pipeline
from tests.sdk.helpers import LONG_SYSTEM, collect, resolve
from tests.sdk.telemetry.test_telemetry_spans import Otel, otel  # noqa: F401

MARK = {"type": "ephemeral"}
USER = [{"role": "user", "content": "hi"}]
TOOLS = [
    {"name": name, "description": "Look things up. " * 200, "input_schema": {"type": "object", "properties": {}}}
    for name in ("z_tool", "a_tool")
]
LONG_TURN = "First question about the KV cache. " * 150
THINKING = {"type": "thinking", "thinking": "Let me think about prefill.", "signature": "sig-abc"}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}

# Which recorded change explains a difference in each request field (by prefix), cache marks aside.
EXPLAINED_BY = {
    "max_tokens": ("max_tokens_",),
    "max_completion_tokens": ("max_tokens_",),
    "max_output_tokens": ("max_tokens_",),
    "extra_body": ("max_tokens_", "stop_merged"),
    "tools": ("tools_sorted", "tools_serialised"),
    "system": ("volatile_moved",),
    "messages": ("volatile_moved",),
    "input": ("volatile_moved",),
    "prompt_cache_key": ("prompt_cache_key",),
    "stop": ("stop_merged",),
    "stop_sequences": ("stop_merged",),
    "stream_options": ("stream_usage_requested",),
}
MARK_CHANGES = ("cache_breakpoint:", "tools_breakpoint_moved")
MARK_KEYS = frozenset({"cache_control", "prompt_cache_breakpoint"})
TEXT_TYPES = frozenset({"text", "input_text"})


def _unmarked(value: Any) -> Any:
    """`value` without cache marks, and a one-text-part content back to the string it was (placing
    a mark on a string prompt turns it into one marked part)."""
    if isinstance(value, list):
        items = [_unmarked(item) for item in value]
        if (
            len(items) == 1
            and isinstance(items[0], dict)
            and items[0].keys() == {"type", "text"}
            and items[0]["type"] in TEXT_TYPES
        ):
            return items[0]["text"]
        return items
    if isinstance(value, dict):
        return {key: _unmarked(item) for key, item in value.items() if key not in MARK_KEYS}
    return value


def _assert_every_difference_is_recorded(bare: dict[str, Any], ours: dict[str, Any], changes: tuple[str, ...]) -> None:
    """Each field that differs is explained by a recorded change: a cache mark by a placed or moved
    breakpoint, anything else by the change that rewrites that field."""
    for name in sorted(set(bare) | set(ours)):
        if bare.get(name) == ours.get(name):
            continue
        moved_marks_only = _unmarked(bare.get(name)) == _unmarked(ours.get(name))
        prefixes = MARK_CHANGES if moved_marks_only else EXPLAINED_BY.get(name, (name,))
        assert any(change.startswith(prefixes) for change in changes), (name, changes)


@dataclass(frozen=True)
class RequestCase:
    """One call: which API, its arguments (a fresh copy per send: a generator is used up once)."""

    name: str
    api: Api
    arguments: Callable[[], dict[str, Any]]
    policy: sdk.Policy = field(default_factory=sdk.Policy)


def _thinking_call() -> dict[str, Any]:
    return {
        "model": "claude-sonnet-5",
        "max_tokens": 16000,
        "thinking": {"type": "enabled", "budget_tokens": 8000},
        "messages": USER,
    }


def _top_level_cache_control() -> dict[str, Any]:
    return {
        "model": "claude-sonnet-5",
        "max_tokens": 64,
        "cache_control": MARK,
        "tools": TOOLS,
        "system": [{"type": "text", "text": LONG_SYSTEM, "cache_control": MARK}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": LONG_TURN, "cache_control": MARK}]},
            {"role": "assistant", "content": [{"type": "text", "text": "An answer.", "cache_control": MARK}]},
            {"role": "user", "content": "Next?"},
        ],
    }


def _thinking_history(last_parts: list[dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    return lambda: {
        "model": "claude-sonnet-5",
        "max_tokens": 64,
        "system": LONG_SYSTEM,
        "messages": [
            {"role": "user", "content": LONG_TURN},
            {"role": "assistant", "content": copy.deepcopy(last_parts)},
            {"role": "user", "content": "Go on."},
        ],
    }


CASES = [
    RequestCase("anthropic_thinking_budget_above_the_cap", Api.MESSAGES, _thinking_call),
    RequestCase("anthropic_top_level_cache_control_with_three_marks", Api.MESSAGES, _top_level_cache_control),
    RequestCase(
        "redacted_thinking_last_in_the_history_turn",
        Api.MESSAGES,
        _thinking_history([THINKING, {"type": "text", "text": "Done."}, REDACTED]),
    ),
    RequestCase("history_turn_of_thinking_only", Api.MESSAGES, _thinking_history([REDACTED])),
    RequestCase(
        "anthropic_max_tokens_zero_prewarms_the_cache",
        Api.MESSAGES,
        lambda: {"model": "claude-sonnet-5", "max_tokens": 0, "messages": USER},
    ),
    RequestCase(
        "anthropic_empty_tools_and_system",
        Api.MESSAGES,
        lambda: {"model": "c", "max_tokens": 9, "tools": [], "system": "", "messages": USER},
    ),
    RequestCase(
        "anthropic_messages_and_system_as_generators",
        Api.MESSAGES,
        lambda: {
            "model": "c",
            "max_tokens": 9,
            "system": (b for b in [{"type": "text", "text": "Be brief."}]),
            "messages": (m for m in USER),
        },
    ),
    RequestCase(
        "anthropic_extra_body_max_tokens",
        Api.MESSAGES,
        lambda: {"model": "c", "messages": USER, "max_tokens": 50, "extra_body": {"max_tokens": 9000}},
    ),
    RequestCase("chat_empty_tools", Api.CHAT, lambda: {"model": "m", "tools": [], "messages": USER}),
    RequestCase(
        "chat_messages_as_a_generator", Api.CHAT, lambda: {"model": "m", "messages": (m for m in USER), "max_tokens": 9}
    ),
    RequestCase("chat_messages_as_a_tuple", Api.CHAT, lambda: {"model": "m", "messages": tuple(USER), "max_tokens": 9}),
    RequestCase(
        "chat_extra_body_max_tokens",
        Api.CHAT,
        lambda: {"model": "m", "messages": USER, "extra_body": {"max_tokens": 9000}},
    ),
    RequestCase(
        "chat_extra_body_stops",
        Api.CHAT,
        lambda: {"model": "m", "messages": USER, "max_tokens": 9, "extra_body": {"stop": ["a", "b", "c"]}},
        sdk.Policy(stop=("END", "STOP")),
    ),
    RequestCase("chat_reasoning_model_without_a_cap", Api.CHAT, lambda: {"model": "o3", "messages": USER}),
    RequestCase(
        "responses_without_input",
        Api.RESPONSES,
        lambda: {"model": "m", "previous_response_id": "resp_1", "max_output_tokens": 9},
    ),
    RequestCase(
        "responses_empty_instructions_and_tools",
        Api.RESPONSES,
        lambda: {"model": "m", "instructions": "", "tools": [], "input": "hi", "max_output_tokens": 9},
    ),
    RequestCase(
        "responses_extra_body_max_output_tokens",
        Api.RESPONSES,
        lambda: {"model": "m", "input": "hi", "extra_body": {"max_output_tokens": 9000}},
    ),
    RequestCase("anthropic_thinking_budget_streamed", Api.MESSAGES, lambda: {**_thinking_call(), "stream": True}),
    RequestCase(
        "responses_without_input_streamed",
        Api.RESPONSES,
        lambda: {"model": "m", "previous_response_id": "resp_1", "stream": True},
    ),
    RequestCase(
        "chat_streamed_without_stream_options",
        Api.CHAT,
        lambda: {"model": "m", "messages": USER, "max_tokens": 9, "stream": True},
    ),
    RequestCase(
        "chat_streamed_with_the_callers_stream_options",
        Api.CHAT,
        lambda: {
            "model": "m",
            "messages": USER,
            "max_tokens": 9,
            "stream": True,
            "stream_options": {"include_obfuscation": False},
        },
    ),
]


def _send(client: Any, api: Api, arguments: dict[str, Any]) -> Any:
    if api is Api.MESSAGES:
        return client.messages.create(**arguments)
    if api is Api.CHAT:
        return client.chat.completions.create(**arguments)
    return client.responses.create(**arguments)


def _client(case: RequestCase, openai_client: Any, anthropic_client: Any) -> Any:
    return anthropic_client if case.api is Api.MESSAGES else openai_client


def _kind(event: Any) -> Any:
    """A stream event's kind: its `type`, or for a Chat chunk what it carries (usage included)."""
    if hasattr(event, "type"):
        return event.type
    return event.model_dump(exclude={"id", "created", "system_fingerprint"}, exclude_unset=True)


def _changes(otel: Otel) -> tuple[str, ...]:
    [span] = [span for span in otel.spans() if span.parent is None]
    changes = (span.attributes or {}).get(sc.KVWISE_CANONICAL_CHANGES, ())
    assert isinstance(changes, tuple)
    return tuple(str(change) for change in changes)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
async def test_a_request_the_bare_client_gets_answered_is_answered_wrapped_and_every_difference_is_recorded(
    simulator, openai_client, anthropic_client, otel, case
):
    client = _client(case, openai_client, anthropic_client)
    bare = await resolve(_send(client, case.api, case.arguments()))
    wrapped = sdk.wrap(client, case.policy, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)
    ours = await resolve(_send(wrapped, case.api, case.arguments()))
    assert isinstance(ours, type(bare))
    if case.arguments().get("stream"):
        assert [_kind(event) for event in await collect(ours)] == [_kind(event) for event in await collect(bare)]
    assert len(simulator.requests) == 2, "one request each, none refused and re-sent"
    sent_bare, sent_ours = simulator.requests[0].body, simulator.requests[1].body
    changes = _changes(otel)
    _assert_every_difference_is_recorded(sent_bare, sent_ours, changes)


async def test_the_cap_leaves_room_above_a_thinking_budget_so_the_answer_is_not_spent_on_thinking(
    simulator, anthropic_client
):
    simulator.reasoning_tokens = 8000
    bare = await resolve(anthropic_client.messages.create(**_thinking_call()))
    wrapped = sdk.wrap(anthropic_client, sdk.Policy(max_output_tokens=4096))
    ours = await resolve(wrapped.messages.create(**_thinking_call()))
    assert simulator.requests[-1].body["max_tokens"] == 8000 + 4096
    assert ours.content[0].text == bare.content[0].text != ""
    unset = {key: value for key, value in _thinking_call().items() if key != "max_tokens"}
    await resolve(wrapped.messages.create(**unset))
    assert simulator.requests[-1].body["max_tokens"] == 8000 + 4096


@pytest.mark.parametrize(
    ("api", "arguments"),
    [
        (Api.CHAT, {"model": "o3", "messages": USER}),
        (Api.CHAT, {"model": "my-azure-deployment", "reasoning_effort": "high", "messages": USER}),
        (Api.CHAT, {"model": "gpt-5.4", "max_completion_tokens": 30000, "messages": USER}),
        (Api.RESPONSES, {"model": "gpt-5.4-mini", "input": "hi"}),
        (Api.RESPONSES, {"model": "m", "reasoning": {"effort": "medium"}, "input": "hi", "max_output_tokens": 20000}),
    ],
    ids=["o_series", "effort_on_any_model", "callers_limit_above_the_cap", "gpt_5_responses", "responses_effort"],
)
async def test_a_reasoning_call_the_bare_client_gets_answered_does_not_come_back_empty_wrapped(
    simulator, openai_client, api, arguments
):
    simulator.reasoning_tokens = 6000  # more than the whole default cap
    bare = await resolve(_send(openai_client, api, copy.deepcopy(arguments)))
    wrapped = sdk.wrap(openai_client, sdk.Policy(max_output_tokens=4096))
    ours = await resolve(_send(wrapped, api, copy.deepcopy(arguments)))
    text = (lambda r: r.choices[0].message.content) if api is Api.CHAT else (lambda r: r.output_text)
    assert text(ours) == text(bare) != ""
    assert simulator.requests[-1].body.keys() - {"prompt_cache_key"} == simulator.requests[0].body.keys()


def test_reasoning_effort_none_turns_a_reasoning_family_back_into_a_capped_call():
    call = _chained(Api.CHAT, {"model": "gpt-5.4", "reasoning_effort": "none", "messages": USER})
    assert call.cap == OutputCap(4096, "max_completion_tokens")


def test_anthropic_adaptive_thinking_without_max_tokens_is_filled_with_room_to_think():
    call = _chained(Api.MESSAGES, {"model": "claude-opus-4-6", "thinking": {"type": "adaptive"}, "messages": USER})
    assert call.cap is not None and call.cap.tokens > 4096 and call.cap.param == "max_tokens"
    assert call.params["max_tokens"] == call.cap.tokens
    kept = _chained(
        Api.MESSAGES, {"model": "c", "thinking": {"type": "adaptive"}, "max_tokens": 32000, "messages": USER}
    )
    assert kept.params["max_tokens"] == 32000 and "max_tokens_kept:max_tokens:reasoning" in kept.decided.changes


def _chained(api: Api, arguments: dict[str, Any], policy: sdk.Policy | None = None) -> Any:
    adapter = adapter_for(api)
    call = adapter.to_call(copy.deepcopy(arguments), Provider.ANTHROPIC if api is Api.MESSAGES else Provider.OPENAI)
    Pipeline(policy or sdk.Policy()).prepare(call)
    return call


async def test_a_top_level_cache_control_takes_a_breakpoint_slot_and_no_fifth_is_added(simulator, anthropic_client):
    wrapped = sdk.wrap(anthropic_client)
    await resolve(wrapped.messages.create(**_top_level_cache_control()))
    body = simulator.requests[-1].body
    assert count_breakpoints(body, "cache_control") == 4
    assert body["tools"] == TOOLS[::-1]  # sorted, and left unmarked: every slot was the caller's


@pytest.mark.parametrize(
    ("parts", "marked"),
    [([THINKING, {"type": "text", "text": "Done."}, REDACTED], 1), ([REDACTED], None), ([THINKING], None)],
    ids=["text_before_redacted_thinking", "redacted_only", "thinking_only"],
)
async def test_thinking_blocks_go_back_unmodified_and_the_history_breakpoint_lands_on_another_part(
    simulator, anthropic_client, parts, marked
):
    wrapped = sdk.wrap(anthropic_client)
    await resolve(wrapped.messages.create(**_thinking_history(parts)()))
    sent = simulator.requests[-1].body["messages"][1]["content"]
    for index, part in enumerate(parts):
        expected = {**part, "cache_control": MARK} if index == marked else part
        assert sent[index] == expected


async def test_a_breakpoint_on_the_callers_last_tool_still_marks_the_end_of_the_tools_after_sorting(
    simulator, anthropic_client, otel
):
    tools = [{**TOOLS[1], "name": "search"}, {**TOOLS[0], "name": "fetch", "cache_control": MARK}]
    wrapped = sdk.wrap(anthropic_client, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)
    await resolve(wrapped.messages.create(model="claude-sonnet-5", max_tokens=9, tools=tools, messages=USER))
    sent = simulator.requests[-1].body["tools"]
    assert [tool["name"] for tool in sent] == ["fetch", "search"]
    assert [tool.get("cache_control") for tool in sent] == [None, MARK]
    assert "tools_breakpoint_moved" in _changes(otel)


@pytest.mark.parametrize(
    ("api", "arguments", "name"),
    [
        (Api.CHAT, {"model": "m", "messages": USER, "extra_body": {"max_tokens": 9000}}, "max_tokens"),
        (Api.RESPONSES, {"model": "m", "input": "hi", "extra_body": {"max_output_tokens": 9000}}, "max_output_tokens"),
        (
            Api.MESSAGES,
            {"model": "c", "max_tokens": 50, "messages": USER, "extra_body": {"max_tokens": 9000}},
            "max_tokens",
        ),
        (Api.MESSAGES, {"model": "c", "messages": USER, "extra_body": {"max_tokens": 9000}}, "max_tokens"),
    ],
    ids=["chat", "responses", "messages_named_and_extra", "messages_extra_only"],
)
async def test_a_limit_in_extra_body_is_capped_there_and_the_span_reports_only_what_was_sent(
    simulator, openai_client, anthropic_client, otel, api, arguments, name
):
    client = anthropic_client if api is Api.MESSAGES else openai_client
    wrapped = sdk.wrap(
        client,
        sdk.Policy(max_output_tokens=100),
        tracer_provider=otel.tracer_provider,
        meter_provider=otel.meter_provider,
    )
    await resolve(_send(wrapped, api, copy.deepcopy(arguments)))
    body = simulator.requests[-1].body
    assert body[name] == 100
    assert arguments["extra_body"][name] == 9000, "the caller's own dict is left alone"
    [span] = otel.spans()
    assert (span.attributes or {})[sc.GEN_AI_REQUEST_MAX_TOKENS] == 100
    assert _chained(api, arguments, sdk.Policy(max_output_tokens=100)).cap == OutputCap(
        100, name, in_extra_body=True, clamped_from=9000
    )


async def test_stops_in_extra_body_are_merged_there_within_the_limit_of_four(simulator, openai_client):
    simulator.reply = "alpha beta END gamma STOP delta"
    wrapped = sdk.wrap(openai_client, sdk.Policy(stop=("END", "STOP")))
    arguments = {"model": "m", "messages": USER, "extra_body": {"stop": ["x1", "x2", "x3"]}}
    response = await resolve(wrapped.chat.completions.create(**arguments))
    assert simulator.requests[-1].body["stop"] == ["x1", "x2", "x3", "END"]
    assert response.choices[0].message.content == "alpha beta "


@pytest.mark.parametrize(
    ("api", "arguments", "sent"),
    [
        (Api.CHAT, {"model": "m", "tools": [], "messages": USER}, {"tools": []}),
        (
            Api.MESSAGES,
            {"model": "c", "max_tokens": 9, "tools": [], "system": "", "messages": USER},
            {"tools": [], "system": ""},
        ),
        (Api.MESSAGES, {"model": "c", "max_tokens": 9, "system": [], "messages": USER}, {"system": []}),
        (
            Api.RESPONSES,
            {"model": "m", "tools": [], "instructions": "", "input": []},
            {"tools": [], "instructions": "", "input": []},
        ),
    ],
    ids=["chat_tools", "messages_tools_and_system", "messages_system_blocks", "responses"],
)
async def test_what_the_caller_sent_empty_stays_empty(simulator, openai_client, anthropic_client, api, arguments, sent):
    client = anthropic_client if api is Api.MESSAGES else openai_client
    await resolve(_send(sdk.wrap(client), api, copy.deepcopy(arguments)))
    body = simulator.requests[-1].body
    assert {key: body.get(key, "absent") for key in sent} == sent


async def test_a_responses_call_without_input_sends_none(simulator, openai_client):
    await resolve(sdk.wrap(openai_client).responses.create(model="m", previous_response_id="resp_1"))
    assert "input" not in simulator.requests[-1].body


@pytest.mark.parametrize("api", [Api.CHAT, Api.MESSAGES], ids=["chat", "messages"])
async def test_messages_may_be_any_iterable_the_client_takes_and_are_read_once(
    simulator, openai_client, anthropic_client, api
):
    reads = []

    def turns():
        reads.append(1)
        yield from USER

    client = anthropic_client if api is Api.MESSAGES else openai_client
    arguments = {"model": "claude-sonnet-5" if api is Api.MESSAGES else "m", "messages": turns()}
    await resolve(_send(sdk.wrap(client), api, arguments))
    assert simulator.requests[-1].body["messages"] == USER and reads == [1]


@pytest.mark.parametrize(
    ("policy_ttl", "caller_mark", "marked"),
    [
        (
            None,
            {"type": "ephemeral", "ttl": "1h"},
            ["history", "last_turn"],
        ),  # a 5m mark before the caller's 1h one is refused
        ("1h", {"type": "ephemeral"}, ["tools", "system"]),  # a 1h mark after the caller's 5m one is too
        ("1h", {"type": "ephemeral", "ttl": "1h"}, ["system", "history", "last_turn"]),  # 3 free: the longest prefixes
    ],
    ids=["5m_before_callers_1h", "1h_around_callers_5m", "1h_with_callers_1h"],
)
async def test_placed_breakpoints_keep_the_ttl_order_the_api_requires(
    simulator, anthropic_client, policy_ttl, caller_mark, marked
):
    arguments = {
        "model": "claude-sonnet-5",
        "max_tokens": 9,
        "tools": TOOLS,
        "system": LONG_SYSTEM,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": LONG_TURN, "cache_control": caller_mark}]},
            {"role": "assistant", "content": "An answer " * 300},
            {"role": "user", "content": "Next?"},
        ],
    }
    await resolve(anthropic_client.messages.create(**copy.deepcopy(arguments)))
    wrapped = sdk.wrap(anthropic_client, sdk.Policy(cache_ttl=policy_ttl))
    await resolve(wrapped.messages.create(**copy.deepcopy(arguments)))
    body = simulator.requests[-1].body
    placed = {
        "tools": "cache_control" in body["tools"][-1],
        "system": isinstance(body["system"], list),
        "history": isinstance(body["messages"][1]["content"], list),
        "last_turn": isinstance(body["messages"][2]["content"], list),
    }  # tools offered: the conversation grows
    assert [where for where, mark in placed.items() if mark] == marked


@pytest.mark.parametrize(
    ("api", "arguments", "budget"),
    [
        (Api.CHAT, {"model": "o4-mini"}, None),
        (Api.CHAT, {"model": "openai/gpt-oss-120b"}, None),
        (Api.CHAT, {"model": "openai/o3"}, None),  # a router's provider prefix
        (Api.CHAT, {"model": "us.openai.gpt-5.6-luna"}, None),  # Bedrock's region and provider prefixes
        (Api.CHAT, {"model": "openai.gpt-oss-120b-1:0"}, None),
        (Api.RESPONSES, {"model": "azure:o4-mini"}, None),
        (Api.CHAT, {"model": "us.meta.llama3-3-70b-instruct-v1:0"}, "no"),
        (Api.CHAT, {"model": "solo3"}, "no"),  # an "o" and a digit inside a name is no o-series
        (Api.CHAT, {"model": "deepseek-ai/DeepSeek-R1"}, None),
        (Api.CHAT, {"model": "gpt-4o", "reasoning_effort": "low"}, None),
        (Api.CHAT, {"model": "gpt-4o"}, "no"),
        (Api.CHAT, {"model": "gpt-5.4", "reasoning_effort": "none"}, "no"),
        (Api.RESPONSES, {"model": "gpt-5.4", "reasoning": {"effort": "none"}}, "no"),
        (Api.RESPONSES, {"model": "llama-3", "reasoning": {"effort": "high"}}, None),
        (Api.MESSAGES, {"model": "c", "thinking": {"type": "enabled", "budget_tokens": 2048}}, 2048),
        (Api.MESSAGES, {"model": "c", "thinking": {"type": "adaptive"}}, None),
        (Api.MESSAGES, {"model": "c", "thinking": {"type": "disabled"}}, "no"),
        (Api.MESSAGES, {"model": "c"}, "no"),
        (Api.MESSAGES, {"model": "claude-mythos-5-1"}, None),
        (Api.MESSAGES, {"model": "claude-fable-5"}, None),
        (Api.MESSAGES, {"model": "claude-sonnet-5"}, "no"),
    ],
)
def test_which_calls_reason_and_within_what_budget(api, arguments, budget):
    reasoning = adapter_for(api).reasoning(arguments["model"], arguments)
    assert (reasoning.budget if reasoning is not None else "no") == budget


@pytest.mark.parametrize(
    "arguments",
    [
        {"model": "claude-sonnet-5", "max_tokens": 20000, "thinking": {"type": "adaptive"}, "messages": USER},
        {"model": "claude-mythos-5", "max_tokens": 20000, "messages": USER},
    ],
    ids=["adaptive_thinking", "always_thinking_model"],
)
async def test_a_thinking_call_without_a_budget_keeps_the_callers_limit_and_is_answered_as_bare(
    simulator, anthropic_client, arguments
):
    simulator.reasoning_tokens = 6000
    bare = await resolve(anthropic_client.messages.create(**copy.deepcopy(arguments)))
    wrapped = sdk.wrap(anthropic_client, sdk.Policy(max_output_tokens=4096))
    ours = await resolve(wrapped.messages.create(**copy.deepcopy(arguments)))
    assert ours.content[0].text == bare.content[0].text != ""
    assert simulator.requests[-1].body["max_tokens"] == 20000


# Any mix of the shapes above: what the bare client gets answered, the wrapped one gets answered, and
# every body difference is recorded. Sync clients only: the rewrite is I/O-free and shared by both.

_MESSAGES_SHAPES: dict[str, Any] = {
    "model": st.sampled_from(["claude-sonnet-5", "claude-mythos-5", "claude-haiku-4-5"]),
    "max_tokens": st.sampled_from([0, 50, 9000, 20000]),
    "thinking": st.sampled_from([None, {"type": "enabled", "budget_tokens": 2048}, {"type": "adaptive"}]),
    "system": st.sampled_from(
        [
            None,
            "",
            LONG_SYSTEM,
            [{"type": "text", "text": LONG_SYSTEM, "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        ]
    ),
    "tools": st.sampled_from([None, [], TOOLS, [TOOLS[0], {**TOOLS[1], "cache_control": MARK}]]),
    "cache_control": st.sampled_from([None, MARK, {"type": "ephemeral", "ttl": "1h"}]),
    "messages": st.sampled_from(
        [
            USER,
            _thinking_history([THINKING, {"type": "text", "text": "Done."}, REDACTED])()["messages"],
            _top_level_cache_control()["messages"],
        ]
    ),
    "extra_body": st.sampled_from([None, {"max_tokens": 9000}, {"stop_sequences": ["x"]}]),
}
_CHAT_SHAPES: dict[str, Any] = {
    "model": st.sampled_from(["m", "o3", "gpt-5.6"]),
    "max_completion_tokens": st.sampled_from([None, 50, 9000]),
    "reasoning_effort": st.sampled_from([None, "none", "high"]),
    "tools": st.sampled_from([None, [], [{"type": "function", "function": {"name": n}} for n in ("b", "a")]]),
    "messages": st.sampled_from([USER, [{"role": "system", "content": LONG_SYSTEM}, *USER]]),
    "extra_body": st.sampled_from([None, {"max_tokens": 9000}, {"stop": ["a", "b", "c"]}]),
}

_RESPONSES_SHAPES: dict[str, Any] = {
    "model": st.sampled_from(["m", "gpt-5.4", "gpt-5.6"]),
    "input": st.sampled_from(
        [None, "hi", [], [{"role": "developer", "content": LONG_SYSTEM}, {"role": "user", "content": "hi"}]]
    ),
    "previous_response_id": st.sampled_from([None, "resp_1"]),
    "instructions": st.sampled_from([None, "", "Be brief."]),
    "tools": st.sampled_from([None, [], [{"type": "function", "name": n, "parameters": {}} for n in ("b", "a")]]),
    "reasoning": st.sampled_from([None, {"effort": "none"}, {"effort": "high"}]),
    "max_output_tokens": st.sampled_from([None, 50, 9000]),
    "extra_body": st.sampled_from([None, {"max_output_tokens": 9000}]),
}


@st.composite
def _calls(draw: Any, shapes: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, strategy in shapes.items() if (value := draw(strategy)) is not None}


@pytest.mark.parametrize(
    ("api", "shapes"),
    [(Api.MESSAGES, _MESSAGES_SHAPES), (Api.CHAT, _CHAT_SHAPES), (Api.RESPONSES, _RESPONSES_SHAPES)],
    ids=["messages", "chat", "responses"],
)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_mix_the_bare_client_gets_answered_is_answered_wrapped_with_every_difference_recorded(
    simulator, otel, api, shapes, data
):
    arguments = data.draw(_calls(shapes))
    simulator.reset()
    otel.spans_exporter.clear()
    if api is Api.MESSAGES:
        client: Any = anthropic.Anthropic(base_url=simulator.anthropic_base_url, api_key="k", max_retries=0)
    else:
        client = openai.OpenAI(base_url=simulator.openai_base_url, api_key="k", max_retries=0)
    try:
        _send(client, api, copy.deepcopy(arguments))
    except (anthropic.BadRequestError, openai.BadRequestError, ValueError) as refused:
        event(f"the bare request is refused: {type(refused).__name__}")
        return  # nothing to keep valid
    event("the bare request is answered")
    provider = None if api is Api.MESSAGES else "openai"  # OpenAI's cache keys and explicit marks too
    wrapped = sdk.wrap(
        client,
        sdk.Policy(stop=("END",)),
        tracer_provider=otel.tracer_provider,
        meter_provider=otel.meter_provider,
        provider=provider,
    )
    _send(wrapped, api, copy.deepcopy(arguments))
    sent_bare, sent_ours = simulator.requests[0].body, simulator.requests[1].body
    changes = _changes(otel)
    _assert_every_difference_is_recorded(sent_bare, sent_ours, changes)
