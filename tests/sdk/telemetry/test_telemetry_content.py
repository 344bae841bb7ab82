"""Content capture: off by default, switched on by the semconv variable or the policy, semconv shapes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sdk import semconv as sc
from sdk.call import Api, Provider, Usage
from sdk.lifecycle import CallEnd, Ending
from sdk.policy import Policy
from sdk.semconv import ContentCapture
from sdk.telemetry import content
from tests.sdk.telemetry.test_telemetry_spans import SERVER, Otel, make_call, otel  # noqa: F401

SECRET_PROMPT, SECRET_SYSTEM, SECRET_ANSWER = "zebra-prompt-text", "okapi-system-text", "narwhal-answer-text"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, ContentCapture.NO_CONTENT),
        ("", ContentCapture.NO_CONTENT),
        ("NO_CONTENT", ContentCapture.NO_CONTENT),
        ("SPAN_ONLY", ContentCapture.SPAN_ONLY),
        ("event_only", ContentCapture.EVENT_ONLY),
        (" Span_And_Event ", ContentCapture.SPAN_AND_EVENT),
        ("true", ContentCapture.SPAN_AND_EVENT),
        ("False", ContentCapture.NO_CONTENT),
        ("yes please", ContentCapture.NO_CONTENT),
    ],
)
def test_the_capture_variable_is_parsed_case_insensitively_and_unknown_values_capture_nothing(
    value: str | None, expected: ContentCapture
) -> None:
    assert content.parse_capture(value) is expected


@pytest.mark.parametrize(
    ("policy", "env", "expected"),
    [
        (None, None, ContentCapture.NO_CONTENT),
        (None, "EVENT_ONLY", ContentCapture.EVENT_ONLY),
        (False, "SPAN_AND_EVENT", ContentCapture.NO_CONTENT),
        (True, None, ContentCapture.SPAN_ONLY),
        (True, "EVENT_ONLY", ContentCapture.EVENT_ONLY),
    ],
)
def test_the_policy_overrides_the_environment(policy: bool | None, env: str | None, expected: ContentCapture) -> None:
    environ = {} if env is None else {sc.CAPTURE_MESSAGE_CONTENT_ENV: env}
    assert content.capture_mode(policy, environ) is expected


def test_chat_messages_with_tool_calls_map_to_semconv_parts() -> None:
    call = make_call(
        messages=[
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [{"type": "text", "text": "Weather?"}, {"type": "image_url", "image_url": {"url": "x"}}],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {"role": "user", "content": "Thanks"},
        ]
    )
    assert content.system_instructions(call) == [{"type": "text", "content": "Be brief."}]
    assert content.input_messages(call) == [
        {"role": "user", "parts": [{"type": "text", "content": "Weather?"}, {"type": "image_url"}]},
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "weather", "arguments": "{}"}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "sunny"}]},
        {"role": "user", "parts": [{"type": "text", "content": "Thanks"}]},
    ]


def test_anthropic_blocks_map_to_semconv_parts() -> None:
    call = make_call(
        Api.MESSAGES,
        Provider.ANTHROPIC,
        max_tokens=5,
        system="Be brief.",
        messages=[
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Oslo"}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "sunny"}]}
                ],
            },
        ],
    )
    assert content.system_instructions(call) == [{"type": "text", "content": "Be brief."}]
    assert content.input_messages(call)[1:] == [
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "t1", "name": "weather", "arguments": {"city": "Oslo"}}],
        },
        {"role": "user", "parts": [{"type": "tool_call_response", "id": "t1", "response": "sunny"}]},
    ]


def test_responses_items_and_instructions_map_to_semconv_parts() -> None:
    call = make_call(
        Api.RESPONSES,
        instructions="Be brief.",
        input=[
            {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
            {"type": "function_call", "call_id": "f1", "name": "weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "f1", "output": "sunny"},
        ],
    )
    assert content.system_instructions(call) == [{"type": "text", "content": "Be brief."}]
    assert [m["role"] for m in content.input_messages(call)] == ["user", "assistant", "tool"]
    assert content.output_messages("Sunny.") == [
        {"role": "assistant", "parts": [{"type": "text", "content": "Sunny."}]}
    ]


def _run_secret_call(otel: Otel, policy: Policy) -> None:
    call = make_call(
        messages=[{"role": "system", "content": SECRET_SYSTEM}, {"role": "user", "content": SECRET_PROMPT}], stream=True
    )
    record = otel.telemetry(policy).start(call, SERVER)
    record.attempt(1)
    record.first_chunk()
    record.chunk()
    record.end(
        CallEnd(
            Ending.ANSWERED,
            usage=Usage(input_tokens=10, output_tokens=2),
            output_text=SECRET_ANSWER,
            finish_reasons=("stop",),
        )
    )


def _everything_exported(otel: Otel) -> str:
    parts: list[Any] = []
    for span in otel.spans():
        parts.append(dict(span.attributes or {}))
        parts.extend(dict(event.attributes or {}) for event in span.events)
    parts.extend(dict(event.attributes or {}) for event in otel.events())
    parts.extend(m.to_json() for m in otel.metrics().values())
    return json.dumps(parts, default=str)


def test_no_prompt_or_answer_text_is_exported_by_default(otel: Otel, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(sc.CAPTURE_MESSAGE_CONTENT_ENV, raising=False)
    _run_secret_call(otel, Policy())
    exported = _everything_exported(otel)
    assert all(secret not in exported for secret in (SECRET_PROMPT, SECRET_SYSTEM, SECRET_ANSWER))
    assert otel.events() == []


@pytest.mark.parametrize("mode", ["SPAN_ONLY", "EVENT_ONLY", "SPAN_AND_EVENT"])
def test_captured_content_goes_where_the_variable_says(otel: Otel, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    monkeypatch.setenv(sc.CAPTURE_MESSAGE_CONTENT_ENV, mode)
    _run_secret_call(otel, Policy())
    root = otel.span("chat gpt-4o-mini")
    captured = {
        sc.GEN_AI_SYSTEM_INSTRUCTIONS: [{"type": "text", "content": SECRET_SYSTEM}],
        sc.GEN_AI_INPUT_MESSAGES: [{"role": "user", "parts": [{"type": "text", "content": SECRET_PROMPT}]}],
        sc.GEN_AI_OUTPUT_MESSAGES: [{"role": "assistant", "parts": [{"type": "text", "content": SECRET_ANSWER}]}],
    }
    on_span = {key: json.loads(value) for key, value in (root.attributes or {}).items() if key in captured}
    assert on_span == (captured if "SPAN" in mode else {})
    events = otel.events()
    if "EVENT" in mode:
        [event] = events
        assert event.event_name == sc.GEN_AI_INFERENCE_DETAILS_EVENT
        assert event.span_id == root.context.span_id
        assert {key: _plain(event.attributes[key]) for key in captured} == captured  # structured, not JSON strings
        assert (
            dict(event.attributes).items()
            >= {  # the span's attributes ride along
                sc.GEN_AI_OPERATION_NAME: "chat",
                sc.GEN_AI_REQUEST_MODEL: "gpt-4o-mini",
                sc.GEN_AI_REQUEST_STREAM: True,
                sc.GEN_AI_USAGE_INPUT_TOKENS: 10,
                sc.GEN_AI_USAGE_OUTPUT_TOKENS: 2,
            }.items()
        )
        assert tuple(event.attributes[sc.GEN_AI_RESPONSE_FINISH_REASONS]) == ("stop",)
    else:
        assert events == []


def _plain(value: Any) -> Any:
    """An exported log attribute (the SDK may hand back tuples and read-only mappings) as lists and dicts."""
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if hasattr(value, "items"):
        return {key: _plain(item) for key, item in value.items()}
    return value
