"""Decode limits: cap the output, merge stop sequences, default the penalties.

Decode is the expensive phase: every output token costs several input tokens. The cap clamps a
larger request and fills a missing one (Anthropic requires it anyway), and is decided here once
(`Call.cap`). Stops the API cannot take (beyond Chat Completions' 4; all of them on the Responses
API) are enforced client-side.

The limits never turn a request the API would accept into one it refuses, nor an answer into an
empty one. The client merges `extra_body` over the named parameters, so a limit or stops given
there are read and rewritten there. On a call that reasons (`sdk.reasoning`), the output limit
also holds the reasoning:

- with a thinking budget (Anthropic `thinking.type="enabled"`): the cap bounds the visible answer,
  so the limit is `budget + cap`, above the budget as the API requires;
- without one (OpenAI reasoning models, Anthropic adaptive thinking): how much the model reasons is
  unknown, so a caller's limit is kept as given and a missing one is left missing, except where the
  API requires it (Anthropic), filled with `cap + REASONING_ROOM_TOKENS`.

Under `Policy.adaptive_caps` a call that neither reasons nor names a limit is filled with its prompt
workload's learnt cap (`sdk.decode.adaptive_caps`) instead of the policy's, once the workload has one; a
caller's limit is never lowered by it. `Call.cap.source` says which: policy, caller or adaptive.

A filled cap must fit the model, and kvwise sends no request the caller did not make to learn a
model's context: the pipeline does no I/O, so the send fits the limit (`fit_to_context`) to a
context it was told, by `Policy.model_contexts` or by the server itself, in a 400 (or 422) that
named the output limit or the context on an earlier call (remembered per base URL and model by
`sdk.send.refusals`). Where the prompt, estimated high at `CONTEXT_FIT_BYTES_PER_TOKEN` bytes of the
request body a token, plus kvwise's limit exceed the context, the limit goes as the caller wrote it
(none where they set none). Not `context - prompt`: a wrong estimate would then cut answers the bare
client gets whole, while the servers with short contexts (vLLM, the local backend) already stop at
the context's end on their own, so what kvwise leaves out is a limit that could not have bound
anyway. A context that is unknown leaves the limit in; and whatever the estimate, a refusal naming
the output limit or the context, on a call whose limit kvwise filled or clamped, gets the call once
more with the limit as the caller wrote it (`OUTPUT_LIMIT`, one of the additions `sdk.send.refusals`
takes back).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sdk import compat
from sdk._constants import CONTEXT_FIT_BYTES_PER_TOKEN, REASONING_ROOM_TOKENS
from sdk.adapters import Adapter, adapter_for
from sdk.call import Call, OutputCap
from sdk.decode.adaptive_caps import AdaptiveCaps, workload_of
from sdk.policy import Policy
from sdk.semconv import CapSource


def apply_limits(call: Call, policy: Policy, adapter: Adapter, caps: AdaptiveCaps | None = None) -> None:
    """Cap output tokens, merge stops and default penalties on `call` in place (`caps`: the
    client's learnt workload caps, under `Policy.adaptive_caps`)."""
    extra = compat.own_extra_body(call.params)  # a step rewriting it never touches the caller's
    _cap(call, policy, adapter, extra, caps)
    _merge_stops(call, policy, adapter, extra)
    if adapter.has_penalties:
        for name in ("frequency_penalty", "presence_penalty"):
            value = getattr(policy, name)
            if value is not None and name not in call.params and name not in extra:
                call.params[name] = value
                call.decided.changes.append(name)


def _cap(call: Call, policy: Policy, adapter: Adapter, extra: dict[str, Any], caps: AdaptiveCaps | None) -> None:
    """Decide the output limit (see the module docstring) and record it as `call.cap`."""
    cap = policy.max_output_tokens
    reasoning = adapter.reasoning(call.model, {**call.params, **extra})
    limit = cap if reasoning is None else None if reasoning.budget is None else reasoning.budget + cap
    given = [(name, extra if name in extra else call.params) for name in adapter.max_tokens_params]
    given = [(name, where) for name, where in given if name in where]
    if not given:
        learnt = _adaptive(call, policy, caps) if reasoning is None else None
        if learnt is not None:
            call.params[adapter.fill_param] = learnt
            call.cap = OutputCap(learnt, adapter.fill_param, source=CapSource.ADAPTIVE)
            call.decided.changes.append(f"max_tokens_adaptive:{adapter.fill_param}:{learnt}")
            return
        _fill(call, adapter, limit, cap)
        return
    found: list[OutputCap] = []
    for name, where in given:
        value = where[name]
        if isinstance(value, bool) or not isinstance(value, int):
            continue  # the caller's None, or a value only the API can judge, is theirs to send
        label = f"{compat.EXTRA_BODY}.{name}" if where is extra else name
        source = CapSource.CALLER
        clamped_from = None
        if limit is None and value > cap:
            call.decided.changes.append(f"max_tokens_kept:{label}:reasoning")
        elif limit is not None and value > limit:
            where[name] = limit
            call.decided.changes.append(f"max_tokens_clamped:{label}:{value}->{limit}")
            value, source, clamped_from = limit, CapSource.POLICY, value
        if where is extra:  # the client sends extra_body's value under this name: the named one agrees
            call.params[name] = value
        found.append(OutputCap(value, name, in_extra_body=where is extra, source=source, clamped_from=clamped_from))
    call.cap = min(found, key=lambda each: each.tokens, default=None)


def _adaptive(call: Call, policy: Policy, caps: AdaptiveCaps | None) -> int | None:
    """The workload's learnt cap for a call without a limit of its own, None while there is none."""
    if caps is None or not policy.adaptive_caps or (workload := workload_of(call)) is None:
        return None
    return caps.cap_for(workload, policy.adaptive_cap_margin, policy.adaptive_cap_floor, policy.max_output_tokens)


def _fill(call: Call, adapter: Adapter, limit: int | None, cap: int) -> None:
    """Fill a missing limit: `limit`, or on a reasoning call without a budget only where required."""
    name = adapter.fill_param
    if limit is None and not adapter.requires_max_tokens:
        call.decided.changes.append("max_tokens_not_filled:reasoning")
        return
    value = limit if limit is not None else cap + REASONING_ROOM_TOKENS
    call.params[name] = value
    call.cap = OutputCap(value, name)
    call.decided.changes.append(f"max_tokens_filled:{name}:{value}")


def _merge_stops(call: Call, policy: Policy, adapter: Adapter, extra: dict[str, Any]) -> None:
    if not policy.stop:
        return
    if adapter.stop_param is None:
        call.client_stops = policy.stop
        call.decided.changes.append("stop_client_side")
        return
    where = extra if adapter.stop_param in extra else call.params
    caller = _as_stop_list(where.get(adapter.stop_param))
    if caller is None:
        return  # not a stop list: the API judges it, as it would the bare client's request
    extra_stops = [stop for stop in policy.stop if stop not in caller]
    if not extra_stops:
        return
    limit = adapter.stop_limit
    room = max(0, limit - len(caller)) if limit is not None else len(extra_stops)
    if room:
        where[adapter.stop_param] = [*caller, *extra_stops[:room]]
        call.decided.changes.append("stop_merged" if where is call.params else f"stop_merged:{compat.EXTRA_BODY}")
    if extra_stops[room:]:
        call.client_stops = tuple(extra_stops[room:])
        call.decided.changes.append("stop_client_side")


def _as_stop_list(value: Any) -> list[str] | None:
    """The caller's stops as a list; None for a value that is not a string or a list of strings."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
        return list(value)
    return None


def _kvwise_limit(call: Call) -> OutputCap | None:
    """The request's limit where kvwise filled it in or lowered it (None where it is the caller's)."""
    cap = call.cap
    return cap if cap is not None and cap.source != CapSource.CALLER else None


@dataclass(frozen=True, slots=True)
class ContextLimit:
    """A model's context as kvwise was told it: `tokens`, or None where a server refused kvwise's
    limit without naming its context (then no limit of kvwise's fits)."""

    tokens: int | None


def fit_to_context(call: Call, request: compat.Request, context: ContextLimit) -> None:
    """Send the limit kvwise filled in or clamped as the caller wrote it where, after the prompt
    (estimated high), it does not fit `context` (see the module docstring)."""
    cap = call.cap
    if cap is None or not OUTPUT_LIMIT.added(call, request):
        return
    if context.tokens is not None:
        body = request.body
        prompt = math.ceil(
            len(json.dumps(body, ensure_ascii=False, default=str).encode()) / CONTEXT_FIT_BYTES_PER_TOKEN
        )
        if prompt + cap.tokens <= context.tokens:
            return
        change = f"max_tokens_not_filled:context:{context.tokens}"
    else:
        change = f"max_tokens_withheld:{cap.param}"
    OUTPUT_LIMIT.send_as_written(call, request)
    call.decided.changes.append(change)


class OutputLimit:
    """The output limit kvwise filled in or clamped, as an addition a server may refuse (`sdk.send.refusals`).

    Named by a refusal that mentions the limit's parameters or the context (vLLM: "This model's
    maximum context length is ..."; the local backend: "max_completion_tokens=4096 must be between 1
    and the model's context"). Taking it back sends the limit as the caller wrote it: none where they
    set none, theirs where kvwise lowered it. A fill the API requires (Anthropic's `max_tokens`) is
    never taken out.
    """

    name = "output_limit"
    _WORDS = (
        "max_tokens",
        "max_completion_tokens",
        "max_output_tokens",
        "context length",
        "context_length",
        "maximum context",
    )

    def added(self, call: Call, request: compat.Request) -> bool:
        cap, body = _kvwise_limit(call), request.body
        if cap is None or not isinstance(body, Mapping) or cap.param not in body:
            return False
        return cap.clamped_from is not None or not adapter_for(call.api).requires_max_tokens

    def named_by(self, message: str) -> bool:
        lowered = message.lower()
        return any(word in lowered for word in self._WORDS)

    def take_back(self, call: Call, request: compat.Request) -> None:
        cap = call.cap
        if cap is None:
            return
        self.send_as_written(call, request)
        call.decided.changes.append(f"max_tokens_refused:{cap.param}")
        call.decided.cap_refused = True  # the span says so (`kvwise.guard.cap_refused`)

    def context_named(self, message: str) -> int | None:
        """The context a refusal's text names, in tokens (None: it names none)."""
        found = _CONTEXT_NAMED.search(message)
        tokens = int(found[1].replace(",", "")) if found is not None else 0
        return tokens if tokens > 0 else None

    @staticmethod
    def send_as_written(call: Call, request: compat.Request) -> None:
        """Make `request` send the limit as the caller wrote it, and `call.cap` say what is sent."""
        cap = call.cap
        if cap is None:
            return
        body = dict(request.body)
        extra = dict(request.extra or {}) if cap.in_extra_body else None
        _as_written(cap, call.params, None)  # the span describes what is sent
        call.cap = _as_written(cap, body, extra)
        request.body = body
        if extra is not None:
            request.extra = extra


_CONTEXT_NAMED = re.compile(r"context(?:[ _](?:length|window|size))?(?: is| of)? (\d[\d,]*) tokens", re.IGNORECASE)
"""A context in a refusal's text: vLLM's "maximum context length is 2048 tokens", SGLang's "maximum
context length of 2048 tokens", the local backend's "the model's context of 2048 tokens"."""


def _as_written(cap: OutputCap, where: dict[str, Any], extra: dict[str, Any] | None) -> OutputCap | None:
    """Put the caller's own limit back in `where` (and `extra`, the `extra_body` the client merges
    over it): theirs where kvwise clamped it, none where kvwise filled it. The limit now sent."""
    if cap.clamped_from is None:
        where.pop(cap.param, None)
        return None
    where[cap.param] = cap.clamped_from
    if extra is not None:
        extra[cap.param] = cap.clamped_from
    return OutputCap(cap.clamped_from, cap.param, in_extra_body=cap.in_extra_body, source=CapSource.CALLER)


OUTPUT_LIMIT = OutputLimit()
