"""Decode guards: cap the output, merge stop sequences, default the penalties.

Decode is the expensive phase: every output token costs several input tokens. The cap clamps a
larger request and fills a missing one (Anthropic requires it anyway). Stops the API cannot take
(beyond Chat Completions' 4; all of them on the Responses API) are enforced client-side.
"""

from __future__ import annotations

from typing import Any

from sdk.adapters import Adapter
from sdk.call import Api, Call
from sdk.policy import Policy

_FILL_PARAM = {Api.CHAT: "max_completion_tokens", Api.RESPONSES: "max_output_tokens", Api.MESSAGES: "max_tokens"}


def apply_guards(call: Call, policy: Policy, adapter: Adapter) -> None:
    """Cap output tokens, merge stops and default penalties on `call` in place."""
    _cap(call, policy, adapter)
    _merge_stops(call, policy, adapter)
    if adapter.has_penalties:
        for name in ("frequency_penalty", "presence_penalty"):
            value = getattr(policy, name)
            if value is not None and name not in call.params:
                call.params[name] = value
                call.changes.append(name)


def _cap(call: Call, policy: Policy, adapter: Adapter) -> None:
    cap = policy.max_output_tokens
    given = [name for name in adapter.max_tokens_params if name in call.params]
    if not given:
        call.params[_FILL_PARAM[call.api]] = cap
        call.changes.append(f"max_tokens_filled:{cap}")
        return
    for name in given:
        value = call.params[name]
        if value is None:  # the caller's explicit None is theirs to send
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{call.api}.create: {name} must be an int, got {value!r}")
        if value < 1:
            raise ValueError(f"{call.api}.create: {name} must be >= 1, got {value}")
        if value > cap:
            call.params[name] = cap
            call.changes.append(f"max_tokens_clamped:{value}->{cap}")


def _merge_stops(call: Call, policy: Policy, adapter: Adapter) -> None:
    if not policy.stop:
        return
    if adapter.stop_param is None:
        call.client_stops = policy.stop
        call.changes.append("stop_client_side")
        return
    caller = _as_stop_list(call.params.get(adapter.stop_param), call.api, adapter.stop_param)
    extra = [stop for stop in policy.stop if stop not in caller]
    if not extra:
        return
    limit = adapter.stop_limit
    room = max(0, limit - len(caller)) if limit is not None else len(extra)
    if room:
        call.params[adapter.stop_param] = [*caller, *extra[:room]]
        call.changes.append("stop_merged")
    if extra[room:]:
        call.client_stops = tuple(extra[room:])
        call.changes.append("stop_client_side")


def _as_stop_list(value: Any, api: Api, name: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
        return list(value)
    raise TypeError(f"{api}.create: {name} must be a string or a list of strings, got {value!r}")
