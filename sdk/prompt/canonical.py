"""Canonical order: stable bytes first, volatile bytes last, the same content always the same bytes.

Tiers, front to back: tools -> system -> pinned documents -> history -> per-request dynamic content
-> the final user turn. Tools are sorted by name and their envelopes serialised in one key order;
a schema's own key order is kept. Bytes of the system prompt that change between calls (request
ids, timestamps, nonces; of a labelled value, the label and value only) are, under
`volatile="move"`, cut on first sight where their shape says so (`sdk.prompt.first_sight`), else from the
call on which they first change, for good, and appended, labelled,
to a context note (`sdk.prompt.moving`), so the model still sees them. Values constant within a
conversation go to the note that ends its first user turn, values that change within it to a tail
note at the end of the prompt, so a growing conversation's next call begins with this one's whole
prompt up to the tail note. Bytes that only look volatile but
are the same on every call stay in place, and tool definitions are never rewritten for volatility.
Turns are never reordered; nothing is dropped; a second pass changes nothing.
"""

from __future__ import annotations

from typing import Any

from sdk.adapters import Adapter
from sdk.call import Call
from sdk.policy import Policy
from sdk.prompt.families import FamilyMemory
from sdk.prompt.moving import NOTE_CLOSE as NOTE_CLOSE  # the context note's tags, used by sdk.prompt_builder
from sdk.prompt.moving import NOTE_OPEN as NOTE_OPEN
from sdk.prompt.moving import move_volatile

_ENVELOPE_ORDER = ("type", "name", "description", "strict", "function", "parameters", "input_schema")


def tool_name(tool: Any) -> str:
    """The name of a native tool definition of any of the three APIs ("" for built-in tools)."""
    if not isinstance(tool, dict):
        return ""
    function = tool.get("function")
    name = function.get("name") if isinstance(function, dict) else tool.get("name")
    return name if isinstance(name, str) else ""


def canonical_tool(tool: Any) -> Any:
    """A tool with its envelope keys in one fixed order and `required` lists sorted.

    The schema's own property order is kept: order can matter to structured output. Only plain
    dicts are rebuilt, and only where their order differs: a typed tool (openai's
    `PydanticFunctionTool`, a dict subclass that carries the model its `parse` answers in) is the
    caller's object, kept as it is, and so is a tool already in canonical order.
    """
    if type(tool) is not dict:
        return tool
    known = [key for key in _ENVELOPE_ORDER if key in tool]
    rest = sorted(key for key in tool if key not in _ENVELOPE_ORDER)
    ordered: dict[str, Any] = {}
    for key in (*known, *rest):
        value = tool[key]
        if key == "function":
            value = canonical_tool(value)
        elif key in ("parameters", "input_schema"):
            value = _canonical_schema(value)
        ordered[key] = value
    return tool if _same(ordered, tool) else ordered


def _canonical_schema(schema: Any) -> Any:
    if isinstance(schema, (list, tuple)) and type(schema) in (list, tuple):
        items = [_canonical_schema(item) for item in schema]
        return schema if all(a is b for a, b in zip(items, schema)) else items
    if type(schema) is not dict:
        return schema
    canonical = {
        key: _sorted_required(value) if key == "required" else _canonical_schema(value) for key, value in schema.items()
    }
    return schema if _same(canonical, schema) else canonical


def _sorted_required(value: Any) -> Any:
    """A schema's `required` names sorted (the same list where they already are)."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value) or value == sorted(value):
        return value
    return sorted(value)


def _same(rebuilt: dict[str, Any], original: dict[str, Any]) -> bool:
    """Whether `rebuilt` has `original`'s keys in its order, each value the same object."""
    return list(rebuilt) == list(original) and all(rebuilt[key] is original[key] for key in rebuilt)


def canonicalize(call: Call, policy: Policy, adapter: Adapter, families: FamilyMemory | None = None) -> None:
    """Rewrite `call` into canonical order in place, recording each change in `call.decided.changes`.

    `families` is the wrapped client's memory of which volatile-looking bytes change between calls
    (`sdk.prompt.families`); without one, every call is its prompt family's first.
    """
    if policy.canonicalize and call.tools:
        _sort_tools(call, adapter.breakpoint_key)
    if policy.volatile != "off":
        move_volatile(call, policy, adapter, families)


def _sort_tools(call: Call, mark: str) -> None:
    """Sort the tools by name, envelopes in one key order; a breakpoint the caller put on the last
    tool marks the end of the tools, so it moves to the tool that is last after sorting (between
    plain dicts: a typed tool is never rebuilt)."""
    canonical = [canonical_tool(tool) for tool in call.tools]
    order = sorted(range(len(canonical)), key=lambda index: tool_name(canonical[index]))
    tools = [canonical[index] for index in order]
    if order != sorted(order):
        call.decided.changes.append("tools_sorted")
    elif any(new is not old for new, old in zip(canonical, call.tools)):
        call.decided.changes.append("tools_serialised")
    was_last = order.index(len(tools) - 1)
    end, new_end = tools[was_last], tools[-1]
    if end is not new_end and type(end) is dict and end.get(mark) is not None:
        if type(new_end) is dict and mark not in new_end:
            tools[-1] = canonical_tool({**new_end, mark: end[mark]})
            tools[was_last] = {key: value for key, value in end.items() if key != mark}
            call.decided.changes.append("tools_breakpoint_moved")
    call.tools = tools
