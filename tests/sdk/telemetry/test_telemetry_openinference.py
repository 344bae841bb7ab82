"""OpenInference attributes (what Phoenix reads) on the call span, beside the GenAI ones, and on the phases."""

from __future__ import annotations

import json
from typing import Any

import pytest

import sdk
from sdk import semconv as sc
from sdk._constants import INVOCATION_JSON_CACHE_SIZE
from sdk.call import Api, Provider, Usage
from sdk.lifecycle import CallEnd, Ending
from sdk.policy import Policy
from sdk.telemetry.openinference import _scalars_json, invocation_attributes
from tests.sdk.helpers import collect, resolve
from tests.sdk.telemetry.test_telemetry_spans import SERVER, Otel, make_call, otel, stream_through  # noqa: F401

PRICES = {"my-model": {"input": 2.0, "cached_input": 0.5, "cache_write": 2.5, "output": 8.0}}
USAGE = Usage(input_tokens=10_000, output_tokens=1_000, cache_read_tokens=6_000, cache_write_tokens=3_000)


def test_a_priced_call_span_carries_openinference_kind_model_tokens_cache_and_cost(otel: Otel) -> None:
    record = otel.telemetry(Policy(prices=PRICES)).start(make_call(model="my-model"), SERVER)
    record.end(CallEnd(Ending.ANSWERED, usage=USAGE, response_model="my-model-2026-01-01"))
    attributes = dict(otel.spans()[-1].attributes or {})
    assert (
        attributes.items()
        >= {
            sc.OPENINFERENCE_SPAN_KIND: "LLM",
            sc.LLM_MODEL_NAME: "my-model-2026-01-01",
            sc.LLM_PROVIDER: "openai",
            sc.LLM_SYSTEM: "openai",
            sc.LLM_TOKEN_COUNT_PROMPT: 10_000,
            sc.LLM_TOKEN_COUNT_COMPLETION: 1_000,
            sc.LLM_TOKEN_COUNT_TOTAL: 11_000,
            sc.LLM_TOKEN_COUNT_PROMPT_DETAILS_CACHE_READ: 6_000,
            sc.LLM_TOKEN_COUNT_PROMPT_DETAILS_CACHE_WRITE: 3_000,
        }.items()
    )
    assert attributes[sc.LLM_TOKEN_COUNT_PROMPT] == attributes[sc.GEN_AI_USAGE_INPUT_TOKENS]
    assert attributes[sc.LLM_COST_PROMPT] == pytest.approx((1_000 * 2.0 + 6_000 * 0.5 + 3_000 * 2.5) / 1e6)
    assert attributes[sc.LLM_COST_COMPLETION] == pytest.approx(1_000 * 8.0 / 1e6)
    assert attributes[sc.LLM_COST_TOTAL] == pytest.approx(attributes[sc.KVWISE_COST_USD])
    assert sc.LLM_TOKEN_COUNT_COMPLETION_DETAILS_REASONING not in attributes


def test_the_requested_model_names_the_span_until_a_response_model_replaces_it(otel: Otel) -> None:
    otel.telemetry().start(make_call(model="my-model"), SERVER).end(CallEnd(Ending.FAILED, error="APIConnectionError"))
    attributes = dict(otel.spans()[-1].attributes or {})
    assert attributes[sc.OPENINFERENCE_SPAN_KIND] == "LLM" and attributes[sc.LLM_MODEL_NAME] == "my-model"
    assert not any(key.startswith(("llm.token_count.", "llm.cost.")) for key in attributes)


def test_reasoning_tokens_are_reported_when_there_were_some(otel: Otel) -> None:
    record = otel.telemetry().start(make_call(), SERVER)
    record.end(CallEnd(Ending.ANSWERED, usage=Usage(input_tokens=20, output_tokens=50, reasoning_tokens=30)))
    assert (otel.spans()[-1].attributes or {})[sc.LLM_TOKEN_COUNT_COMPLETION_DETAILS_REASONING] == 30


