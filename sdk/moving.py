"""Moving the bytes that change between calls out of the system prompt, into a context note.

Under `volatile="move"`, candidates (`sdk.volatile`) in the system prompt that change between calls
of a prompt family (`sdk.families`: all of them on the family's first call) are cut and appended,
labelled, to a context note (`<request_context>...</request_context>`) so the model still sees
them; bytes that stay the same stay where the caller put them. The note opens the final user turn;
in a tool loop (the prompt ends with tool results after it) it is a user turn of its own at the
end, so the loop's turns, which the next call repeats, stay cacheable. Tool definitions are never
rewritten: their candidates that change are reported (`volatile_found:<kind>` on the span and a
warning), as are the system prompt's under `volatile="warn"`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from sdk.adapters import Adapter, map_text
from sdk.call import Call
from sdk.clock_readings import is_clock_reading
from sdk.families import FamilyMemory, family_key
from sdk.policy import Policy
from sdk.volatile import VolatileMatch, cut_volatile, find_volatile, mask_volatile, render_note_line

log = logging.getLogger("sdk")

NOTE_OPEN = "<request_context>"
NOTE_CLOSE = "</request_context>"
_AFTER_TOOL_RESULTS = ("tool_result", "function_call_output")
_TOOL_ROLES = ("tool", "function")


def move_volatile(call: Call, policy: Policy, adapter: Adapter, families: FamilyMemory | None) -> None:
    """Move (or report) what changes between calls in `call`'s stable tiers, in place (see the module).

    `families` is the wrapped client's memory; without one every call is a family's first.
    """
    system_texts, tool_texts = text_leaves(call.system), _descriptions(call.tools, [])
    found = [find_volatile(text) for text in (*system_texts, *tool_texts)]
    candidates = [match for matches in found for match in matches]
    if not candidates:
        return
    changing = None
    if families is not None:
        key = family_key([mask_volatile(text) for text in (*system_texts, *tool_texts)])
        changing = families.changing(key, tuple(hash(match.text) for match in candidates))
        if changing is not None:  # the current time is the same on two calls within its resolution
            now = time.time()
            changing = tuple(seen or is_clock_reading(match, now) for seen, match in zip(changing, candidates))
    in_system = sum(len(matches) for matches in found[: len(system_texts)])
    moves = changing[:in_system] if changing is not None else (True,) * in_system
    if changing is not None:
        _report(call, [m for m, c in zip(candidates[in_system:], changing[in_system:]) if c], "tool definitions")
    if policy.volatile == "warn" or call.history_end >= len(call.messages):
        _report(call, [m for m, move in zip(candidates, moves) if move], "system prompt")
        return
    removed = _cut_system(call, found[: len(system_texts)], moves) if any(moves) else []
    if removed:
        call.changes.extend(f"volatile_moved:{match.kind}" for match in removed)
        _add_note(call, [render_note_line(match) for match in removed], adapter.text_part_type)


def text_leaves(items: list[Any], walk: Callable[[Any, Callable[[str], str]], Any] = map_text) -> list[str]:
    """The text leaves of `items`, in the order `walk` (`map_text`, `map_descriptions`) visits them."""
    texts: list[str] = []

    def collect(text: str) -> str:
        texts.append(text)
        return text

    for item in items:
        walk(item, collect)
    return texts


def _descriptions(value: Any, out: list[str]) -> list[str]:
    """Every `description` string of tool definitions (schema ones included), in a fixed order."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "description" and isinstance(item, str):
                out.append(item)
            else:
                _descriptions(item, out)
    elif isinstance(value, list):
        for item in value:
            _descriptions(item, out)
    return out


def _cut_system(call: Call, found: list[list[VolatileMatch]], moves: tuple[bool, ...]) -> list[VolatileMatch]:
    """Cut the moving candidates out of the system prompt; return them (each text visited in order)."""
    keeps: list[set[int]] = []
    position = 0
    for matches in found:
        keeps.append({index for index in range(len(matches)) if not moves[position + index]})
        position += len(matches)
    removed: list[VolatileMatch] = []
    keep: Iterator[set[int]] = iter(keeps)

    def cut(text: str) -> str:
        rest, matches = cut_volatile(text, next(keep))
        removed.extend(matches)
        return rest

    system = [map_text(item, cut) for item in call.system]
    if removed:
        call.system = system
    return removed


def _report(call: Call, matches: list[VolatileMatch], where: str) -> None:
    """Record (and log) volatile bytes left in the stable prefix."""
    for kind in sorted({str(match.kind) for match in matches}):
        call.changes.append(f"volatile_found:{kind}")
        log.warning("kvwise: volatile %s in the %s defeats the prompt cache", kind, where)


def _add_note(call: Call, lines: list[str], part_type: str) -> None:
    """Put `lines` in the context note: at the start of the final user turn, or after a tool loop."""
    index = call.history_end
    last = call.messages[-1]
    if index < len(call.messages) - 1 and isinstance(last, dict) and _is_tool_output(last):
        call.messages.append({"role": "user", "content": _render_note([], lines)})
    else:
        call.messages[index] = _with_note(call.messages[index], lines, part_type)


def _is_tool_output(turn: dict[str, Any]) -> bool:
    """A Chat tool message or a Responses tool-output item (`function_call_output`, ...)."""
    kind = turn.get("type")
    return turn.get("role") in _TOOL_ROLES or (isinstance(kind, str) and kind.endswith("_output"))


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
