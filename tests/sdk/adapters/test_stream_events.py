"""Which stream events are content (what a re-sent stream would repeat), table-driven over every
API's event kinds, in the clients' own types: the adapters' `read_event`, no I/O."""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.types import RawMessageStreamEvent
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from sdk.adapters import StreamState, adapter_for
from sdk.call import Api

CONTENT, HEADER = "content", "header"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> ChatCompletionChunk:
    return ChatCompletionChunk.model_validate(
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


CHAT = {
    "role chunk": (_chunk({"role": "assistant", "content": "", "refusal": None}), HEADER, None),
    "text": (_chunk({"content": "Hi"}), CONTENT, "Hi"),
    "tool-call header (id, name)": (
        _chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}
                ]
            }
        ),
        CONTENT,
        "",
    ),
    "tool-call arguments": (_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a"'}}]}), CONTENT, ""),
    "legacy function_call arguments": (_chunk({"function_call": {"arguments": '{"a"'}}), CONTENT, ""),
    "refusal": (_chunk({"refusal": "I can't help with that."}), CONTENT, ""),
    "reasoning_content (vLLM, DeepSeek)": (_chunk({"reasoning_content": "Let me think"}), CONTENT, ""),
    "an empty extra field": (_chunk({"reasoning_content": None}), HEADER, None),
    "finish chunk": (_chunk({}, "stop"), HEADER, None),
}

_ANTHROPIC = TypeAdapter(RawMessageStreamEvent)
_MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [],
    "stop_reason": None,
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


def _event(payload: dict[str, Any]) -> Any:
    return _ANTHROPIC.validate_python(payload)


def _delta(delta: dict[str, Any]) -> Any:
    return _event({"type": "content_block_delta", "index": 0, "delta": delta})


def _start(block: dict[str, Any]) -> Any:
    return _event({"type": "content_block_start", "index": 0, "content_block": block})


MESSAGES = {
    "message_start": (_event({"type": "message_start", "message": _MESSAGE}), HEADER, None),
    "empty text block start": (_start({"type": "text", "text": ""}), HEADER, None),
    "empty thinking block start": (_start({"type": "thinking", "thinking": "", "signature": ""}), HEADER, None),
    "tool_use block start": (_start({"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}), CONTENT, ""),
    "redacted_thinking block": (_start({"type": "redacted_thinking", "data": "abc"}), CONTENT, ""),
    "text_delta": (_delta({"type": "text_delta", "text": "Hi"}), CONTENT, "Hi"),
    "input_json_delta": (_delta({"type": "input_json_delta", "partial_json": '{"a"'}), CONTENT, ""),
    "thinking_delta": (_delta({"type": "thinking_delta", "thinking": "Hmm"}), CONTENT, ""),
    "signature_delta": (_delta({"type": "signature_delta", "signature": "c2ln"}), CONTENT, ""),
    "message_delta": (
        _event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 3},
            }
        ),
        HEADER,
        None,
    ),
    "message_stop": (_event({"type": "message_stop"}), HEADER, None),
}

_RESPONSES = TypeAdapter(ResponseStreamEvent)
_RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "created_at": 0,
    "model": "m",
    "output": [],
    "status": "in_progress",
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
}
_AT = {"item_id": "i", "output_index": 0, "sequence_number": 1}


def _responses(payload: dict[str, Any]) -> Any:
    return _RESPONSES.validate_python(payload)


RESPONSES = {
    "response.created": (
        _responses({"type": "response.created", "response": _RESPONSE, "sequence_number": 0}),
        HEADER,
        None,
    ),
    "response.in_progress": (
        _responses({"type": "response.in_progress", "response": _RESPONSE, "sequence_number": 0}),
        HEADER,
        None,
    ),
    "message item added": (
        _responses(
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "sequence_number": 1,
                "item": {"id": "i", "type": "message", "role": "assistant", "status": "in_progress", "content": []},
            }
        ),
        HEADER,
        None,
    ),
    "reasoning item added": (
        _responses(
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "sequence_number": 1,
                "item": {"id": "i", "type": "reasoning", "summary": []},
            }
        ),
        CONTENT,
        "",
    ),
    "output_text.delta": (
        _responses({"type": "response.output_text.delta", **_AT, "content_index": 0, "delta": "Hi", "logprobs": []}),
        CONTENT,
        "Hi",
    ),
    "refusal.delta": (
        _responses({"type": "response.refusal.delta", **_AT, "content_index": 0, "delta": "No"}),
        CONTENT,
        "",
    ),
    "function_call_arguments.delta": (
        _responses({"type": "response.function_call_arguments.delta", **_AT, "delta": '{"a"'}),
        CONTENT,
        "",
    ),
    "reasoning_summary_text.delta": (
        _responses({"type": "response.reasoning_summary_text.delta", **_AT, "summary_index": 0, "delta": "Hmm"}),
        CONTENT,
        "",
    ),
    "reasoning_text.delta": (
        _responses({"type": "response.reasoning_text.delta", **_AT, "content_index": 0, "delta": "Hmm"}),
        CONTENT,
        "",
    ),
    "response.completed": (
        _responses(
            {"type": "response.completed", "response": {**_RESPONSE, "status": "completed"}, "sequence_number": 9}
        ),
        HEADER,
        None,
    ),
}

TABLE = [(Api.CHAT, name, *row) for name, row in CHAT.items()]
TABLE += [(Api.MESSAGES, name, *row) for name, row in MESSAGES.items()]
TABLE += [(Api.RESPONSES, name, *row) for name, row in RESPONSES.items()]


@pytest.mark.parametrize(
    ("api", "name", "event", "kind", "text"), TABLE, ids=[f"{api.value}: {name}" for api, name, *_ in TABLE]
)
def test_each_event_kind_reads_as_content_or_header(
    api: Api, name: str, event: Any, kind: str, text: str | None
) -> None:
    read = adapter_for(api).read_event(event, StreamState())
    assert (read is not None) is (kind == CONTENT)
    assert read == text


def test_a_usage_chunk_the_sdk_asked_for_is_swallowed_and_every_other_chunk_loses_its_usage_null() -> None:
    adapter, state = adapter_for(Api.CHAT), StreamState(hide_usage=True)
    usage = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    with_null = ChatCompletionChunk.model_validate({**_chunk({"content": "Hi"}).model_dump(), "usage": None})
    assert "usage" in with_null.model_fields_set
    assert adapter.read_event(with_null, state) == "Hi" and "usage" not in with_null.model_fields_set
    final = ChatCompletionChunk.model_validate({**_chunk({}).model_dump(), "choices": [], "usage": usage})
    assert adapter.read_event(final, state) is None and state.swallow
    assert state.usage is not None and state.usage.input_tokens == 5