def test_an_unpriced_model_has_token_counts_but_no_cost(otel: Otel) -> None:
    otel.telemetry().start(make_call(model="unknown-model"), SERVER).end(
        CallEnd(Ending.ANSWERED, usage=Usage(input_tokens=20, output_tokens=5))
    )
    attributes = dict(otel.spans()[-1].attributes or {})
    assert attributes[sc.LLM_TOKEN_COUNT_TOTAL] == 25
    assert not any(key.startswith("llm.cost.") for key in attributes)


@pytest.mark.parametrize(
    ("api", "provider", "host", "llm_provider", "llm_system"),
    [
        (Api.CHAT, Provider.OPENAI, "api.openai.com", "openai", "openai"),
        (Api.RESPONSES, Provider.OPENAI, "api.openai.com", "openai", "openai"),
        (Api.MESSAGES, Provider.ANTHROPIC, "api.anthropic.com", "anthropic", "anthropic"),
        (Api.CHAT, Provider.OPENAI_COMPATIBLE, "myres.openai.azure.com", "azure", "openai"),
        (Api.CHAT, Provider.OPENAI_COMPATIBLE, "generativelanguage.googleapis.com", "google", "openai"),
        (Api.CHAT, Provider.OPENAI_COMPATIBLE, "api.mistral.ai", "mistralai", "openai"),
        (Api.CHAT, Provider.OPENAI_COMPATIBLE, "api.moonshot.ai", "moonshot", "openai"),
        (Api.CHAT, Provider.OPENAI_COMPATIBLE, "api.x.ai", "xai", "openai"),
        (Api.CHAT, Provider.OPENAI_COMPATIBLE, "127.0.0.1", "openai", "openai"),
    ],
)
def test_provider_and_system_are_spelled_as_openinference_spells_them(
    otel: Otel, api: Api, provider: Provider, host: str, llm_provider: str, llm_system: str
) -> None:
    otel.telemetry().start(make_call(api, provider), (host, 443)).end(CallEnd(Ending.ANSWERED))
    attributes = otel.spans()[-1].attributes or {}
    assert (attributes[sc.LLM_PROVIDER], attributes[sc.LLM_SYSTEM]) == (llm_provider, llm_system)


def test_only_the_call_span_is_an_llm_span_so_phoenix_counts_its_tokens_once(otel: Otel) -> None:
    record = otel.telemetry().start(make_call(stream=True), SERVER)
    stream_through(record, chunks=3)
    record.end(CallEnd(Ending.ANSWERED, usage=Usage(input_tokens=20, output_tokens=3)))
    kinds = {span.name: (span.attributes or {}).get(sc.OPENINFERENCE_SPAN_KIND) for span in otel.spans()}
    assert kinds == {"prefill": "CHAIN", "decode": "CHAIN", "chat gpt-4o-mini": "LLM"}
    for phase in ("prefill", "decode"):
        assert not any(key.startswith("llm.") for key in otel.span(phase).attributes or {}), phase


def test_the_phase_spans_carry_what_they_measured_as_attributes_and_as_the_output_phoenix_shows(otel: Otel) -> None:
    record = otel.telemetry().start(make_call(stream=True), SERVER)
    stream_through(record, chunks=3)
    record.end(CallEnd(Ending.ANSWERED, usage=Usage(input_tokens=100, output_tokens=30, cache_read_tokens=64)))
    prefill, decode = dict(otel.span("prefill").attributes or {}), dict(otel.span("decode").attributes or {})
    assert (prefill[sc.KVWISE_PREFILL_TOKENS], prefill[sc.KVWISE_PREFILL_CACHED_TOKENS]) == (36, 64)
    assert decode[sc.KVWISE_DECODE_TOKENS] == 30
    for span, ms_key in ((otel.span("prefill"), sc.KVWISE_PREFILL_MS), (otel.span("decode"), sc.KVWISE_DECODE_MS)):
        assert span.end_time is not None and span.start_time is not None
        assert (span.attributes or {})[ms_key] == pytest.approx((span.end_time - span.start_time) / 1e6, abs=1e-3)
    if decode[sc.KVWISE_DECODE_MS] > 0:
        assert decode[sc.KVWISE_DECODE_TOKENS_PER_S] == pytest.approx(
            30 / (decode[sc.KVWISE_DECODE_MS] / 1e3), rel=1e-2
        )
    for attributes in (prefill, decode):
        assert attributes[sc.OUTPUT_MIME_TYPE] == "application/json"
        shown = json.loads(str(attributes[sc.OUTPUT_VALUE]))
        assert shown == {
            key: value for key, value in attributes.items() if key.startswith(("kvwise.prefill.", "kvwise.decode."))
        }


