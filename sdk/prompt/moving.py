"""Moving the bytes that change between calls out of the system prompt, into a context note.

Under `volatile="move"`, candidates (`sdk.prompt.volatile`) in the system prompt that are volatile by
their shape (`sdk.prompt.first_sight`: on the first call that carries them) or that change between calls
of a prompt family (`sdk.prompt.families`: from the first call on which their bytes differ, and for good),
and the lines a family showed changing (whole), are cut with the caller's words around them (their
sentence, labelled line or heading: `sdk.prompt.sentences`) and appended, verbatim, to a context
note (`<request_context>...</request_context>`) so the model reads exactly what the caller wrote:
no label made up, no lead-in left behind; bytes that stay the same stay where the caller put them.
Without a family memory (`sdk.Prompt`, a direct `canonicalize`) there is no earlier call to keep
bytes identical with, and every candidate moves.

Where a moved value goes depends on whether it changes within a conversation (`sdk.prompt.families`): one
constant within it goes to the conversation note that ends its first user turn, and one that
changes from call to call of it goes to a tail note at the end of the prompt, so every turn a later
call re-sends is the same bytes on each call. The tail note ends the final user turn's content
(Anthropic: its tool results too), or is a user turn of its own after Chat tool messages and
Responses tool outputs, before any assistant prefill; where the first user turn is also the final
one, the conversation note comes first, so the next call matches up to the tail note.
The conversation note sits at the same place with the same lines on each call of its conversation,
and call k+1's prompt as sent begins with call k's whole prompt up to the tail note, as the bare
client's would. A note reads the same whether the caller sends the turn's text as a string or as
one text part (frameworks that mark the newest turn for the cache send it as a block, then as a
string once it is history):
- Chat Completions and Responses: a note follows the text of a string, or of a last text part,
  after a blank line; a turn ending in another part (an image, a file) gets a text part of its own;
- Anthropic Messages, whose cache is cut at block ends: a note is a text block of its own, a
  string turn becoming its one text block (which the API reads the same), so a breakpoint at the
  end of the caller's text (its own, or on a later call kvwise's) stays before the note, and the
  text is read by the conversations that follow, whatever their note says.
Only the tail note after tool results adds a turn (a user turn after tool outputs, which chat
templates accept as they accept a user's next message).
A note already ending that turn (one `sdk.Prompt` rendered) takes the moved lines. Tool
definitions are never rewritten: their candidates that change are reported (`volatile_found:<kind>`
on the span and a warning), as are the system prompt's under `volatile="warn"`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from sdk.adapters import Adapter, map_text
from sdk.adapters._base import TEXT_PART_TYPES
from sdk.call import Api, Call
from sdk.policy import Policy
from sdk.prompt.families import Changes, FamilyMemory, family_key, value_hash
from sdk.prompt.first_sight import moves_on_sight
from sdk.prompt.volatile import VolatileKind, VolatileMatch, cut_volatile, find_volatile, mask_volatile, note_lines

log = logging.getLogger("sdk")

NOTE_OPEN = "<request_context>"
NOTE_CLOSE = "</request_context>"
NOTE_SEPARATOR = "\n\n"  # between the caller's text and a note that ends it


def move_volatile(call: Call, policy: Policy, adapter: Adapter, families: FamilyMemory | None) -> None:
    """Move (or report) what changes between calls in `call`'s stable tiers, in place (see the module).

    `families` is the wrapped client's memory; without one every candidate moves.
    """
    system_texts, tool_texts = text_leaves(call.system), _descriptions(call.tools, [])
    found = [find_volatile(text) for text in (*system_texts, *tool_texts)]
    candidates = [match for matches in found for match in matches]
    if not candidates and (families is None or not any(map(_has_inner_lines, system_texts))):
        return  # nothing looks volatile, and no line could be learnt (the first and the last name the family)
    in_system = sum(len(matches) for matches in found[: len(system_texts)])
    first = first_user_turn(call)
    lines: list[dict[int, bool]] = [{} for _ in system_texts]  # per text: the lines that move whole, to the tail?
    if families is None:
        moves, tails = (True,) * in_system, (False,) * in_system
    else:
        conversation = family_key(text_leaves([call.messages[first]["content"]])) if first is not None else b""
        masked_system = [mask_volatile(text) for text in system_texts]
        seen = families.observe_lines(
            masked_system, [mask_volatile(text) for text in tool_texts], conversation, len(call.messages), call.model
        )
        lines, key = seen.moving, seen.key
        call.decided.family, call.decided.stable_kept = seen.family, seen.kept
        changes = (
            families.observe(
                key, tuple(value_hash(match.text) for match in candidates), conversation, len(call.messages)
            )
            if candidates
            else Changes((), ())
        )
        on_sight = [sure for text in system_texts for sure in moves_on_sight(text)]
        moves = tuple(sure or changed for sure, changed in zip(on_sight, changes.changed))
        tails = changes.within[:in_system]
        _report(
            call, [m.kind for m, c in zip(candidates[in_system:], changes.changed[in_system:]) if c], "tool definitions"
        )
    if policy.volatile == "warn" or first is None:
        moving = [m.kind for m, move in zip(candidates, moves) if move]
        _report(call, moving + [VolatileKind.LINE] * any(lines), "system prompt")
        return
    removed = _cut_system(call, found[: len(system_texts)], moves, tails, lines) if any(moves) or any(lines) else []
    if removed:
        call.decided.changes.extend(f"volatile_moved:{match.kind}" for match, _ in removed)
        conversation_lines = [line for match, tail in removed if not tail for line in note_lines(match)]
        tail_lines = [line for match, tail in removed if tail for line in note_lines(match)]
        if conversation_lines:
            add_note(call, conversation_lines, adapter.text_part_type)
        if tail_lines:
            _add_tail_note(call, tail_lines, adapter.text_part_type)


def is_note(item: Any) -> bool:
    """Whether `item` (a content part or block) is a context note and nothing else."""
    if not isinstance(item, dict):
        return False
    text = item.get("text")
    return isinstance(text, str) and text.startswith(NOTE_OPEN) and text.endswith(NOTE_CLOSE)


def add_note(call: Call, lines: list[str], part_type: str, index: int | None = None) -> None:
    """Put `lines` in the context note that ends turn `index` (by default the first user turn), merged
    into the note already there, in the form the module gives for `call`'s API."""
    index = first_user_turn(call) if index is None else index
    if index is None or index >= len(call.messages):
        raise ValueError("add_note: the prompt has no user turn to carry a context note")
    turn = call.messages[index]
    content = turn["content"]
    if call.api is Api.MESSAGES:
        call.messages[index] = {**turn, "content": _blocks_with_note(content, lines, part_type)}
    elif isinstance(content, str):
        call.messages[index] = {**turn, "content": _with_note(content, lines)}
    else:
        call.messages[index] = {**turn, "content": _parts_with_note(content, lines, part_type)}


