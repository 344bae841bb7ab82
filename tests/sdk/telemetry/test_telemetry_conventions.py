"""The letter of the GenAI conventions on the wire: terminal reasons, failed usage, conversation ids,
OpenAI's service tier and fingerprint, OpenInference's cost split. Real clients over loopback, the
real OpenTelemetry SDK."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest

import sdk
from sdk import semconv as sc
from sdk.call import Usage
from sdk.lifecycle import CallEnd, Ending
from tests.sdk.helpers import LONG_SYSTEM, collect, resolve
from tests.sdk.telemetry.test_telemetry_spans import SERVER, Otel, make_call, otel  # noqa: F401

MODEL = "gpt-4o-mini"
QUESTION = [{"role": "user", "content": "What is prefill?"}]


def _wrap(client: Any, otel: Otel, policy: sdk.Policy | None = None) -> Any:
    return sdk.wrap(client, policy, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)


def _root(otel: Otel) -> dict[str, Any]:
    [root] = [span for span in otel.spans() if span.parent is None]
    return dict(root.attributes or {})


async def test_a_stream_broken_after_its_first_content_reports_the_error_finish_reason(
    simulator: Any, openai_client: Any, otel: Otel
) -> None:
    simulator.cut_stream_after(3, mode="drop")
    stream = await resolve(
        _wrap(openai_client, otel).chat.completions.create(model=MODEL, messages=QUESTION, stream=True)
    )
    with pytest.raises(sdk.StreamTruncated):
        await collect(stream)
    attributes = _root(otel)
    assert attributes[sc.ERROR_TYPE] == "stream_truncated"
    assert attributes[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("error",)
    assert attributes[sc.LLM_FINISH_REASON] == "error"


async def test_an_abandoned_stream_reports_no_error_and_no_finish_reason(
    simulator: Any, anthropic_client: Any, otel: Otel
) -> None:
    simulator.reply = "one two three four five six seven eight nine ten"
    wrapped = _wrap(anthropic_client, otel)
    stream = await resolve(
        wrapped.messages.create(model="claude-haiku-4-5", max_tokens=64, messages=QUESTION, stream=True)
    )
    if hasattr(stream, "__aiter__"):
        iterator = stream.__aiter__()
        for _ in range(5):
            await iterator.__anext__()
        await stream.close()
    else:
        iterator = iter(stream)
        for _ in range(5):
            next(iterator)
        stream.close()
    attributes = _root(otel)
    assert attributes[sc.KVWISE_STREAM_ABANDONED] is True
    assert sc.ERROR_TYPE not in attributes  # the caller stopped reading: no failure to count
    assert sc.GEN_AI_RESPONSE_FINISH_REASONS not in attributes and sc.LLM_FINISH_REASON not in attributes


async def test_a_complete_call_keeps_its_own_finish_reason_and_a_failed_request_reports_none(
    simulator: Any, openai_client: Any, otel: Otel
) -> None:
    wrapped = _wrap(openai_client, otel, sdk.Policy(retries=0))
    await resolve(wrapped.chat.completions.create(model=MODEL, messages=QUESTION))
    simulator.fail(400)
    with pytest.raises(openai.BadRequestError):
        await resolve(wrapped.chat.completions.create(model=MODEL, messages=QUESTION))
    ok, failed = (dict(span.attributes or {}) for span in otel.spans())
    assert ok[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert sc.GEN_AI_RESPONSE_FINISH_REASONS not in failed  # no generation started


def test_token_usage_is_recorded_for_successful_operations_only(otel: Otel) -> None:
    telemetry = otel.telemetry()
    telemetry.start(make_call(), SERVER).end(
        CallEnd(Ending.ANSWERED, usage=Usage(input_tokens=100, output_tokens=10), finish_reasons=("stop",))
    )
    telemetry.start(make_call(stream=True), SERVER).end(
        CallEnd(Ending.FAILED, usage=Usage(input_tokens=40, output_tokens=3), error="stream_truncated")
    )
    points = list(otel.metrics()[sc.GEN_AI_CLIENT_TOKEN_USAGE].data.data_points)
    assert {point.attributes[sc.GEN_AI_TOKEN_TYPE]: point.sum for point in points} == {"input": 100, "output": 10}
    durations = list(otel.metrics()[sc.GEN_AI_CLIENT_OPERATION_DURATION].data.data_points)
    assert sum(point.count for point in durations) == 2  # the failed call's duration is still recorded
    assert {point.attributes.get(sc.ERROR_TYPE) for point in durations} == {None, "stream_truncated"}


async def test_calls_inside_a_conversation_carry_its_id_and_calls_outside_do_not(
    openai_client: Any, otel: Otel
) -> None:
    wrapped = _wrap(openai_client, otel)
    with sdk.conversation("ticket-1"):
        await resolve(wrapped.chat.completions.create(model=MODEL, messages=QUESTION))
        with sdk.conversation("ticket-1/sub"):
            await resolve(wrapped.chat.completions.create(model=MODEL, messages=QUESTION))
        await resolve(wrapped.chat.completions.create(model=MODEL, messages=QUESTION))
    await resolve(wrapped.chat.completions.create(model=MODEL, messages=QUESTION))
    ids = [(span.attributes or {}).get(sc.GEN_AI_CONVERSATION_ID) for span in otel.spans()]
    assert ids == ["ticket-1", "ticket-1/sub", "ticket-1", None]


async def test_concurrent_asyncio_tasks_each_keep_their_own_conversation_id(simulator: Any, otel: Otel) -> None:
    simulator.first_token_delay = 0.05  # the calls overlap
    wrapped = _wrap(openai.AsyncOpenAI(base_url=simulator.openai_base_url, api_key="k", max_retries=0), otel)

    async def turn(name: str, question: str) -> None:
        with sdk.conversation(name):
            await wrapped.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": question}])

    with sdk.conversation("outer"):
        tasks = [asyncio.create_task(turn(f"c{i}", f"question {i}")) for i in range(4)]
        tasks.append(asyncio.create_task(wrapped.chat.completions.create(model=MODEL, messages=QUESTION)))
        await asyncio.gather(*tasks)
    ids = {span.attributes[sc.GEN_AI_CONVERSATION_ID] for span in otel.spans()}
    assert ids == {"c0", "c1", "c2", "c3", "outer"}


def test_a_conversation_id_must_be_a_non_empty_string() -> None:
    for bad in ("", None, 7):
        with pytest.raises(ValueError, match="conversation id"):
            with sdk.conversation(bad):  # type: ignore[arg-type]
                pass


async def test_openai_service_tier_and_system_fingerprint_are_recorded(openai_client: Any, otel: Otel) -> None:
    answer = await resolve(
        _wrap(openai_client, otel).chat.completions.create(model=MODEL, messages=QUESTION, service_tier="flex")
    )
    attributes = _root(otel)
    assert attributes[sc.OPENAI_REQUEST_SERVICE_TIER] == "flex"
    assert answer.service_tier and attributes[sc.OPENAI_RESPONSE_SERVICE_TIER] == answer.service_tier
    assert answer.system_fingerprint and attributes[sc.OPENAI_RESPONSE_SYSTEM_FINGERPRINT] == answer.system_fingerprint


async def test_openinference_cost_split_adds_up_to_the_prompt_cost(openai_client: Any, otel: Otel) -> None:
    wrapped = _wrap(openai_client, otel)
    messages = [{"role": "system", "content": LONG_SYSTEM}, *QUESTION]
    for _ in range(2):  # the second call reads what the first wrote
        await resolve(wrapped.chat.completions.create(model="gpt-5.6", messages=messages))
    second = dict(otel.spans()[-1].attributes or {})
    parts = (
        sc.LLM_COST_PROMPT_DETAILS_INPUT,
        sc.LLM_COST_PROMPT_DETAILS_CACHE_READ,
        sc.LLM_COST_PROMPT_DETAILS_CACHE_WRITE,
    )
    assert second[sc.KVWISE_COST_CACHED_INPUT_USD] > 0
    assert second[sc.LLM_COST_PROMPT_DETAILS_CACHE_READ] == pytest.approx(second[sc.KVWISE_COST_CACHED_INPUT_USD])
    assert sum(second[name] for name in parts) == pytest.approx(second[sc.LLM_COST_PROMPT])
    assert second[sc.LLM_COST_PROMPT_DETAILS_CACHE_INPUT] == pytest.approx(
        second[sc.LLM_COST_PROMPT_DETAILS_CACHE_READ] + second[sc.LLM_COST_PROMPT_DETAILS_CACHE_WRITE]
    )
    assert second[sc.LLM_FINISH_REASON] == "stop"
