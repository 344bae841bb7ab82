"""Tools, `tool_choice` and tool-bearing histories of each wire format, checked and made OpenAI-shaped.

Every format's history becomes OpenAI Chat messages (`tools.prompt_ids` renders those):
assistant turns may carry `tool_calls` (`{"id", "type": "function", "function": {"name",
"arguments"}}`, arguments as JSON text) and results are `{"role": "tool", "tool_call_id",
"content"}`. Anthropic's `tool_use` / `tool_result` blocks and the Responses API's
`function_call` / `function_call_output` items map onto them one to one.

Inside a message every key is honoured or refused, as at the top level (`fields`): a key this
backend cannot honour (a chat `name`, an assistant `refusal` or `audio`, the deprecated
`function_call`) is a 400 naming it when it carries a value; an explicit null or empty value (a passed-back
message's `refusal: null`, `annotations: []`) is the key's absence.
Anthropic's `is_error` on a `tool_result` is honoured: the result reaches the model as
`Error: <text>`.

`ToolChoice.mode`: `none` (tools not shown, the answer is text), `auto` (the model may call),
`required` (it must call one of them) or `named` (it must call `name`); the last two are enforced
by constrained decoding (`constrained`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from local_backend.server._constants import ANTHROPIC_ROLES, MAX_TOOLS, OPENAI_CHAT_ROLES
from local_backend.server.bounds import check_schemas
from local_backend.server.errors import ApiError
from local_backend.server.tools import Tool
from local_backend.server.validation import text_of

ChoiceMode = Literal["none", "auto", "required", "named"]


@dataclass(frozen=True, slots=True)
class ToolChoice:
    mode: ChoiceMode
    name: str | None = None

    def shown(self, tools: list[Tool]) -> list[Tool]:
        """The tools the prompt lists: none for `none`, else all (the forced one is listed with the others)."""
        return [] if self.mode == "none" else tools

    @property
    def forced(self) -> bool:
        return self.mode in ("required", "named")


def _tool(name: Any, description: Any, parameters: Any, where: str) -> Tool:
    if not isinstance(name, str) or not name:
        raise ApiError(f"{where}.name must be a non-empty string, got {name!r}"[:120], param=f"{where}.name")
    if parameters is None:
        parameters = {"type": "object", "properties": {}}
    if not isinstance(parameters, dict):
        raise ApiError(f"{where} parameters must be a JSON schema object", param=where)
    return Tool(name, description if isinstance(description, str) else None, parameters)


def _tools(value: Any, param: str, spell: Any) -> list[Tool]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ApiError(f"{param} must be an array of tools", param=param)
    if len(value) > MAX_TOOLS:
        raise ApiError(f"{param} has {len(value)} tools; at most {MAX_TOOLS} are allowed", param=param)
    tools = [spell(tool, f"{param}[{i}]") for i, tool in enumerate(value)]
    for i, tool in enumerate(tools):  # each on its own: only forced tools compile together (`constrained`)
        check_schemas([(tool.parameters, f"{param}[{i}]")])
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise ApiError(f"{param} has two tools of one name: {names}", param=param)
    return tools


def _openai_tool(tool: Any, where: str) -> Tool:
    if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
        raise ApiError(f"{where} must be {{'type': 'function', 'function': {{...}}}}", param=where)
    f = tool["function"]
    return _tool(f.get("name"), f.get("description"), f.get("parameters"), where)


def _flat_tool(tool: Any, where: str) -> Tool:
    """A Responses function tool: `{"type": "function", "name", "description", "parameters"}`."""
    if not isinstance(tool, dict) or tool.get("type") != "function":
        raise ApiError(f"{where} must be a function tool {{'type': 'function', 'name': ...}}", param=where)
    return _tool(tool.get("name"), tool.get("description"), tool.get("parameters"), where)


def _anthropic_tool(tool: Any, where: str) -> Tool:
    if not isinstance(tool, dict) or tool.get("type", "custom") != "custom":
        raise ApiError(f"{where}: only custom tools ({{'name', 'input_schema'}}) are supported", param=where)
    return _tool(tool.get("name"), tool.get("description"), tool.get("input_schema"), where)


def openai_tools(body: Mapping[str, Any]) -> tuple[list[Tool], ToolChoice]:
    tools = _tools(body.get("tools"), "tools", _openai_tool)
    return tools, _choice(body.get("tool_choice"), tools, named=lambda c: (c.get("function") or {}).get("name"))


def responses_tools(body: Mapping[str, Any]) -> tuple[list[Tool], ToolChoice]:
    tools = _tools(body.get("tools"), "tools", _flat_tool)
    return tools, _choice(body.get("tool_choice"), tools, named=lambda c: c.get("name"))


def anthropic_tools(body: Mapping[str, Any]) -> tuple[list[Tool], ToolChoice]:
    tools = _tools(body.get("tools"), "tools", _anthropic_tool)
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        if choice.get("disable_parallel_tool_use"):
            raise ApiError("tool_choice.disable_parallel_tool_use is not supported", param="tool_choice")
        kind = choice.get("type")
        choice = {"any": "required", "tool": {"name": choice.get("name")}}.get(kind, kind) if isinstance(kind, str) else kind
    return tools, _choice(choice, tools, named=lambda c: c.get("name"))


def _choice(value: Any, tools: list[Tool], named: Any) -> ToolChoice:
    if value is None:
        return ToolChoice("auto" if tools else "none")
    if value in ("none", "auto", "required"):
        choice = ToolChoice(value)
    elif isinstance(value, dict) and isinstance(named(value), str):
        choice = ToolChoice("named", named(value))
    else:
        raise ApiError(f"tool_choice {value!r} is not none, auto, required or a named tool"[:160], param="tool_choice")
    if choice.mode != "none" and not tools:
        raise ApiError(f"tool_choice {choice.mode!r} needs tools", param="tool_choice")
    if choice.name is not None and choice.name not in {t.name for t in tools}:
        raise ApiError(f"tool_choice names {choice.name!r}, which is not in tools", param="tool_choice")
    return choice


OPENAI_MESSAGE_KEYS: Mapping[str, frozenset[str]] = {
    "system": frozenset({"role", "content"}),
    "developer": frozenset({"role", "content"}),
    "user": frozenset({"role", "content"}),
    "assistant": frozenset({"role", "content", "tool_calls"}),
    "tool": frozenset({"role", "content", "tool_call_id"}),
}
"""The keys of a Chat message this backend honours, by role (others with a value are refused)."""
ANTHROPIC_MESSAGE_KEYS = frozenset({"role", "content"})
ERROR_RESULT_PREFIX = "Error: "
"""How a `tool_result` with `is_error: true` reaches the model."""


def _only_known_keys(message: Mapping[str, Any], known: frozenset[str], where: str) -> None:
    for key, value in message.items():
        if key not in known and value not in (None, "", [], {}):
            raise ApiError(f"{where}.{key} is not supported by this backend (it serves text to a local model); "
                           "remove it", param=f"{where}.{key}")  # fmt: skip


def openai_messages(messages: Any) -> list[dict[str, Any]]:
    """Chat messages with text content, assistant `tool_calls` and `tool` results (developer → system)."""
    if not isinstance(messages, list) or not messages:
        raise ApiError("messages must be a non-empty array of messages", param="messages")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        role = m.get("role") if isinstance(m, dict) else None
        if role not in OPENAI_CHAT_ROLES | {"tool"}:
            raise ApiError(f"{where}.role {role!r} is not one of {sorted(OPENAI_CHAT_ROLES | {'tool'})}",
                           param=f"{where}.role")  # fmt: skip
        _only_known_keys(m, OPENAI_MESSAGE_KEYS[role], where)
        content = m.get("content")
        message: dict[str, Any] = {"role": "system" if role == "developer" else role,
                                   "content": "" if content is None else text_of(content, f"{where}.content")}  # fmt: skip
        if role == "tool":
            message["tool_call_id"] = str(m.get("tool_call_id", ""))
        if role == "assistant" and m.get("tool_calls"):
            message["tool_calls"] = [_openai_call(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(m["tool_calls"])]
        out.append(message)
    return out


def _openai_call(call: Any, where: str) -> dict[str, Any]:
    f = call.get("function") if isinstance(call, dict) else None
    if not isinstance(f, dict) or not isinstance(f.get("name"), str) or not isinstance(f.get("arguments"), str):
        raise ApiError(f"{where} must be {{'id', 'type': 'function', 'function': {{'name', 'arguments'}}}}", param=where)
    return _call(str(call.get("id", "")), f["name"], f["arguments"])


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def anthropic_messages(messages: Any) -> list[dict[str, Any]]:
    """Messages whose content is a string or text, `tool_use` (assistant) and `tool_result` (user) blocks."""
    if not isinstance(messages, list) or not messages:
        raise ApiError("messages must be a non-empty array of messages", param="messages")
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ANTHROPIC_ROLES:
            raise ApiError(f"{where}.role {role!r} is not one of {sorted(ANTHROPIC_ROLES)}", param=f"{where}.role")
        _only_known_keys(m, ANTHROPIC_MESSAGE_KEYS, where)
        content = m.get("content")
        if not isinstance(content, list):
            out.append({"role": role, "content": text_of(content, f"{where}.content")})
            continue
        texts, calls = [], []
        for j, block in enumerate(content):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "tool_use" and role == "assistant":
                calls.append(_call(str(block.get("id", "")), str(block.get("name")),
                                   json.dumps(block.get("input", {}), ensure_ascii=False)))  # fmt: skip
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
    return out


def responses_items(items: list[Any]) -> list[dict[str, Any]]:
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
