"""Provider prompt-cache hints: Anthropic `cache_control` breakpoints, OpenAI cache keys and breakpoints.

Anthropic caches only at breakpoints (at most 4 per request, the caller's included) and only when
the prefix up to one reaches the model series' minimum length. OpenAI caches the longest seen
prefix automatically; `prompt_cache_key` routes calls with the same stable prefix to the same
cache, and models from gpt-5.6 on also take explicit `prompt_cache_breakpoint` marks on text parts.
Other OpenAI-compatible servers (vLLM, SGLang, llama.cpp, the local backend) ignore the key and
cache by prefix: for them only the order matters.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from sdk import compat
from sdk.adapters import Adapter
from sdk.adapters._base import TEXT_PART_TYPES
from sdk.cache.fingerprint import prefix_key
from sdk.call import Api, Call
from sdk.policy import Policy
from sdk.prompt.moving import first_user_turn, is_note
from sdk.providers import anthropic, facts_for, openai
from sdk.tokens import estimate_tokens

CACHE_KEY_PREFIX = "kvwise-"
_SCHEMA_KEYS = frozenset({"input_schema", "parameters", "schema"})  # JSON schemas: a property may be named like a mark
_THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})
_TOOL_OUTPUT_TYPES = ("tool_result", "function_call_output")
_POSITIONS = ("tools", "system", "history", "last_turn")


def count_breakpoints(value: Any, key: str) -> int:
    """How many `key` marks (`cache_control`, `prompt_cache_breakpoint`) `value` carries, wherever they
    are (a request body's top-level `cache_control` included); a JSON schema's properties are not marks."""
    if isinstance(value, dict):
        nested = (count_breakpoints(v, key) for k, v in value.items() if k not in _SCHEMA_KEYS)
        return (value.get(key) is not None) + sum(nested)
    if isinstance(value, (list, tuple)):
        return sum(count_breakpoints(v, key) for v in value)
    return 0


def caller_breakpoints(call: Call, key: str) -> int:
    """The breakpoints the caller placed: in tools, system and messages, and the top-level one (in
    the named parameters or `extra_body`), which marks the last block and takes a slot of its own."""
    return count_breakpoints([call.tools, call.system, call.messages], key) + count_breakpoints(call.params, key)


def place_cache_hints(call: Call, policy: Policy, adapter: Adapter) -> None:
    """Add the provider's cache hints to `call` in place, recording each in `call.decided.changes`."""
    if call.api in (Api.CHAT, Api.RESPONSES):
        if not facts_for(call.provider).cache_keys:
            return  # vLLM, SGLang, llama.cpp, the local backend: prefix caching needs only the order
        if "prompt_cache_key" not in call.params:
            _set_parameter(call, "prompt_cache_key", CACHE_KEY_PREFIX + (call.decided.prefix_key or prefix_key(call)))
        if policy.cache_ttl == anthropic.LONG_TTL and openai.RETENTION_PARAM not in call.params:
            _set_parameter(call, openai.RETENTION_PARAM, openai.EXTENDED_RETENTION)  # in-memory lasts minutes
        if openai.supports_breakpoints(call.model):
            _place_breakpoints(call, adapter, {"mode": "explicit"}, min_tokens=0)
        return
    marker: dict[str, Any] = {"type": "ephemeral"}
    if policy.cache_ttl is not None:
        marker["ttl"] = policy.cache_ttl
    _place_breakpoints(call, adapter, marker, min_tokens=anthropic.min_cacheable_tokens(call.model))


def _set_parameter(call: Call, name: str, value: Any) -> None:
    """Send `value` as the request's `name`, a parameter of the provider's own API: named where the
    client's method takes it; else in `extra_body`, which the client merges into the body (a release
    that predates the parameter), unless the caller's `extra_body` sets it; else left out, the span's
    changes saying which and why."""
    takes = call.takes
    if takes is None or name in takes:
        call.params[name] = value
        call.decided.changes.append(name)
    elif compat.EXTRA_BODY not in takes:
        call.decided.changes.append(f"{name}:left_out:the client's method takes neither it nor extra_body")
    elif compat.add_to_extra_body(call.params, name, value):
        call.decided.changes.append(f"{name}:extra_body")


def _place_breakpoints(call: Call, adapter: Adapter, marker: dict[str, Any], min_tokens: int) -> None:
    """Mark the ends of the tools, the system prompt, the last history turn and, in an Anthropic
    conversation that will grow (tools offered, a tool loop under way, the caller's own top-level
    mark), the last turn the caller wrote, within the limit.

    The next call of the loop re-sends the last turn as this call sent it but for a tail note
    (`sdk.prompt.moving`: values that change within the conversation), so the mark goes on the block
    before that note, and reads what this call wrote up
    to its mark (Anthropic looks back up to 20 blocks from each breakpoint). Longer prefixes are marked
    first (they save the most); a position the caller marked (the last turn: its last block, since
    a caller's mark at the end of its text no longer ends a first turn the note follows), whose
    prefix is shorter than `min_tokens`, or where the mark's TTL would break the order the API
    requires (a 1h mark before every 5m one) against the caller's own marks, is skipped.
    """
    key = adapter.breakpoint_key
    free = anthropic.MAX_BREAKPOINTS - caller_breakpoints(call, key)
    api_markable = _anthropic_markable if call.api is Api.MESSAGES else _openai_markable

    history_end = call.history_end
    last = _last_turn(call)
    history = call.messages[:history_end]
    last_span = call.messages[history_end : last + 1] if last is not None and last >= history_end else []
    tiers = (call.tools, call.system, history, last_span, [*call.messages[history_end + len(last_span) :], call.params])
    prefix_tokens = list(itertools.accumulate(estimate_tokens(tier) for tier in tiers[:4]))
    ttls = [_ttls(tier, key) for tier in tiers]
    ttl = marker.get("ttl", anthropic.DEFAULT_TTL)
    for position in (3, 2, 1, 0):
        if free <= 0 or prefix_tokens[position] < max(min_tokens, 1):
            continue
        before = {t for tier in ttls[: position + 1] for t in tier}
        after = {t for tier in ttls[position + 1 :] for t in tier}
        if (ttl != anthropic.LONG_TTL and anthropic.LONG_TTL in after) or (
            ttl == anthropic.LONG_TTL and before - {anthropic.LONG_TTL}
        ):
            continue
        if position == 0 and call.tools and call.api is Api.MESSAGES:
            marked = _mark_last(call.tools, marker, key)
        elif position == 1 and call.system:
            marked = _mark_content(call.system, len(call.system) - 1, marker, key, adapter.text_part_type, api_markable)
        elif position == 2 and history:
            marked = _mark_content(call.messages, len(history) - 1, marker, key, adapter.text_part_type, api_markable)
        elif position == 3 and last_span and last is not None:
            marked = _mark_content(
                call.messages,
                last,
                marker,
                key,
                adapter.text_part_type,
                api_markable,
                at_end=True,
                before_tail=bool(call.context_note),
            )
        else:
            continue
        if marked is not None:
            free -= 1
            call.decided.changes.append(f"cache_breakpoint:{_POSITIONS[position]}")
            if position == 3 and free > 0 and _mark_before_note(call, adapter, marker, api_markable):
                free -= 1
                call.decided.changes.append("cache_breakpoint:before_note")


def _mark_before_note(call: Call, adapter: Adapter, marker: dict[str, Any], markable: Callable[[Any], bool]) -> bool:
    """A conversation's first call, its first user turn the last and ending in the conversation's note
    (`sdk.prompt.moving`: values moved on first sight): mark the caller's text before the note too, so the
    next conversation, whose note says another id, reads everything up to it."""
    index = first_user_turn(call)
    if call.context_note or index is None or index != len(call.messages) - 1:
        return False
    content = call.messages[index].get("content")
    if not (isinstance(content, list) and len(content) > 1 and is_note(content[-1])):
        return False
    key = adapter.breakpoint_key
    return (
        _mark_content(
            call.messages, index, marker, key, adapter.text_part_type, markable, at_end=True, before_tail=True
        )
        is not None
    )


def _last_turn(call: Call) -> int | None:
    """The index of the last turn the caller wrote (not an assistant prefill) in an
    Anthropic conversation that will grow, else None: a one-off question's last turn is never read
    again, and OpenAI caches the prompt's longest prefix without a mark there."""
    if call.api is not Api.MESSAGES:
        return None
    grows = bool(call.tools) or call.params.get("cache_control") is not None or any(map(_is_tool_output, call.messages))
    if not grows:
        return None
    for index in range(len(call.messages) - 1, -1, -1):
        turn = call.messages[index]
        if not (isinstance(turn, dict) and turn.get("role") == "assistant"):
            return index
    return None


def _is_tool_output(turn: Any) -> bool:
    """A Chat tool message, a Responses tool-output item or an Anthropic turn with tool results."""
    if not isinstance(turn, dict):
        return str(getattr(turn, "type", "")).endswith("_output")
    if turn.get("role") == "tool" or str(turn.get("type", "")).endswith("_output"):
        return True
    content = turn.get("content")
    return isinstance(content, list) and any(
        isinstance(part, dict) and part.get("type") in _TOOL_OUTPUT_TYPES for part in content
    )


def _ttls(value: Any, key: str) -> list[str]:
    """The TTLs of the `key` marks in `value`, in request order (a mark without one is 5m)."""
    if isinstance(value, dict):
        mark = value.get(key)
        own = (
            [str(mark.get("ttl", anthropic.DEFAULT_TTL)) if isinstance(mark, dict) else anthropic.DEFAULT_TTL]
            if mark is not None
            else []
        )
        return [t for k, v in value.items() if k not in _SCHEMA_KEYS for t in _ttls(v, key)] + own
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _ttls(item, key)]
    return []