def test_a_stream_without_usage_still_times_its_phases_but_counts_no_tokens(otel: Otel) -> None:
    record = otel.telemetry().start(make_call(stream=True), SERVER)
    stream_through(record, chunks=2)
    record.end(CallEnd(Ending.FAILED, error="APIConnectionError"))
    assert sc.KVWISE_PREFILL_MS in (otel.span("prefill").attributes or {})
    assert sc.KVWISE_PREFILL_TOKENS not in (otel.span("prefill").attributes or {})
    assert sc.KVWISE_DECODE_TOKENS not in (otel.span("decode").attributes or {})


# --- the conversation, with content capture on ------------------------------------------------

WEATHER_TOOL = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object", "properties": {}}}}
CHAT_TURNS = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Oslo?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Oslo"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    {"role": "user", "content": [{"type": "text", "text": "And "}, {"type": "text", "text": "tomorrow?"}]},
]
ANSWER_CALL = {"type": "tool_call", "id": "c2", "name": "forecast", "arguments": '{"city":"Oslo","day":1}'}
SECRET_HEADER = "Bearer header-secret-token"


def _span_attributes(otel: Otel) -> dict[str, Any]:
    [root] = [span for span in otel.spans() if span.parent is None]
    return dict(root.attributes or {})


def _chat_call_ended(otel: Otel, capture: bool) -> dict[str, Any]:
    call = make_call(
        messages=CHAT_TURNS,
        tools=[WEATHER_TOOL],
        temperature=0.2,
        max_tokens=64,
        extra_headers={"Authorization": SECRET_HEADER},
        extra_body={"top_k": 5},
        prediction={"type": "content", "content": "Oslo is sunny."},
    )
    record = otel.telemetry(Policy(capture_content=capture)).start(call, SERVER)
    record.end(
        CallEnd(
            Ending.ANSWERED,
            usage=Usage(input_tokens=40, output_tokens=8),
            finish_reasons=("tool_calls",),
            output_text="Checking." if record.captures_content else None,
            output_tool_calls=[ANSWER_CALL] if record.captures_content else None,
        )
    )
    return _span_attributes(otel)


def test_capture_on_writes_a_chat_calls_messages_tools_and_values_as_phoenix_instrumentations_do(
    otel: Otel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(sc.CAPTURE_MESSAGE_CONTENT_ENV, raising=False)
    attributes = _chat_call_ended(otel, capture=True)
    messages = {
        key: value
        for key, value in attributes.items()
        if key.startswith(("llm.input_messages.", "llm.output_messages."))
    }
    assert messages == {
        "llm.input_messages.0.message.role": "system",
        "llm.input_messages.0.message.content": "Be brief.",
        "llm.input_messages.1.message.role": "user",
        "llm.input_messages.1.message.content": "Weather in Oslo?",
        "llm.input_messages.2.message.role": "assistant",
        "llm.input_messages.2.message.tool_calls.0.tool_call.id": "c1",
        "llm.input_messages.2.message.tool_calls.0.tool_call.function.name": "weather",
        "llm.input_messages.2.message.tool_calls.0.tool_call.function.arguments": '{"city":"Oslo"}',
        "llm.input_messages.3.message.role": "tool",
        "llm.input_messages.3.message.tool_call_id": "c1",
        "llm.input_messages.3.message.content": "sunny",
        "llm.input_messages.4.message.role": "user",
        "llm.input_messages.4.message.contents.0.message_content.type": "text",
        "llm.input_messages.4.message.contents.0.message_content.text": "And ",
        "llm.input_messages.4.message.contents.1.message_content.type": "text",
        "llm.input_messages.4.message.contents.1.message_content.text": "tomorrow?",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": "Checking.",
        "llm.output_messages.0.message.tool_calls.0.tool_call.id": "c2",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "forecast",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"city":"Oslo","day":1}',
    }
    assert json.loads(attributes["llm.tools.0.tool.json_schema"]) == WEATHER_TOOL
    assert "llm.tools.1.tool.json_schema" not in attributes
    sent = json.loads(attributes[sc.INPUT_VALUE])
    assert attributes[sc.INPUT_MIME_TYPE] == attributes[sc.OUTPUT_MIME_TYPE] == "application/json"
    assert sent["messages"] == CHAT_TURNS and sent["tools"] == [WEATHER_TOOL] and sent["top_k"] == 5
    assert json.loads(attributes[sc.OUTPUT_VALUE]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "Checking."}, ANSWER_CALL]}
    ]
    assert json.loads(attributes[sc.GEN_AI_OUTPUT_MESSAGES]) == json.loads(attributes[sc.OUTPUT_VALUE])
    assert SECRET_HEADER not in json.dumps(attributes)