def first_user_turn(call: Call) -> int | None:
    """The index of the first user turn whose content kvwise can extend (a string or a list of
    parts), None where there is none: the turn every later call of the conversation re-sends first."""
    for index, turn in enumerate(call.messages):
        if isinstance(turn, dict) and turn.get("role") == "user" and isinstance(turn.get("content"), (str, list)):
            return index
    return None


def text_leaves(items: list[Any], walk: Callable[[Any, Callable[[str], str]], Any] = map_text) -> list[str]:
    """The text leaves of `items`, in the order `walk` (`map_text`, `map_descriptions`) visits them."""
    texts: list[str] = []

    def collect(text: str) -> str:
        texts.append(text)
        return text

    for item in items:
        walk(item, collect)
    return texts


def _has_inner_lines(text: str) -> bool:
    """Whether `text` has a non-blank line between its first and its last: one the line memory can
    learn (`sdk.prompt.families`); a one-line system prompt costs no memory look-up."""
    return text.count("\n") >= 2 and sum(1 for line in text.split("\n") if line.strip()) > 2


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


def _cut_system(
    call: Call,
    found: list[list[VolatileMatch]],
    moves: tuple[bool, ...],
    tails: tuple[bool, ...],
    lines: list[dict[int, bool]],
) -> list[tuple[VolatileMatch, bool]]:
    """Cut the moving candidates and `lines` out of the system prompt; return each cut with whether it
    goes to the tail note (it overlaps a candidate or a line that changes within a conversation),
    each text visited in order."""
    keeps: list[set[int]] = []
    tail_spans: list[list[tuple[int, int]]] = []
    position = 0
    for matches in found:
        keeps.append({index for index in range(len(matches)) if not moves[position + index]})
        tail_spans.append([(m.start, m.end) for index, m in enumerate(matches) if tails[position + index]])
        position += len(matches)
    removed: list[tuple[VolatileMatch, bool]] = []
    texts: Iterator[tuple[set[int], list[tuple[int, int]], dict[int, bool]]] = iter(zip(keeps, tail_spans, lines))

    def cut(text: str) -> str:
        keep, spans, whole = next(texts)
        spans = spans + _line_spans(text, [index for index, tail in whole.items() if tail])
        rest, matches = cut_volatile(text, keep, whole)
        removed.extend((m, any(m.start < end and start < m.end for start, end in spans)) for m in matches)
        return rest

    system = [map_text(item, cut) for item in call.system]
    if removed:
        call.system = system
    return removed


