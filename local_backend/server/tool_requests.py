"""The `tools` and `tool_choice` of each wire format, checked and made one `Tool` list and one `ToolChoice`.

OpenAI Chat nests a tool's fields under `function`, the Responses API lists them flat, Anthropic
calls the schema `input_schema` and its choices `any` / `tool`; all three become the same values
(the histories that carry calls and results are `histories`' business).

`ToolChoice.mode`: `none` (tools not shown, the answer is text), `auto` (the model may call),
`required` (it must call one of them) or `named` (it must call `name`); constrained decoding
(`constrained`) holds every call to an offered tool with valid arguments, and forces one in the
last two.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from local_backend.model.tool_prompt import Tool
from local_backend.server._constants import MAX_TOOLS
from local_backend.server.compile_bounds import check_schemas
from local_backend.server.errors import ApiError
from local_backend.server.fields import short

ChoiceMode = Literal["none", "auto", "required", "named"]
_MODES: dict[str, ChoiceMode] = {"none": "none", "auto": "auto", "required": "required"}
"""The choices spelled as a string."""


@dataclass(frozen=True, slots=True)
class ToolChoice:
    mode: ChoiceMode
    name: str | None = None

    def shown(self, tools: Sequence[Tool]) -> list[Tool]:
        """The tools the prompt lists: none for `none`, else all (the forced one is listed with the others)."""
        return [] if self.mode == "none" else list(tools)

    @property
    def forced(self) -> bool:
        return self.mode in ("required", "named")

    def forced_tools(self, tools: Sequence[Tool]) -> tuple[Tool, ...]:
        """The tools a forced answer may call: all of them for `required`, the named one for `named`."""
        return tuple(t for t in tools if self.mode == "required" or t.name == self.name) if self.forced else ()


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
    return tools, _choice(body.get("tool_choice"), tools, named=_chat_named)


def _chat_named(choice: dict[str, Any]) -> Any:
    """The name of Chat's `{"type": "function", "function": {"name": ...}}`; None for any other shape."""
    function = choice.get("function")
    return function.get("name") if isinstance(function, dict) else None


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
        choice = (
            {"any": "required", "tool": {"name": choice.get("name")}}.get(kind, kind) if isinstance(kind, str) else kind
        )
    return tools, _choice(choice, tools, named=lambda c: c.get("name"))


def _choice(value: Any, tools: list[Tool], named: Any) -> ToolChoice:
    if value is None:
        return ToolChoice("auto" if tools else "none")
    if isinstance(value, str) and value in _MODES:
        choice = ToolChoice(_MODES[value])
    elif isinstance(value, dict) and isinstance(named(value), str):
        choice = ToolChoice("named", named(value))
    else:
        raise ApiError(f"tool_choice {short(value)} is not none, auto, required or a named tool", param="tool_choice")
    if choice.mode != "none" and not tools:
        raise ApiError(f"tool_choice {choice.mode!r} needs tools", param="tool_choice")
    if choice.name is not None and choice.name not in {t.name for t in tools}:
        raise ApiError(f"tool_choice names {choice.name!r}, which is not in tools", param="tool_choice")
    return choice
