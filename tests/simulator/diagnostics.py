"""Anthropic's cache diagnostics: `diagnostics.previous_message_id` in, `diagnostics.cache_miss_reason` out.

The server remembers each answered request's prompt by its message id (model, tools, system,
messages and the prompt-affecting settings `thinking` and `tool_choice`) and compares the request
that names it, in the API's order: `model_changed`, `tools_changed`, `system_changed`,
`messages_changed` (an earlier turn differs: the turns are not the previous ones plus new ones),
`unavailable` (only a setting differs, which the API does not diagnose), or no reason (`null`:
nothing diverged). An id it never answered (or `null`, the opt-in of a first turn) gives
`previous_message_not_found` (resp. no reason). `cache_missed_input_tokens` is the previous
prompt's length in tokens (the most a matching prefix could have read).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

from .errors import SimulatedError
from .tokens import CACHE_MARKER_KEYS
from .wire import Job

PARAM = "diagnostics"
_SETTINGS = ("thinking", "tool_choice")


@dataclass(frozen=True, slots=True)
class _Seen:
    model: str
    tools: str
    system: str
    messages: tuple[str, ...]
    settings: str
    tokens: int


def check(body: dict[str, Any]) -> None:
    """Refuse a malformed `diagnostics` as the API does (an object with `previous_message_id` only)."""
    if PARAM not in body or body[PARAM] is None:
        return
    value = body[PARAM]
    if not isinstance(value, dict):
        raise SimulatedError(400, "diagnostics: Input should be a valid dictionary", param=PARAM)
    extra = sorted(set(value) - {"previous_message_id"})
    if extra:
        raise SimulatedError(400, f"diagnostics.{extra[0]}: Extra inputs are not permitted", param=PARAM)
    previous = value.get("previous_message_id")
    if previous is not None and not isinstance(previous, str):
        raise SimulatedError(400, "diagnostics.previous_message_id: Input should be a valid string", param=PARAM)


def _dump(value: Any) -> str:
    """`value` as JSON without cache markers: a breakpoint moved to the newest turn (the documented
    way to cache a growing conversation) changes no content."""
    return json.dumps(_unmarked(value), sort_keys=True, separators=(",", ":"), default=str)


def _unmarked(value: Any) -> Any:
    """Without cache markers, and a content of one text block as the string it stands for (marking a
    string turn makes it one block)."""
    if isinstance(value, dict):
        out = {key: _unmarked(item) for key, item in value.items() if key not in CACHE_MARKER_KEYS}
        content = out.get("content")
        if (
            isinstance(content, list)
            and len(content) == 1
            and isinstance(content[0], dict)
            and content[0].keys() == {"type", "text"}
            and content[0]["type"] == "text"
        ):
            out["content"] = content[0]["text"]
        return out
    if isinstance(value, list):
        return [_unmarked(item) for item in value]
    return value


class Diagnoser:
    """What the server remembers of the prompts it answered, by message id (thread-safe)."""

    def __init__(self) -> None:
        self._seen: dict[str, _Seen] = {}
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()

    def answer(self, job: Job, message_id: str) -> dict[str, Any] | None:
        """Remember `job` as `message_id`; return the answer's `diagnostics` (None: not asked, or no divergence)."""
        body = job.body
        seen = _Seen(
            model=job.model,
            tools=_dump(body.get("tools")),
            system=_dump(body.get("system")),
            messages=tuple(_dump(message) for message in body.get("messages") or ()),
            settings=_dump([body.get(name) for name in _SETTINGS]),
            tokens=len(job.prompt),
        )
        with self._lock:
            self._seen[message_id] = seen
            asked = body.get(PARAM)
            if not isinstance(asked, dict) or asked.get("previous_message_id") is None:
                return None
            previous = self._seen.get(asked["previous_message_id"])
        if previous is None:
            return {"cache_miss_reason": {"type": "previous_message_not_found"}}
        reason = _reason(previous, seen)
        if reason is None:
            return None
        if reason == "unavailable":
            return {"cache_miss_reason": {"type": reason}}
        return {"cache_miss_reason": {"type": reason, "cache_missed_input_tokens": previous.tokens}}


def _reason(previous: _Seen, current: _Seen) -> str | None:
    if previous.model != current.model:
        return "model_changed"
    if previous.tools != current.tools:
        return "tools_changed"
    if previous.system != current.system:
        return "system_changed"
    # the previous request's turns must come back unchanged, with only new turns after them
    if current.messages[: len(previous.messages)] != previous.messages:
        return "messages_changed"
    if previous.settings != current.settings:
        return "unavailable"
    return None
