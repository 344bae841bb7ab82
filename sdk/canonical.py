"""Canonical order: stable bytes first, volatile bytes last, the same content always the same bytes.

Tiers, front to back: tools -> system -> pinned documents -> history -> per-request dynamic content
-> the final user turn. Tools are sorted by name and their envelopes serialised in one key order;
a schema's own key order is kept. Volatile bytes found in tools or the system prompt are (under
`volatile="move"`) cut and appended, labelled, to a context note at the start of the final user
turn, so the model still sees them. Turns are never reordered; nothing is dropped; a second pass
changes nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from sdk.adapters import Adapter, map_descriptions, map_text
from sdk.call import Call
from sdk.policy import Policy
from sdk.volatile import VolatileMatch, cut_volatile, find_volatile, render_note_line

log = logging.getLogger("sdk")

NOTE_OPEN = "<request_context>"
NOTE_CLOSE = "</request_context>"
_ENVELOPE_ORDER = ("type", "name", "description", "strict", "function", "parameters", "input_schema")
_AFTER_TOOL_RESULTS = ("tool_result", "function_call_output")


def tool_name(tool: Any) -> str:
    """The name of a native tool definition of any of the three APIs ("" for built-in tools)."""
    if not isinstance(tool, dict):
        return ""
    function = tool.get("function")
    name = function.get("name") if isinstance(function, dict) else tool.get("name")
    return name if isinstance(name, str) else ""


def canonical_tool(tool: Any) -> Any:
    """A tool with its envelope keys in one fixed order and `required` lists sorted.

    The schema's own property order is kept: order can matter to structured output.
    """
    if not isinstance(tool, dict):
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
    return ordered


def _canonical_schema(schema: Any) -> Any:
    if isinstance(schema, (list, tuple)):
        return [_canonical_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return {
        key: sorted(value) if key == "required" and all(isinstance(v, str) for v in value) else _canonical_schema(value)
        for key, value in schema.items()
    }


def canonicalize(call: Call, policy: Policy, adapter: Adapter) -> None:
    """Rewrite `call` into canonical order in place, recording each change in `call.changes`."""
    if policy.canonicalize and call.tools:
        tools = sorted((canonical_tool(tool) for tool in call.tools), key=tool_name)
        if [tool_name(t) for t in tools] != [tool_name(t) for t in call.tools]:
            call.changes.append("tools_sorted")
        elif [list(t) for t in tools if isinstance(t, dict)] != [list(t) for t in call.tools if isinstance(t, dict)]:
            call.changes.append("tools_serialised")
        call.tools = tools
    if policy.volatile == "off":
        return
    found: list[VolatileMatch] = []

    def cut(text: str) -> str:
        rest, matches = cut_volatile(text)
        found.extend(matches)
        return rest

    if policy.volatile == "warn" or call.history_end >= len(call.messages):
        _warn_volatile(call)
        return
    tools = [map_descriptions(tool, cut) for tool in call.tools]
    system = [map_text(item, cut) for item in call.system]
    if not found:
        return
    call.tools, call.system = tools, system
    call.changes.extend(f"volatile_moved:{match.kind}" for match in found)
    lines = [render_note_line(match) for match in found]
    index = call.history_end
    call.messages[index] = _with_note(call.messages[index], lines, adapter.text_part_type)


def _warn_volatile(call: Call) -> None:
    """Record (and log) volatile bytes in the stable prefix without moving them."""
    texts: list[str] = []

    def collect(text: str) -> str:
        texts.append(text)
        return text

    for tool in call.tools:
        map_descriptions(tool, collect)
    for item in call.system:
        map_text(item, collect)
    kinds = sorted({str(match.kind) for text in texts for match in find_volatile(text)})
    for kind in kinds:
        call.changes.append(f"volatile_found:{kind}")
        log.warning("kvwise: volatile %s in the stable prompt prefix defeats the prompt cache", kind)


def _with_note(turn: Any, lines: list[str], part_type: str) -> Any:
    """The final user turn with `lines` merged into its context note (made if missing)."""
    if not isinstance(turn, dict):
        return turn
    content = turn.get("content")
    if isinstance(content, str):
        existing, body = _split_note(content)
        return {**turn, "content": f"{_render_note(existing, lines)}\n\n{body}"}
    if isinstance(content, list):
        parts = list(content)
        for position, part in enumerate(parts):
            text = part.get("text") if isinstance(part, dict) else None
            if isinstance(text, str) and text.startswith(NOTE_OPEN):
                existing, _ = _split_note(text)
                parts[position] = {**part, "text": _render_note(existing, lines)}
                return {**turn, "content": parts}
        position = 0
        while position < len(parts) and isinstance(parts[position], dict) and parts[position].get("type") in _AFTER_TOOL_RESULTS:
            position += 1
        parts.insert(position, {"type": part_type, "text": _render_note([], lines)})
        return {**turn, "content": parts}
    return turn


def _split_note(text: str) -> tuple[list[str], str]:
    """Split a leading context note off `text`: (its lines, the rest)."""
    if not text.startswith(NOTE_OPEN) or NOTE_CLOSE not in text:
        return [], text
    note, _, rest = text.partition(NOTE_CLOSE)
    lines = [line for line in note[len(NOTE_OPEN):].splitlines() if line]
    return lines, rest.removeprefix("\n\n")


def _render_note(existing: list[str], lines: list[str]) -> str:
    merged = existing + [line for line in lines if line not in existing]
    return "\n".join([NOTE_OPEN, *merged, NOTE_CLOSE])
