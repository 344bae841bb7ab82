"""What an answer says beyond usage and text, read off any API's response object (pure functions).

Parsing a provider's response belongs to the adapters, beside their usage and stream readers; the
sender and the stream watcher put these facts into the end of call, and telemetry only maps them.
"""

from __future__ import annotations

import functools
from typing import Any, TypedDict

from pydantic import BaseModel

from sdk._constants import RESPONSE_CLASS_NAMES_CACHE_SIZE

_ABSENT = object()
"""A `__dict__` miss, told apart from a field that holds None."""


class ResponseFacts(TypedDict, total=False):
    """`CallEnd` fields read off an answer by `response_facts`."""

    service_tier: str
    system_fingerprint: str
    cache_miss_reason: str


def response_facts(response: Any) -> ResponseFacts:
    """What an answer says beyond usage and text, as `CallEnd` fields: OpenAI's service tier
    and system fingerprint, Anthropic's cache-miss diagnosis (`diagnostics.cache_miss_reason.type`)."""
    facts: ResponseFacts = {}
    tier = _field(response, "service_tier")
    if isinstance(tier, str) and not _has(response, "stop_reason"):  # Anthropic's tier is in usage
        facts["service_tier"] = tier
    fingerprint = _field(response, "system_fingerprint")
    if isinstance(fingerprint, str):
        facts["system_fingerprint"] = fingerprint
    reason = _field(_field(_field(response, "diagnostics"), "cache_miss_reason"), "type")
    if isinstance(reason, str):
        facts["cache_miss_reason"] = reason
    return facts


def stream_facts(last_event: Any, start_message: Any) -> ResponseFacts:
    """`response_facts` of a stream, read once at its end: OpenAI's from the last chunk (Chat repeats
    them on every chunk) or the final event's response (Responses), Anthropic's from `message_start`."""
    facts = response_facts(last_event)
    final = _field(last_event, "response")
    if final is not None:
        facts.update(response_facts(final))
    if start_message is not None:
        facts.update(response_facts(start_message))
    return facts


def _field(value: Any, name: str) -> Any:
    """`getattr(value, name, None)`, without the cost of a pydantic model's missing attribute: its
    `__getattr__` raises, which costs more than the rest of `response_facts` (docs/benchmarks.md, `by_hand`).
    A model's field is read off its `__dict__` first: nearly every read ends there."""
    if not isinstance(value, BaseModel):
        return getattr(value, name, None)
    found = value.__dict__.get(name, _ABSENT)
    if found is not _ABSENT:
        return found
    extra = value.model_extra
    if extra and name in extra:
        return extra[name]
    return getattr(value, name, None) if _declares(type(value), name) else None


def _has(value: Any, name: str) -> bool:
    """`hasattr(value, name)`; of a pydantic model, read off its fields, extra fields and class."""
    if not isinstance(value, BaseModel):
        return hasattr(value, name)
    extra = value.model_extra
    return name in value.__dict__ or bool(extra and name in extra) or _declares(type(value), name)


@functools.lru_cache(maxsize=RESPONSE_CLASS_NAMES_CACHE_SIZE)
def _declares(model: type, name: str) -> bool:
    """Whether a model class (or a base) defines `name` itself (a property, a method): looked up once per
    class and name."""
    return any(name in vars(klass) for klass in model.__mro__)
