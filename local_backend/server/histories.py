"""Each wire format's conversation history, checked and made OpenAI Chat messages (`tools.prompt_ids` renders those).

Assistant turns may carry `tool_calls` (`{"id", "type": "function", "function": {"name",
"arguments"}}`, arguments as JSON text) and results are `{"role": "tool", "tool_call_id",
"content"}`. Anthropic's `tool_use` / `tool_result` blocks and the Responses API's
`function_call` / `function_call_output` items map onto them one to one; Anthropic's `system`
and the Responses API's `instructions` become the first turn.

Inside a message every key is honoured or refused, as at the top level (`fields`): a key this
backend cannot honour (an assistant `refusal` or `audio`, the deprecated `function_call`) is a 400
naming it when it carries a value; an explicit null or empty value (a passed-back message's
`refusal: null`, `annotations: []`) is the key's absence. A chat message's `name` (a participant's
name) stays in the message the chat template gets, as vLLM hands it over: a template that shows
names shows it.
Anthropic's `is_error` on a `tool_result` is honoured: the result reaches the model as
`Error: <text>`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from local_backend.server._constants import MAX_MESSAGES
from local_backend.server.errors import ApiError
from local_backend.server.fields import short

OPENAI_CHAT_ROLES: Final = frozenset({"system", "developer", "user", "assistant"})
"""Roles a Chat Completions message may have (`developer` is rendered as `system`)."""

ANTHROPIC_ROLES: Final = frozenset({"user", "assistant", "system"})
"""Roles of an Anthropic message (anthropic 2.x's `SystemMessageParam` puts system text among the turns)."""

OPENAI_MESSAGE_KEYS: Mapping[str, frozenset[str]] = {
    "system": frozenset({"role", "content", "name"}),
    "developer": frozenset({"role", "content", "name"}),
    "user": frozenset({"role", "content", "name"}),
    "assistant": frozenset({"role", "content", "name", "tool_calls"}),
    "tool": frozenset({"role", "content", "tool_call_id"}),
}
"""The keys of a Chat message this backend honours, by role (others with a value are refused)."""
ANTHROPIC_MESSAGE_KEYS = frozenset({"role", "content"})
ERROR_RESULT_PREFIX = "Error: "
"""How a `tool_result` with `is_error: true` reaches the model."""


def _only_known_keys(message: Mapping[str, Any], known: frozenset[str], where: str) -> None:
    for key, value in message.items():
        if key not in known and value not in (None, "", [], {}):
            raise ApiError(
                f"{where}.{key} is not supported by this backend (it serves text to a local model); remove it",
                param=f"{where}.{key}",
            )


def openai_messages(messages: Any, names: bool = True) -> list[dict[str, Any]]:
    """Chat messages with text content, assistant `tool_calls` and `tool` results (developer → system);
    `names`: a message may carry a `name` (Chat's; the Responses API's items have none)."""
    _check_count(messages, "messages")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        role = m.get("role") if isinstance(m, dict) else None
        if not isinstance(role, str) or role not in OPENAI_CHAT_ROLES | {"tool"}:
            raise ApiError(
                f"{where}.role {short(role)} is not one of {sorted(OPENAI_CHAT_ROLES | {'tool'})}",
                param=f"{where}.role",
            )
        _only_known_keys(m, OPENAI_MESSAGE_KEYS[role] - ({"name"} if not names else set()), where)
        content = m.get("content")
        message: dict[str, Any] = {
            "role": "system" if role == "developer" else role,
            "content": "" if content is None else text_of(content, f"{where}.content"),
        }
        if m.get("name") not in (None, "") and role != "tool":
            message["name"] = _name(m["name"], f"{where}.name")
        if role == "tool":
            message["tool_call_id"] = str(m.get("tool_call_id", ""))
        if role == "assistant" and m.get("tool_calls"):
            calls = m["tool_calls"]
            if not isinstance(calls, list):
                raise ApiError(
                    f"{where}.tool_calls must be an array of calls, got {short(calls)}", param=f"{where}.tool_calls"
                )
            message["tool_calls"] = [_openai_call(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(calls)]
        out.append(message)
    return out


def _check_count(messages: Any, param: str) -> None:
    """400 unless `messages` is a non-empty list of at most `MAX_MESSAGES` (checked before any is read)."""
    if not isinstance(messages, list) or not messages:
        raise ApiError(f"{param} must be a non-empty array of messages", param=param)
    if len(messages) > MAX_MESSAGES:
        raise ApiError(f"{param} holds {len(messages)} messages; at most {MAX_MESSAGES} are allowed", param=param)


def _name(name: Any, param: str) -> str:
    if not isinstance(name, str):
        raise ApiError(f"{param} must be a string, got {short(name)}", param=param)
    return name


def _openai_call(call: Any, where: str) -> dict[str, Any]:
    f = call.get("function") if isinstance(call, dict) else None
    if not isinstance(f, dict) or not isinstance(f.get("name"), str) or not isinstance(f.get("arguments"), str):
        raise ApiError(
            f"{where} must be {{'id', 'type': 'function', 'function': {{'name', 'arguments'}}}}", param=where
        )
    return _call(str(call.get("id", "")), f["name"], f["arguments"])


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def anthropic_messages(messages: Any, system: Any) -> list[dict[str, Any]]:
    """`system`, then messages whose content is a string or text, `tool_use` (assistant) and `tool_result` (user)
    blocks."""
    _check_count(messages, "messages")
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        role = m.get("role") if isinstance(m, dict) else None
        if not isinstance(role, str) or role not in ANTHROPIC_ROLES:
            raise ApiError(f"{where}.role {short(role)} is not one of {sorted(ANTHROPIC_ROLES)}", param=f"{where}.role")
        _only_known_keys(m, ANTHROPIC_MESSAGE_KEYS, where)
        content = m.get("content")
        if not isinstance(content, list):
            out.append({"role": role, "content": text_of(content, f"{where}.content")})
            continue
        texts, calls = [], []
        for j, block in enumerate(content):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "tool_use" and role == "assistant":
                calls.append(
                    _call(
                        str(block.get("id", "")),
                        str(block.get("name")),
                        json.dumps(block.get("input", {}), ensure_ascii=False),
                    )
                )
            elif kind == "tool_result" and role == "user":
                result = block.get("content")
                text = "" if result is None else text_of(result, f"{where}.content[{j}].content")
                if block.get("is_error") is True:
                    text = ERROR_RESULT_PREFIX + text
                out.append({"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")), "content": text})
            else:
                texts.append(text_of([block], f"{where}.content[{j}]"))
        if texts or calls or role == "assistant":
            out.append({"role": role, "content": "".join(texts), **({"tool_calls": calls} if calls else {})})
    if system:
        out.insert(0, {"role": "system", "content": text_of(system, "system")})
    return out