def _line_spans(text: str, indices: list[int]) -> list[tuple[int, int]]:
    """The spans of the lines of `text` numbered in `indices`."""
    spans: list[tuple[int, int]] = []
    start = 0
    for index, line in enumerate(text.split("\n")):
        if index in indices:
            spans.append((start, start + len(line)))
        start += len(line) + 1
    return spans


def _add_tail_note(call: Call, lines: list[str], part_type: str) -> None:
    """Put `lines` in a note of their own at the end of the prompt, before an assistant prefill: the
    end of a final user turn's content (Anthropic's tool results included), else a user turn of its
    own (after Chat tool messages, Responses tool outputs). Recorded in `call.context_note`, so the
    cache hints mark the turn before it: the next call re-sends that turn without it."""
    messages = call.messages
    end = (
        len(messages) - 1
        if messages and isinstance(messages[-1], dict) and messages[-1].get("role") == "assistant"
        else len(messages)
    )
    last = messages[end - 1] if end else None
    note = _render_note([], lines)
    if isinstance(last, dict) and last.get("role") == "user" and isinstance(last.get("content"), (str, list)):
        content = last["content"]
        if call.api is Api.MESSAGES:
            blocks = [{"type": part_type, "text": content}] if isinstance(content, str) else list(content)
            messages[end - 1] = {**last, "content": [*blocks, {"type": part_type, "text": note}]}
        elif isinstance(content, str):
            messages[end - 1] = {**last, "content": f"{content}{NOTE_SEPARATOR}{note}" if content else note}
        else:
            tail = content[-1] if content else None
            if isinstance(tail, dict) and tail.get("type") in TEXT_PART_TYPES and isinstance(tail.get("text"), str):
                parts = [*content[:-1], {**tail, "text": f"{tail['text']}{NOTE_SEPARATOR}{note}"}]
            else:
                parts = [*content, {"type": part_type, "text": note}]
            messages[end - 1] = {**last, "content": parts}
    else:
        messages.insert(end, {"role": "user", "content": note})
    call.context_note = lines


def _report(call: Call, kinds: list[VolatileKind], where: str) -> None:
    """Record (and log) volatile bytes left in the stable prefix, of these kinds."""
    for kind in sorted(set(map(str, kinds))):
        call.decided.changes.append(f"volatile_found:{kind}")
        log.warning("kvwise: volatile %s in the %s defeats the prompt cache", kind, where)


def _blocks_with_note(content: str | list[Any], lines: list[str], part_type: str) -> list[Any]:
    """Anthropic: the note as a text block of its own after the caller's (a string: its one text block)."""
    if isinstance(content, str):
        body, existing = _split_note(content)
        blocks = [{"type": part_type, "text": body}] if body else []
        return [*blocks, {"type": part_type, "text": _render_note(existing, lines)}]
    if content and is_note(content[-1]):
        return [*content[:-1], {**content[-1], "text": _render_note(_note_lines(content[-1]["text"]), lines)}]
    return [*content, {"type": part_type, "text": _render_note([], lines)}]


def _parts_with_note(parts: list[Any], lines: list[str], part_type: str) -> list[Any]:
    """Chat, Responses: the note after a last text part's text, else in a text part of its own."""
    last = parts[-1] if parts else None
    if isinstance(last, dict) and last.get("type") in TEXT_PART_TYPES and isinstance(last.get("text"), str):
        return [*parts[:-1], {**last, "text": _with_note(last["text"], lines)}]
    return [*parts, {"type": part_type, "text": _render_note([], lines)}]


def _with_note(text: str, lines: list[str]) -> str:
    """`text` ending with the context note: its own note's lines, then `lines`."""
    body, existing = _split_note(text)
    note = _render_note(existing, lines)
    return f"{body}{NOTE_SEPARATOR}{note}" if body else note


def _split_note(text: str) -> tuple[str, list[str]]:
    """Split a trailing context note off a turn's text: (the caller's text, the note's lines)."""
    if not text.endswith(NOTE_CLOSE) or NOTE_OPEN not in text:
        return text, []
    body, _, note = text.rpartition(NOTE_OPEN)
    return body.removesuffix(NOTE_SEPARATOR), _note_lines(NOTE_OPEN + note)


def _note_lines(text: str) -> list[str]:
    """The lines of a note's text, without its tags."""
    return [line for line in text[len(NOTE_OPEN) : -len(NOTE_CLOSE)].splitlines() if line]


def _render_note(existing: list[str], lines: list[str]) -> str:
    merged = existing + [line for line in lines if line not in existing]
    return "\n".join([NOTE_OPEN, *merged, NOTE_CLOSE])
