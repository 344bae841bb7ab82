"""Why the cache broke, client-side and as Anthropic's diagnostics say, one change at a time.

Real clients over loopback against the simulator (which remembers prompts by message id and
diagnoses as the API does, and expires cache entries by TTL on a clock it can move on), the real
OpenTelemetry SDK. Timing moves both clocks: the simulator's and the SDK's `monotonic`.
"""

from __future__ import annotations

import gc
import logging
from typing import Any

import anthropic
import pytest

import sdk
import sdk.cache.fingerprint
import sdk.memories
from sdk import semconv as sc
from sdk.cache import diagnostics
from sdk.call import Api, Provider
from sdk.lifecycle import CallEnd, Ending
from tests.sdk.helpers import LONG_SYSTEM, resolve
from tests.sdk.telemetry.test_telemetry_spans import SERVER, Otel, make_call, otel  # noqa: F401

SONNET, OPUS = "claude-sonnet-4-6", "claude-opus-4-7"
WEATHER = {
    "name": "weather",
    "description": "Today's weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
CLOCK = {
    "name": "clock",
    "description": "The time in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
FIRST = [{"role": "user", "content": "What is prefill?"}]
LATER = [
    *FIRST,
    {"role": "assistant", "content": "The pass over the prompt."},
    {"role": "user", "content": "And decode?"},
]
REWRITTEN = [{"role": "user", "content": "What is prefill, briefly?"}, *LATER[1:]]
PAST_5M_TTL_S = 301.0


@pytest.fixture
def clock(simulator: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """`advance(seconds)` moves the simulator's cache clock and the SDK's tracker clock together."""
    offset = [0.0]
    real, wall = sdk.cache.fingerprint.monotonic, sdk.memories.time
    monkeypatch.setattr(sdk.cache.fingerprint, "monotonic", lambda: real() + offset[0])
    monkeypatch.setattr(sdk.memories, "time", lambda: wall() + offset[0])  # the shared stores' clock

    def advance(seconds: float) -> None:
        simulator.wait_idle()  # the last answer's cache write is done: it is what expires
        offset[0] += seconds
        simulator.advance_clock(seconds)

    return advance


def _causes(otel: Otel) -> list[tuple[str | None, str | None]]:
    return [
        (
            (span.attributes or {}).get(sc.KVWISE_PREFIX_BREAK_CAUSE),
            (span.attributes or {}).get(sc.KVWISE_PREFIX_BREAK_CAUSE_SERVER),
        )
        for span in otel.spans()
    ]


async def test_each_change_gets_its_client_side_cause_and_anthropics_reason_beside_it(
    simulator: Any, anthropic_client: Any, otel: Otel, clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    wrapped = sdk.wrap(
        anthropic_client, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider, provider="anthropic"
    )  # the simulator stands in for Anthropic's own API
    base = {"max_tokens": 2048, "tools": [WEATHER]}
    steps: list[tuple[dict[str, Any], tuple[str | None, str | None]]] = [
        ({"model": SONNET, "system": LONG_SYSTEM, "messages": FIRST}, (None, None)),
        ({"model": SONNET, "system": LONG_SYSTEM, "messages": LATER}, (None, None)),  # a new turn: no break
        ({"model": OPUS, "system": LONG_SYSTEM, "messages": LATER}, ("model_changed", "model_changed")),
        (
            {"model": OPUS, "system": LONG_SYSTEM + " Be terse.", "messages": LATER},
            ("system_changed", "system_changed"),
        ),
        (
            {"model": OPUS, "system": LONG_SYSTEM + " Be terse.", "messages": LATER, "tools": [WEATHER, CLOCK]},
            ("tools_changed", "tools_changed"),
        ),
        (
            {"model": OPUS, "system": LONG_SYSTEM + " Be terse.", "messages": REWRITTEN, "tools": [WEATHER, CLOCK]},
            ("history_rewritten", "messages_changed"),
        ),
        (
            {
                "model": OPUS,
                "system": LONG_SYSTEM + " Be terse.",
                "messages": REWRITTEN,
                "tools": [WEATHER, CLOCK],
                "tool_choice": {"type": "auto"},
            },
            ("tool_choice_changed", "unavailable"),
        ),
        (
            {
                "model": OPUS,
                "system": LONG_SYSTEM + " Be terse.",
                "messages": REWRITTEN,
                "tools": [WEATHER, CLOCK],
                "tool_choice": {"type": "auto"},
                "thinking": {"type": "enabled", "budget_tokens": 1024},
            },
            ("thinking_changed", "unavailable"),
        ),
    ]
    for kwargs, _ in steps:
        await resolve(wrapped.messages.create(**{**base, **kwargs}))
    clock(PAST_5M_TTL_S)
    answer = await resolve(wrapped.messages.create(**{**base, **steps[-1][0]}))
    assert _causes(otel) == [expected for _, expected in steps] + [("ttl_expired", None)]
    assert answer.usage.cache_read_input_tokens == 0  # the server's entry had expired too
    sent = [request.body["diagnostics"] for request in simulator.requests]
    assert sent[0] == {"previous_message_id": None}
    assert all(item["previous_message_id"].startswith("msg_") for item in sent[1:])
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]  # they agreed every time


async def test_openai_calls_get_the_client_side_causes_and_a_long_ttl_asks_for_extended_retention(
    simulator: Any, openai_client: Any, otel: Otel, clock: Any
) -> None:
    wrapped = sdk.wrap(
        openai_client, sdk.Policy(cache_ttl="1h"), tracer_provider=otel.tracer_provider, provider="openai"
    )
    system = {"role": "system", "content": LONG_SYSTEM}
    tool = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object", "properties": {}}}}
    calls = [
        ({"model": "gpt-5.6", "messages": [system, *FIRST]}, None),
        ({"model": "gpt-5.5", "messages": [system, *FIRST]}, "model_changed"),
        ({"model": "gpt-5.5", "messages": [{**system, "content": LONG_SYSTEM + "!"}, *FIRST]}, "system_changed"),
        (
            {"model": "gpt-5.5", "messages": [{**system, "content": LONG_SYSTEM + "!"}, *FIRST], "tools": [tool]},
            "tools_changed",
        ),
        (
            {
                "model": "gpt-5.5",
                "messages": [{**system, "content": LONG_SYSTEM + "!"}, *FIRST],
                "tools": [tool],
                "tool_choice": "required",
            },
            "tool_choice_changed",
        ),
    ]
    for kwargs, _ in calls:
        await resolve(wrapped.chat.completions.create(**kwargs))
    clock(24 * 3600 + 1)
    await resolve(wrapped.chat.completions.create(**calls[-1][0]))
    assert [cause for cause, _ in _causes(otel)] == [expected for _, expected in calls] + ["ttl_expired"]
    assert {request.body["prompt_cache_retention"] for request in simulator.requests} == {"24h"}
    assert all("diagnostics" not in request.body for request in simulator.requests)


@pytest.mark.parametrize(
    ("how", "make_client"),
    [
        (
            "a server that is not Anthropic's API",
            lambda sim: anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key="k"),
        ),
        ("the policy turned diagnostics off", None),
        (
            "Bedrock",
            lambda sim: anthropic.AnthropicBedrock(
                base_url=f"{sim.anthropic_base_url}", aws_access_key="a", aws_secret_key="b", aws_region="us-east-1"
            ),
        ),
    ],
)
def test_diagnostics_are_only_asked_of_anthropics_own_api_and_only_when_the_policy_allows(
    simulator: Any, otel: Otel, how: str, make_client: Any
) -> None:
    if make_client is None:
        client = anthropic.Anthropic(base_url=simulator.anthropic_base_url, api_key="k")
        wrapped = sdk.wrap(client, sdk.Policy(cache_diagnostics=False), provider="anthropic")
    else:
        wrapped = sdk.wrap(
            make_client(simulator),
            tracer_provider=otel.tracer_provider,
            provider="anthropic" if how == "Bedrock" else None,
        )
    for _ in range(2):
        wrapped.messages.create(model=SONNET, max_tokens=64, messages=FIRST)
    assert simulator.requests and all("diagnostics" not in request.body for request in simulator.requests), how


def test_a_callers_own_diagnostics_are_sent_as_written(simulator: Any, otel: Otel) -> None:
    client = anthropic.Anthropic(base_url=simulator.anthropic_base_url, api_key="k")
    wrapped = sdk.wrap(client, tracer_provider=otel.tracer_provider, provider="anthropic")
    first = wrapped.messages.create(model=SONNET, max_tokens=64, system=LONG_SYSTEM, messages=FIRST)
    wrapped.messages.create(
        model=SONNET,
        max_tokens=64,
        system=LONG_SYSTEM + "!",
        messages=FIRST,
        diagnostics={"previous_message_id": first.id},
    )
    wrapped.messages.create(
        model=SONNET,
        max_tokens=64,
        system=LONG_SYSTEM,
        messages=FIRST,
        diagnostics={"previous_message_id": "msg_never_seen"},
    )
    assert simulator.requests[2].body["diagnostics"] == {"previous_message_id": "msg_never_seen"}
    assert [server for _, server in _causes(otel)] == [None, "system_changed", "previous_message_not_found"]


def test_a_server_reason_that_contradicts_the_client_side_cause_is_logged_as_a_warning(
    otel: Otel, caplog: pytest.LogCaptureFixture
) -> None:
    call = make_call(Api.MESSAGES, Provider.ANTHROPIC, model=SONNET, max_tokens=9)
    call.decided.break_at, call.decided.break_cause = "tools[0]", "tool_schema_changed"
    with caplog.at_level(logging.WARNING, logger="sdk.telemetry.spans"):
        otel.telemetry().start(call, SERVER).end(
            CallEnd(Ending.ANSWERED, response_id="msg_1", cache_miss_reason="system_changed")
        )
        agreeing = make_call(Api.MESSAGES, Provider.ANTHROPIC, model=SONNET, max_tokens=9)
        agreeing.decided.break_at, agreeing.decided.break_cause = "system[0]", "volatile_content"
        otel.telemetry().start(agreeing, SERVER).end(
            CallEnd(Ending.ANSWERED, response_id="msg_2", cache_miss_reason="system_changed")
        )
    assert [span.attributes[sc.KVWISE_PREFIX_BREAK_CAUSE_SERVER] for span in otel.spans()] == ["system_changed"] * 2
    [warning] = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert "system_changed" in warning.getMessage() and "tool_schema_changed" in warning.getMessage()


@pytest.mark.parametrize(
    ("make_client", "provider", "expected"),
    [
        (lambda: anthropic.Anthropic(api_key="k"), None, True),  # api.anthropic.com
        (lambda: anthropic.AsyncAnthropic(api_key="k"), None, True),
        (
            lambda: anthropic.Anthropic(api_key="k", base_url="http://127.0.0.1:9"),
            None,
            False,
        ),  # a gateway, a local server
        (
            lambda: anthropic.Anthropic(api_key="k", base_url="http://127.0.0.1:9"),
            "anthropic",
            True,
        ),  # said to be Anthropic
        (lambda: anthropic.AnthropicVertex(region="us-east5", project_id="p", access_token="t"), "anthropic", False),
        (lambda: anthropic.AnthropicFoundry(api_key="k", resource="r"), "anthropic", False),
        (
            lambda: anthropic.AnthropicBedrock(aws_access_key="a", aws_secret_key="b", aws_region="us-east-1"),
            "anthropic",
            False,
        ),
    ],
)
def test_only_anthropics_own_api_is_asked_for_diagnostics(
    make_client: Any, provider: str | None, expected: bool
) -> None:
    assert diagnostics.eligible(make_client(), provider) is expected


def test_a_long_run_keeps_only_the_last_call_of_each_api_and_model_in_memory(simulator: Any, otel: Otel) -> None:
    """Each call is compared with the one before it, and the next names its answer's id; none keeps
    its predecessor, or a long-lived client would hold every call it ever made."""
    client = anthropic.Anthropic(base_url=simulator.anthropic_base_url, api_key="k")
    wrapped = sdk.wrap(client, tracer_provider=otel.tracer_provider, provider="anthropic")
    answers = [
        wrapped.messages.create(model=SONNET, max_tokens=64, system=LONG_SYSTEM, messages=FIRST) for _ in range(30)
    ]
    gc.collect()
    ids = {answer.id for answer in answers}
    remembered = [
        obj for obj in gc.get_objects() if isinstance(obj, sdk.cache.fingerprint.Seen) and obj.message_id in ids
    ]
    assert [seen.message_id for seen in remembered] == [
        answers[-1].id
    ]  # of this run's calls (other tests' clients live on)
    named = [request.body["diagnostics"]["previous_message_id"] for request in simulator.requests]
    assert named == [None, *(answer.id for answer in answers[:-1])]  # each call still names the one before