def responses_messages(items: Any, instructions: str | None) -> list[dict[str, Any]]:
    """`instructions` then `input` (a string: one user turn) as Chat messages, calls and their outputs included."""
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise ApiError("input must be a non-empty string or a non-empty list of input items", param="input")
    _check_count(items, "input")
    messages = []
    for item in _responses_items(items):
        content = item.get("content")
        if item.get("role") != "tool" and isinstance(content, list):
            content = [
                {**part, "type": "text"} if isinstance(part, dict) and part.get("type") in _TEXT_PARTS else part
                for part in content
            ]
        messages.append({k: v for k, v in {**item, "content": content}.items() if k not in _ITEM_ONLY_KEYS})
    if instructions:
        messages.insert(0, {"role": "system", "content": instructions})
    try:
        return openai_messages(messages, names=False)
    except ApiError as exc:
        exc.message, exc.param = (
            exc.message.replace("messages", "input"),
            (exc.param or "").replace("messages", "input"),
        )
        raise


_TEXT_PARTS: Final = frozenset({"input_text", "output_text", "text"})
_ITEM_ONLY_KEYS: Final = frozenset({"type", "id", "status", "phase"})
"""A message item's keys that are not the message: its kind, and the bookkeeping of an earlier output
passed back (`id`, `status`, and `phase`, a label the local model's template has no place for)."""


def _responses_items(items: list[Any]) -> list[dict[str, Any]]:
    """Responses input items: messages, `function_call` and `function_call_output`."""
    out: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "function_call":
            call = _call(str(item.get("call_id", "")), str(item.get("name")), str(item.get("arguments", "{}")))
            if out and out[-1]["role"] == "assistant":
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else text_of(output, f"input[{i}].output")
            out.append({"role": "tool", "tool_call_id": str(item.get("call_id", "")), "content": text})
        elif kind == "message":
            out.append(item)
        else:
            raise ApiError(f"input[{i}] of type {kind!r} is not supported", param=f"input[{i}]")
    return out


def text_of(content: Any, param: str) -> str:
    """A message's text: a string, or a list of `{"type": "text", "text": ...}` parts (joined).

    Other part types (images, tool calls) are refused: this backend serves text models. Extra keys
    on a text part, such as Anthropic's `cache_control`, are accepted and ignored.
    """
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ApiError(f"{param} must be a string or a list of text parts, got {short(content)}", param=param)
    texts = []
    for i, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise ApiError(
                f"{param}[{i}] must be a text part {{'type': 'text', 'text': ...}}, got {short(part)}", param=param
            )
        texts.append(part["text"])
    return "".join(texts)
