"""The request-rewrite chain: canonical order -> fingerprint -> cache diagnostics -> cache hints -> decode limits
-> the read to expect.

Each step is a `Middleware`: it reads and rewrites the provider-neutral `Call` in place, without
I/O, so the sync and async clients share it. Users add their own steps with
`sdk.wrap(client, middleware=[...])`; theirs run first, on the caller's prompt, before kvwise
puts it in canonical order. Retries and telemetry wrap the send that follows (see `sdk.wrap`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from sdk.adapters import adapter_for
from sdk.adaptive_caps import CapLearner, workload_of
from sdk.cache_hints import place_cache_hints
from sdk.call import Call
from sdk.canonical import canonicalize
from sdk.diagnostics import request_diagnostics
from sdk.expected_reads import SentPrefixes
from sdk.fingerprint import cache_ttl_seconds
from sdk.guards import apply_guards
from sdk.lifecycle import CallListener
from sdk.memory.memories import Memories, local_memories
from sdk.policy import Policy
from sdk.telemetry.semconv import CapSource


@runtime_checkable
class Middleware(Protocol):
    """A step of the chain: rewrite `call` in place before it is sent.

    >>> class TagUser:
    ...     def on_request(self, call: sdk.call.Call) -> None:
    ...         call.params.setdefault("user", "team-a")
    >>> client = sdk.wrap(openai.OpenAI(), middleware=[TagUser()])
    """

    def on_request(self, call: Call) -> None: ...


class Chain:
    """The built-in steps under one policy, after the user's own."""

    def __init__(
        self,
        policy: Policy,
        memories: Memories | None = None,
        extra: Sequence[Middleware] = (),
        *,
        diagnostics: bool = False,
    ) -> None:
        for step in extra:
            if not isinstance(step, Middleware):
                raise TypeError(f"middleware must have an on_request(call) method, got {step!r}")
        self.policy = policy
        memories = memories if memories is not None else local_memories(policy)  # one wrapped client's
        self.tracker = memories.tracker  # the last call per API and model (`sdk.fingerprint`)
        self.families = memories.families  # which bytes change between calls (`sdk.families`)
        self.extra = tuple(extra)
        self.sent = SentPrefixes()  # what this client sent, to tell what a call should read (`sdk.expected_reads`)
        self.caps = memories.caps  # learnt output caps (`sdk.adaptive_caps`), None unless the policy asks
        self.outage = memories.outage
        self.diagnostics = diagnostics and policy.cache_diagnostics  # Anthropic's own API only (`sdk.diagnostics`)

    def run(self, call: Call) -> list[CallListener]:
        """Rewrite `call` through every step, in order; return the steps' listeners to the call's end
        (`sdk.lifecycle`): what learns from its answer."""
        adapter = adapter_for(call.api)
        listeners: list[CallListener] = []
        for step in self.extra:
            step.on_request(call)
        canonicalize(call, self.policy, adapter, self.families)
        ttl = cache_ttl_seconds(call, self.policy.cache_ttl)
        seen, previous = self.tracker.observe(call, ttl)
        if self.diagnostics and (ids := request_diagnostics(call, seen, previous)) is not None:
            listeners.append(ids)
        if self.policy.cache_hints:
            place_cache_hints(call, self.policy, adapter)
        apply_guards(call, self.policy, adapter, self.caps)
        if self.caps is not None and call.cap is not None and (workload := workload_of(call)) is not None:
            listeners.append(CapLearner(self.caps, workload, call.cap.tokens, call.cap.source == CapSource.ADAPTIVE))
        if self.outage is not None:
            call.state_degraded = self.outage()
        call.expected_read, learner = self.sent.expect(call, ttl)  # the prompt as it goes, breakpoints placed
        if learner is not None:
            listeners.append(learner)
        return listeners
