"""The prefix fingerprint: a hash chain over the prompt's stable segments, and where it broke.

Each stable segment (every tool, system item and history turn, in the order sent) extends the
chain: h_i = sha256(h_{i-1} || key_i || bytes_i). Two calls share a cacheable prefix exactly as far
as their chains agree; the first segment that differs, and why, is the cache break.
"""

from __future__ import annotations

import hashlib
import json
import threading
from enum import StrEnum
from typing import NamedTuple

from sdk.call import Call
from sdk.canonical import tool_name
from sdk.volatile import mask_volatile

FINGERPRINT_HEX_CHARS = 16


class BreakCause(StrEnum):
    """Why the cacheable prefix changed since the previous call."""

    VOLATILE_CONTENT = "volatile_content"
    SYSTEM_CHANGED = "system_changed"
    TOOL_REORDER = "tool_reorder"
    TOOL_SCHEMA_CHANGED = "tool_schema_changed"
    TOOLS_CHANGED = "tools_changed"
    HISTORY_REWRITTEN = "history_rewritten"
    UNSTABLE_SERIALISATION = "unstable_serialisation"


class Segment(NamedTuple):
    """One stable segment: its key ("system[0]"), chained hash, and its bytes (to explain a break)."""

    key: str
    chain: str
    content: str
    tool: str | None

    def same_when_sorted(self, other: Segment) -> bool:
        """Equal as JSON with sorted keys: only the serialisation differs."""
        return _dumps_sorted(json.loads(self.content)) == _dumps_sorted(json.loads(other.content))

    def same_when_masked(self, other: Segment) -> bool:
        """Equal once volatile bytes are masked: only volatile content differs."""
        return mask_volatile(self.content) == mask_volatile(other.content)


_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode
"""Compact JSON, as the clients send it (key order kept): one encoder, not one per `json.dumps` call."""
_dumps_sorted = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True, default=str).encode


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def segments(call: Call) -> list[Segment]:
    """The hash chain over `call`'s stable segments: tools, system items, history turns."""
    chain = ""
    result: list[Segment] = []
    for tier, values in (("tools", call.tools), ("system", call.system), ("messages", call.messages[: call.history_end])):
        for index, value in enumerate(values):
            key = f"{tier}[{index}]"
            content = _dumps(value)
            chain = _digest(chain + key + content)
            result.append(Segment(key, chain, content, tool_name(value) if tier == "tools" else None))
    return result


def prefix_key(call: Call, chain: list[Segment] | None = None) -> str:
    """A short hash of the tools and system prompt: stable across the turns of one conversation."""
    stable = len(call.tools) + len(call.system)  # `segments` puts these first
    if not stable:
        return _digest(call.model)[:FINGERPRINT_HEX_CHARS]
    return (chain if chain is not None else segments(call))[stable - 1].chain[:FINGERPRINT_HEX_CHARS]


def explain_break(previous: list[Segment], current: list[Segment]) -> tuple[str, BreakCause] | None:
    """The first segment of `current` that differs from `previous`, and the likely cause.

    A call whose prefix extends or shortens the previous one (a new turn, a reset) is no break.
    """
    for old, new in zip(previous, current):
        if old.chain == new.chain:
            continue
        if old.key != new.key:
            return new.key, _cause_of_shape(old, new)
        if old.same_when_sorted(new):
            return new.key, BreakCause.UNSTABLE_SERIALISATION
        if old.same_when_masked(new):
            return new.key, BreakCause.VOLATILE_CONTENT
        if new.tool is not None:
            names_old = [s.tool for s in previous if s.tool is not None]
            names_new = [s.tool for s in current if s.tool is not None]
            if sorted(names_old) == sorted(names_new) and names_old != names_new:
                return new.key, BreakCause.TOOL_REORDER
            if old.tool == new.tool:
                return new.key, BreakCause.TOOL_SCHEMA_CHANGED
            return new.key, BreakCause.TOOLS_CHANGED
        if new.key.startswith("system"):
            return new.key, BreakCause.SYSTEM_CHANGED
        return new.key, BreakCause.HISTORY_REWRITTEN
    return None


def _cause_of_shape(old: Segment, new: Segment) -> BreakCause:
    if old.key.startswith("tools") or new.key.startswith("tools"):
        return BreakCause.TOOLS_CHANGED
    if old.key.startswith("system") or new.key.startswith("system"):
        return BreakCause.SYSTEM_CHANGED
    return BreakCause.HISTORY_REWRITTEN


class PrefixTracker:
    """Remembers the last prefix per (API, model) of one wrapped client, to name cache breaks."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], list[Segment]] = {}
        self._lock = threading.Lock()

    def observe(self, call: Call) -> None:
        """Set `call.fingerprint` and, when the prefix changed since the last call, `break_at`/`break_cause`."""
        current = segments(call)
        call.fingerprint = current[-1].chain[:FINGERPRINT_HEX_CHARS] if current else None
        call.prefix_key = prefix_key(call, current)
        with self._lock:
            previous = self._last.get((call.api, call.model))
            self._last[(call.api, call.model)] = current
        if previous:
            found = explain_break(previous, current)
            if found is not None:
                call.break_at, cause = found
                call.break_cause = str(cause)
