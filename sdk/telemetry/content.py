"""Prompt and answer text for telemetry, only when capture is switched on (it is off by default).

Where content goes is a `ContentCapture` mode: `Policy.capture_content` decides when set (False: none;
True: the environment's mode, or the span when the environment says none), else the environment
variable `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` does. Content is rendered in the
semconv message shapes, as JSON strings on the span (span attributes take no maps) and as the
structured values themselves on the `gen_ai.client.inference.operation.details` event:

    gen_ai.system_instructions  [{"type": "text", "content": "You are terse."}]
    gen_ai.input.messages       [{"role": "user", "parts": [{"type": "text", "content": "Hi"}]}]
    gen_ai.output.messages      [{"role": "assistant", "parts": [...]}]   (the finish reason is on
                                gen_ai.response.finish_reasons: in the message it is deprecated)

Native shapes of all three APIs (text blocks, tool calls and results, Responses items) map to
`text`, `tool_call` and `tool_call_response` parts; anything else (images, audio) becomes a part
that names only its type, so no binary payload is copied.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import Any

from sdk.call import Call
from sdk.semconv import CAPTURE_MESSAGE_CONTENT_ENV, ContentCapture

logger = logging.getLogger(__name__)

_TEXT_TYPES = frozenset({"text", "input_text", "output_text"})
_LEGACY_SPELLINGS = {"true": ContentCapture.SPAN_AND_EVENT, "false": ContentCapture.NO_CONTENT}
_ASSISTANT, _TOOL = "assistant", "tool"


def parse_capture(value: str | None) -> ContentCapture:
    """The capture mode an environment value names; unset, empty or unknown values mean no content."""
    if not value:
        return ContentCapture.NO_CONTENT
    text = value.strip()
    try:
        return ContentCapture(text.upper())
    except ValueError:
        pass
    if text.lower() in _LEGACY_SPELLINGS:
        return _LEGACY_SPELLINGS[text.lower()]
    logger.debug(
        "%s=%r is not one of %s; capturing no content", CAPTURE_MESSAGE_CONTENT_ENV, value, list(ContentCapture)
    )
    return ContentCapture.NO_CONTENT


def capture_mode(policy_value: bool | None, environ: Mapping[str, str] = os.environ) -> ContentCapture:
    """Resolve `Policy.capture_content` against the environment variable (see the module docstring)."""
    from_env = parse_capture(environ.get(CAPTURE_MESSAGE_CONTENT_ENV))
    if policy_value is None:
        return from_env
    if not policy_value:
        return ContentCapture.NO_CONTENT
    return from_env if from_env is not ContentCapture.NO_CONTENT else ContentCapture.SPAN_ONLY


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str)  # built once, not per value


def to_json(value: object) -> str:
    """Compact JSON for an attribute value; objects JSON cannot encode are written as their `str`."""
    return _ENCODER.encode(value)


def system_instructions(call: Call) -> list[dict[str, Any]]:
    """The system tier as semconv parts (a flat list, whatever the API's native shape)."""
    parts: list[dict[str, Any]] = []
    for item in call.system:
        native = _native(item)
        parts.extend(content_parts(native.get("content")) if "role" in native else content_parts([native]))
    return parts


def input_messages(call: Call) -> list[dict[str, Any]]:
    """The turns after the system tier, in the semconv input-message shape."""
    return [_message(_native(message)) for message in call.messages]


def output_messages(text: str | None, tool_calls: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The answer's text and tool calls (`tool_call` parts) in the semconv output-message shape
    (empty when nothing was produced)."""
    if text is None and not tool_calls:
        return []
    parts = [{"type": "text", "content": text}] if text else []
    return [{"role": _ASSISTANT, "parts": parts + list(tool_calls or ())}]


def answer_tool_calls(response: Any) -> list[dict[str, Any]]:
    """The tool calls of a non-streamed answer of any of the three APIs, as semconv `tool_call` parts.

    Chat: the first choice's `message.tool_calls`; Messages: its `tool_use` blocks; Responses: its
    `function_call` output items.
    """
    native = _native(response)
    if isinstance(native.get("choices"), list):
        choices = native["choices"]
        messages = [_native(choices[0].get("message") or {})] if choices else []
    elif isinstance(native.get("output"), list):
        messages = [_native(item) for item in native["output"]]
    else:
        messages = [{"role": _ASSISTANT, "content": native.get("content")}]
    return [part for message in messages for part in _message(message)["parts"] if part["type"] == "tool_call"]


def streamed_tool_calls(calls: Mapping[int, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The tool calls a stream delivered (`StreamState.tool_calls`), as semconv `tool_call` parts in
    their order; arguments as the API gives them whole (Anthropic's `input` is an object, the
    OpenAI APIs' arguments JSON text), left as text where a cut stream ended them half-way."""
    parts = []
    for _, streamed in sorted(calls.items()):
        arguments: Any = streamed["arguments"]
        if streamed.get("object_arguments"):  # Anthropic: the streamed JSON text of an `input` object
            try:
                arguments = json.loads(arguments) if arguments else {}
            except ValueError:
                pass
        parts.append({"type": "tool_call", "id": streamed["id"], "name": streamed["name"], "arguments": arguments})
    return parts


def content_parts(content: Any) -> list[dict[str, Any]]:
    """Native message content (a string or a list of blocks/parts) -> semconv parts."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    if not isinstance(content, (list, tuple)):
        return [_part(_native(content))]
    return [{"type": "text", "content": item} if isinstance(item, str) else _part(_native(item)) for item in content]


def _part(block: Mapping[str, Any]) -> dict[str, Any]:
    kind = block.get("type")
    if kind in _TEXT_TYPES:
        return {"type": "text", "content": block.get("text", "")}
    if kind == "tool_use":
        return {"type": "tool_call", "id": block.get("id"), "name": block.get("name"), "arguments": block.get("input")}
    if kind == "tool_result":
        return {
            "type": "tool_call_response",
            "id": block.get("tool_use_id"),
            "response": _text_of(block.get("content")),
        }
    return {"type": str(kind or "unknown")}


def _message(message: Mapping[str, Any]) -> dict[str, Any]:
    kind = message.get("type")
    if kind == "function_call":  # Responses API item
        call_part = {
            "type": "tool_call",
            "id": message.get("call_id"),
            "name": message.get("name"),
            "arguments": message.get("arguments"),
        }
        return {"role": _ASSISTANT, "parts": [call_part]}
    if kind == "function_call_output":
        return {
            "role": _TOOL,
            "parts": [{"type": "tool_call_response", "id": message.get("call_id"), "response": message.get("output")}],
        }
    role = str(message.get("role") or "user")
    if role == _TOOL:  # Chat Completions tool result
        response = {
            "type": "tool_call_response",
            "id": message.get("tool_call_id"),
            "response": _text_of(message.get("content")),
        }
        return {"role": role, "parts": [response]}
    parts = content_parts(message.get("content"))
    for tool_call in message.get("tool_calls") or ():
        native = _native(tool_call)
        function = _native(native.get("function") or {})
        parts.append(
            {
                "type": "tool_call",
                "id": native.get("id"),
                "name": function.get("name"),
                "arguments": function.get("arguments"),
            }
        )
    return {"role": role, "parts": parts}


def _text_of(content: Any) -> Any:
    """A tool result's content as plain text where it is text, else as given."""
    if isinstance(content, (list, tuple)):
        texts = [part["content"] for part in content_parts(content) if part["type"] == "text"]
        return "".join(texts) if len(texts) == len(content) else content_parts(content)
    return content


def _native(item: Any) -> Mapping[str, Any]:
    """A message or block as a mapping: callers may pass the clients' own pydantic objects back in."""
    if isinstance(item, Mapping):
        return item
    dump = getattr(item, "model_dump", None)
    return dump() if callable(dump) else {}