def _mark_last(items: list[Any], marker: dict[str, Any], key: str, index: int = -1) -> int | None:
    """Put `marker` on `items[index]` (the last item by default), unless it has one; return its index."""
    item = items[index]
    if not isinstance(item, dict) or key in item:
        return None
    items[index] = {**item, key: dict(marker)}
    return index % len(items)


def _mark_content(
    turns: list[Any],
    index: int,
    marker: dict[str, Any],
    key: str,
    part_type: str,
    markable: Callable[[Any], bool],
    at_end: bool = False,
    before_tail: bool = False,
) -> int | None:
    """Put `marker` on the last `markable` content part of `turns[index]` (a system block or a message),
    unless the caller marked one of its parts; with `at_end`, unless the caller marked that last part
    (the last turn's end, past the context note that follows a mark at the end of the caller's text);
    with `before_tail`, on the part before the tail note that ends the turn (`sdk.prompt.moving`), which the
    next call will not have there."""
    turn = turns[index]
    if not isinstance(turn, dict) or turn.get("role") == "instructions":  # Responses' instructions: a plain string
        return None
    if "content" not in turn:  # an Anthropic system text block is its own part (a Responses call item is not one)
        if key in turn or "role" in turn or not markable(turn):
            return None
        turns[index] = {**turn, key: dict(marker)}
        return index
    content = turn["content"]
    if isinstance(content, str):
        parts: list[Any] = [{"type": part_type, "text": content}]
    elif isinstance(content, list) and content:
        parts = list(content)
    else:
        return None
    last = next((i for i in range(len(parts) - 1 - before_tail, -1, -1) if markable(parts[i])), None)
    if last is None or (not at_end and count_breakpoints(parts, key)) or _mark_last(parts, marker, key, last) is None:
        return None
    turns[index] = {**turn, "content": parts}
    return index


def _anthropic_markable(part: Any) -> bool:
    """Any block but thinking ones, which go back exactly as the API sent them."""
    return isinstance(part, dict) and part.get("type") not in _THINKING_TYPES


def _openai_markable(part: Any) -> bool:
    """OpenAI takes explicit marks on text parts only (not images, audio, files, reasoning or call items)."""
    return isinstance(part, dict) and part.get("type") in TEXT_PART_TYPES
