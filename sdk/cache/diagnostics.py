"""Anthropic's server-side cache diagnostics: ask why the cache missed, and compare with kvwise's guess.

A Messages request may carry `diagnostics={"previous_message_id": <the id of an earlier answer>}`;
the answer then says, in `diagnostics.cache_miss_reason.type`, why the prompt cache could not reuse
that request's prefix (`model_changed`, `system_changed`, `tools_changed`, `messages_changed`,
`previous_message_not_found`, `unavailable`; none when nothing diverged). `request_diagnostics`
asks on every eligible call, naming the answer of the call `PrefixTracker` compared this one with
(so the server's reason and kvwise's own `break_cause` are about the same pair of calls), learnt
from the answers' ids as each call ends (`ResponseIds`, told by `sdk.lifecycle`). No extra request.

Eligible: the policy's `cache_diagnostics` is on, the client is Anthropic's own (not Bedrock,
Vertex or Foundry, whose APIs do not take the field), its `messages.create` accepts
`diagnostics`, it sends to api.anthropic.com (or `sdk.wrap(..., provider="anthropic")` says the
server is Anthropic's API), and the caller set no `diagnostics` of their own.
"""

from __future__ import annotations

import inspect
from typing import Any
from urllib.parse import urlsplit

from sdk.call import Api, Call
from sdk.lifecycle import CallEnd
from sdk.memory.records import Seen
from sdk.providers import anthropic

DIAGNOSTICS_PARAM = "diagnostics"
_PLATFORM_CLIENTS = ("Bedrock", "Vertex", "Foundry")

SERVER_PREFIX_REASONS = frozenset({"model_changed", "system_changed", "tools_changed", "messages_changed"})
"""The server's reasons that name a part of the prompt (the others say it could not compare)."""
_BY_CAUSE = {
    "model_changed": "model_changed",
    "system_changed": "system_changed",
    "tool_reorder": "tools_changed",
    "tool_schema_changed": "tools_changed",
    "tools_changed": "tools_changed",
    "history_rewritten": "messages_changed",
    "tool_choice_changed": "unavailable",
    "thinking_changed": "unavailable",
}
_BY_TIER = {"tools": "tools_changed", "system": "system_changed", "messages": "messages_changed"}


def eligible(client: Any, explicit_provider: str | None) -> bool:
    """Whether `client` may carry `diagnostics` without doing worse than the bare client (see above)."""
    kind = type(client)
    if not kind.__module__.startswith("anthropic") or any(name in kind.__name__ for name in _PLATFORM_CLIENTS):
        return False
    try:
        # the class, not `client.messages`: reading that would leave a resource on the live client
        from anthropic.resources.messages import Messages

        accepts = DIAGNOSTICS_PARAM in inspect.signature(Messages.create).parameters
        host = urlsplit(str(client.base_url)).hostname
    except (AttributeError, TypeError, ValueError):
        return False
    return accepts and (host == anthropic.HOST or explicit_provider == anthropic.FACTS.provider)


def request_diagnostics(call: Call, seen: Seen, previous: Seen | None) -> ResponseIds | None:
    """Name the answer of `previous` (the call the tracker compared `call` with) in `diagnostics`
    (None on the first call of an API and model, which opts in without a comparison); return the
    listener that learns this call's answer id, `seen`'s, for the next one."""
    if call.api is not Api.MESSAGES or DIAGNOSTICS_PARAM in call.params:
        return None
    call.params[DIAGNOSTICS_PARAM] = {"previous_message_id": previous.message_id if previous is not None else None}
    return ResponseIds(seen)


class ResponseIds:
    """Learns the id of a call's answer, which the next request of its API and model names as its
    previous message (a `CallListener`)."""

    __slots__ = ("_seen",)

    def __init__(self, seen: Seen) -> None:
        self._seen = seen

    def first_chunk(self) -> None:
        pass

    def ended(self, end: CallEnd) -> None:
        if end.response_id:
            self._seen.learn(end.response_id)


def expected_reason(cause: str | None, break_at: str | None) -> str | None:
    """The server reason kvwise's own cause (and where it broke) corresponds to, if any."""
    if cause is None:
        return None
    if cause in _BY_CAUSE:
        return _BY_CAUSE[cause]
    tier = break_at.split("[", 1)[0] if break_at else None
    return _BY_TIER.get(tier or "")


def disagree(server_reason: str, cause: str | None, break_at: str | None) -> bool:
    """Whether the server's reason contradicts kvwise's cause (only reasons naming a prompt part count)."""
    if server_reason not in SERVER_PREFIX_REASONS:
        return False
    return expected_reason(cause, break_at) != server_reason
