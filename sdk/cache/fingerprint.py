"""The prefix fingerprint: a hash chain over the prompt's stable segments, and where it broke.

Each stable segment (every tool, system item and history turn, in the order sent) extends the
chain: h_i = sha256(h_{i-1} || key_i || bytes_i). Two calls share a cacheable prefix exactly as far
as their chains agree; the first segment that differs, and why, is the cache break.

A cache also breaks with the prefix unchanged: another model (caches are per model), another
`tool_choice` or `thinking` setting (Anthropic keys its message cache on them), or a gap since the
last call of the same API and model longer than the cache's TTL. `PrefixTracker` names those causes too, in that
order, after any segment that changed.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from time import monotonic

from sdk.call import Call
from sdk.memory.records import Seen, Segment, compact_json, sha256_hex
from sdk.memory.store import LocalStore, Store
from sdk.prompt.canonical import tool_name
from sdk.prompt.volatile import mask_volatile
from sdk.providers import facts_for

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
    MODEL_CHANGED = "model_changed"
    TOOL_CHOICE_CHANGED = "tool_choice_changed"
    THINKING_CHANGED = "thinking_changed"
    TTL_EXPIRED = "ttl_expired"


def segments(call: Call) -> list[Segment]:
    """The hash chain over `call`'s stable segments: tools, system items, history turns."""
    chain = ""
    result: list[Segment] = []
    for tier, values in (
        ("tools", call.tools),
        ("system", call.system),
        ("messages", call.messages[: call.history_end]),
    ):
        for index, value in enumerate(values):
            key = f"{tier}[{index}]"
            content = compact_json(value)
            chain = sha256_hex(chain + key + content)
            tool = tool_name(value) if tier == "tools" else None
            result.append(Segment(key, chain, content, tool, mask=mask_volatile))
    return result


def prefix_key(call: Call, chain: list[Segment] | None = None) -> str:
    """A short hash of the tools and system prompt: stable across the turns of one conversation."""
    stable = len(call.tools) + len(call.system)  # `segments` puts these first
    if not stable:
        return sha256_hex(call.model)[:FINGERPRINT_HEX_CHARS]
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


_SETTINGS = (("tool_choice", BreakCause.TOOL_CHOICE_CHANGED), ("thinking", BreakCause.THINKING_CHANGED))
"""Request parameters outside the prompt that a provider's cache is keyed on, and the cause each names."""


class PrefixTracker:
    """Remembers, on `store` (by default one in this process), the last call per (API, model) of one
    wrapped client, and per API the latest one, to name cache breaks: a changed segment, model,
    setting, or an expired cache. `clock` times the calls (None: `time.monotonic`)."""

    def __init__(self, store: Store | None = None, clock: Callable[[], float] | None = None) -> None:
        self._store = store if store is not None else LocalStore()
        self._clock = clock

    def observe(self, call: Call, ttl_seconds: float | None = None) -> tuple[Seen, Seen | None]:
        """Set `call.decided.fingerprint` and, when the cache broke since the last call of its API and model, `break_at`
        and `break_cause`; return what is remembered of `call` and the call it was compared against.

        The two are returned apart, never linked: a remembered call that kept its predecessor would
        keep every call before it alive. `ttl_seconds`: how long the provider keeps the prefix (None:
        unknown, no TTL cause).
        """
        current = segments(call)
        call.decided.fingerprint = current[-1].chain[:FINGERPRINT_HEX_CHARS] if current else None
        call.decided.prefix_key = prefix_key(call, current)
        seen = Seen(call.model, current, _settings(call.params), (self._clock or monotonic)())
        previous, latest = self._store.exchange_seen(str(call.api), seen)
        current = seen.chain
        if previous is None and latest is not None and latest.model != call.model and latest.chain:
            if explain_break(latest.chain, current) is None:
                call.decided.break_cause = str(BreakCause.MODEL_CHANGED)
                return seen, latest
        if previous:
            cause = _cause(previous, seen, ttl_seconds)
            if cause is not None:
                call.decided.break_at, call.decided.break_cause = cause[0], str(cause[1])
        return seen, previous


def _settings(params: dict[str, object]) -> tuple[str, str]:
    """The `_SETTINGS` a request carries, serialised ("" when absent: most calls set neither)."""
    choice, thinking = params.get("tool_choice"), params.get("thinking")
    return ("" if choice is None else compact_json(choice), "" if thinking is None else compact_json(thinking))


def _cause(previous: Seen, seen: Seen, ttl_seconds: float | None) -> tuple[str | None, BreakCause] | None:
    found = explain_break(previous.chain, seen.chain)
    if found is not None:
        return found
    for (_, cause), old, new in zip(_SETTINGS, previous.settings, seen.settings):
        if old != new:
            return None, cause
    if ttl_seconds is not None and seen.at - previous.at > ttl_seconds:
        return None, BreakCause.TTL_EXPIRED
    return None


def cache_ttl_seconds(call: Call, policy_ttl: str | None) -> float | None:
    """How long the provider keeps `call`'s cached prefix after its last use (None: not known).

    Anthropic: the TTL asked for (5 minutes by default, "1h"); OpenAI: 24 hours under extended
    retention (`prompt_cache_retention="24h"`, which `Policy.cache_ttl="1h"` asks for), else not known
    (in-memory retention lasts "5 to 10 minutes of inactivity, up to an hour"); other servers: not known.
    """
    return facts_for(call.provider).cache_lifetime(call.params, policy_ttl)