def test_capture_off_writes_no_text_but_the_invocation_parameters_and_kvwise_facts(
    otel: Otel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(sc.CAPTURE_MESSAGE_CONTENT_ENV, raising=False)
    attributes = _chat_call_ended(otel, capture=False)
    assert not any(
        key.startswith(("llm.input_messages", "llm.output_messages", "llm.tools", "input.", "output."))
        for key in attributes
    )
    exported = json.dumps(attributes)
    assert all(text not in exported for text in ("Be brief.", "Oslo", "sunny", "tomorrow", "weather", SECRET_HEADER))
    assert json.loads(attributes[sc.LLM_INVOCATION_PARAMETERS]) == {
        "model": "gpt-4o-mini",
        "temperature": 0.2,
        "max_tokens": 64,
        "top_k": 5,
    }
    assert attributes[sc.KVWISE_ATTEMPTS] == 1 and attributes[sc.LLM_TOKEN_COUNT_TOTAL] == 48


def test_capture_on_writes_an_anthropic_calls_system_tool_use_and_tool_results_as_messages(
    otel: Otel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(sc.CAPTURE_MESSAGE_CONTENT_ENV, raising=False)
    tool = {"name": "weather", "input_schema": {"type": "object", "properties": {}}}
    call = make_call(
        Api.MESSAGES,
        Provider.ANTHROPIC,
        model="claude-haiku-4-5",
        max_tokens=64,
        system="Be brief.",
        tools=[tool],
        messages=[
            {"role": "user", "content": "Weather in Oslo and Bergen?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Oslo"}},
                    {"type": "tool_use", "id": "t2", "name": "weather", "input": {"city": "Bergen"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "sunny"},
                    {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "rain"}]},
                ],
            },
        ],
    )
    record = otel.telemetry(Policy(capture_content=True)).start(call, SERVER)
    record.end(CallEnd(Ending.ANSWERED, usage=Usage(input_tokens=40, output_tokens=3), output_text="Sunny, then rain."))
    attributes = _span_attributes(otel)
    roles = [attributes.get(f"llm.input_messages.{i}.message.role") for i in range(6)]
    assert roles == ["system", "user", "assistant", "tool", "tool", None]
    assert attributes["llm.input_messages.0.message.content"] == "Be brief."
    calls = {
        key.split("tool_calls.")[1]: value
        for key, value in attributes.items()
        if "input_messages.2.message.tool_calls" in key
    }
    assert calls == {
        "0.tool_call.id": "t1",
        "0.tool_call.function.name": "weather",
        "0.tool_call.function.arguments": '{"city":"Oslo"}',
        "1.tool_call.id": "t2",
        "1.tool_call.function.name": "weather",
        "1.tool_call.function.arguments": '{"city":"Bergen"}',
    }
    results = [
        (
            attributes[f"llm.input_messages.{i}.message.tool_call_id"],
            attributes[f"llm.input_messages.{i}.message.content"],
        )
        for i in (3, 4)
    ]
    assert results == [("t1", "sunny"), ("t2", "rain")]
    assert attributes["llm.output_messages.0.message.content"] == "Sunny, then rain."
    assert json.loads(attributes["llm.tools.0.tool.json_schema"]) == tool
    assert json.loads(attributes[sc.INPUT_VALUE])["system"] == "Be brief."
    assert json.loads(attributes[sc.LLM_INVOCATION_PARAMETERS]) == {"model": "claude-haiku-4-5", "max_tokens": 64}


def _wrap(client: Any, otel: Otel) -> Any:
    return sdk.wrap(
        client,
        sdk.Policy(capture_content=True),
        tracer_provider=otel.tracer_provider,
        meter_provider=otel.meter_provider,
    )


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("api", [Api.CHAT, Api.RESPONSES, Api.MESSAGES])
async def test_a_real_clients_tool_call_answer_is_an_output_message_with_its_tool_call(
    simulator: Any,
    openai_client: Any,
    anthropic_client: Any,
    otel: Otel,
    monkeypatch: pytest.MonkeyPatch,
    api: Api,
    stream: bool,
) -> None:
    """Whole or streamed (its tool call assembled from the deltas), the answer's call is on the span."""
    monkeypatch.delenv(sc.CAPTURE_MESSAGE_CONTENT_ENV, raising=False)
    simulator.tool_call = "get_weather"
    simulator.reply = '{"city": "Oslo"}'
    question = [{"role": "user", "content": "Weather in Oslo?"}]
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    if api is Api.CHAT:
        tool = {"type": "function", "function": {"name": "get_weather", "parameters": schema}}
        answer = await resolve(
            _wrap(openai_client, otel).chat.completions.create(
                model="gpt-4o-mini", messages=question, tools=[tool], stream=stream
            )
        )
    elif api is Api.RESPONSES:
        tool = {"type": "function", "name": "get_weather", "parameters": schema}
        answer = await resolve(
            _wrap(openai_client, otel).responses.create(
                model="gpt-4o-mini", input=question, tools=[tool], stream=stream
            )
        )
    else:
        tool = {"name": "get_weather", "input_schema": schema}
        answer = await resolve(
            _wrap(anthropic_client, otel).messages.create(
                model="claude-haiku-4-5", max_tokens=64, messages=question, tools=[tool], stream=stream
            )
        )
    if stream:
        await collect(answer)
    attributes = _span_attributes(otel)
    prefix = "llm.output_messages.0.message.tool_calls.0.tool_call."
    assert attributes["llm.output_messages.0.message.role"] == "assistant"
    assert attributes[prefix + "function.name"] == "get_weather"
    assert json.loads(attributes[prefix + "function.arguments"]) == {"city": "Oslo"}
    assert attributes[prefix + "id"]
    assert attributes["llm.input_messages.0.message.content"] == "Weather in Oslo?"
    assert json.loads(attributes["llm.tools.0.tool.json_schema"]) == tool
    [answer] = json.loads(attributes[sc.GEN_AI_OUTPUT_MESSAGES])
    assert [part["name"] for part in answer["parts"] if part["type"] == "tool_call"] == ["get_weather"]


@pytest.mark.parametrize(
    ("first", "second"),
    [(1, True), (0, False), (0.0, -0.0), (1, 1.0)],
    ids=["int-bool", "zero-false", "float-signed-zero", "int-float"],
)
def test_invocation_parameters_of_values_that_compare_equal_are_each_written_as_given(first: Any, second: Any) -> None:
    for value in (first, second, first):  # the remembered JSON of one never stands in for the other
        written = invocation_attributes(make_call(seed=value, user="u"))[sc.LLM_INVOCATION_PARAMETERS]
        assert written == json.dumps({"model": "gpt-4o-mini", "seed": value, "user": "u"}, separators=(",", ":"))


def test_invocation_parameters_json_memo_stays_within_its_bound() -> None:
    for seed in range(INVOCATION_JSON_CACHE_SIZE + 50):
        written = invocation_attributes(make_call(seed=seed))[sc.LLM_INVOCATION_PARAMETERS]
        assert json.loads(written) == {"model": "gpt-4o-mini", "seed": seed}
    assert 0 < _scalars_json.cache_info().currsize <= INVOCATION_JSON_CACHE_SIZE
