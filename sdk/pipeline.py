"""The order of a call, top to bottom, in one function: `Pipeline.prepare`.

Each step is a function or a small object over the provider-neutral `Call`, without I/O, so the
sync and async clients share them; the last step hands the call to its send, whose own order (fit
to the context, the span, fan-out, the attempts, the stream watcher, the end of call) reads top to
bottom in `sdk.send.sender.Sender._sending`. Users add their own steps with
`sdk.wrap(client, middleware=[...])`; theirs run first, on the caller's prompt, before kvwise puts
it in canonical order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from sdk.adapters import adapter_for
from sdk.cache.diagnostics import request_diagnostics
from sdk.cache.expected_reads import SentPrefixes
from sdk.cache.fanout import fanout_key
from sdk.cache.fingerprint import cache_ttl_seconds
from sdk.cache.hints import place_cache_hints
from sdk.call import Call, Server
from sdk.decode.adaptive_caps import CapLearner, workload_of
from sdk.decode.limits import apply_limits
from sdk.lifecycle import CallListener
from sdk.memories import Memories, local_memories
from sdk.policy import Policy
from sdk.prompt.canonical import canonicalize
from sdk.semconv import CapSource
from sdk.send.refusals import Refusals
from sdk.send.sender import Sender, SendParts
from sdk.surface import Kind
from sdk.telemetry import Telemetry


@runtime_checkable
class Middleware(Protocol):
    """A step of the user's own: rewrite `call` in place before kvwise's steps.

    >>> class TagUser:
    ...     def on_request(self, call: sdk.call.Call) -> None:
    ...         call.params.setdefault("user", "team-a")
    >>> client = sdk.wrap(openai.OpenAI(), middleware=[TagUser()])
    """

    def on_request(self, call: Call) -> None: ...


class Pipeline:
    """One wrapped client's steps under one policy, with what they remember and the send they end in."""

    def __init__(
        self,
        policy: Policy,
        memories: Memories | None = None,
        extra: Sequence[Middleware] = (),
        *,
        diagnostics: bool = False,
        telemetry: Telemetry | None = None,
        connection_error: type[Exception] = ConnectionError,
    ) -> None:
        for step in extra:
            if not isinstance(step, Middleware):
                raise TypeError(f"middleware must have an on_request(call) method, got {step!r}")
        self.policy = policy
        memories = memories if memories is not None else local_memories(policy)  # one wrapped client's
        self.tracker = memories.tracker  # the last call per API and model (`sdk.cache.fingerprint`)
        self.families = memories.families  # which bytes change between calls (`sdk.prompt.families`)
        self.extra = tuple(extra)
        self.sent = SentPrefixes()  # what this client sent: what a call should read (`sdk.cache.expected_reads`)
        self.caps = memories.caps  # learnt output caps (`sdk.decode.adaptive_caps`), None unless the policy asks
        self.outage = memories.outage
        self.fanout = memories.fanout  # None unless the policy asks (`sdk.cache.fanout`)
        self.diagnostics = diagnostics and policy.cache_diagnostics  # Anthropic's API only (`sdk.cache.diagnostics`)
        self.refusals = Refusals(memories.store)  # what this client's servers refused (`sdk.send.refusals`)
        self.sending = SendParts(  # what every send of this client shares
            policy,
            telemetry if telemetry is not None else Telemetry(policy),
            connection_error,  # the client's own, that a truncated stream is raised as
            self.refusals,
            self.fanout,
        )

    def prepare(self, call: Call, kind: Kind = Kind.CALL, client: Any = None, server: Server = (None, None)) -> Sender:
        """Rewrite `call` through every step, in order, and return its send through the live `client`.

        A token count's and a batch's requests go through the same steps (what they send is what a
        call would send), but only a model call's end teaches anything, so only it gets listeners
        (`sdk.lifecycle`); a batch's requests are sent by the provider later, so what a server
        refused is not withheld from them.
        """
        adapter = adapter_for(call.api)
        listeners: list[CallListener] = []
        for step in self.extra:  # the caller's own steps, on the prompt as written
            step.on_request(call)
        canonicalize(call, self.policy, adapter, self.families)  # canonical order, volatile bytes moved
        ttl = cache_ttl_seconds(call, self.policy.cache_ttl)
        seen, previous = self.tracker.observe(call, ttl)  # the fingerprint, and where the cache broke
        if self.diagnostics and (ids := request_diagnostics(call, seen, previous)) is not None:
            listeners.append(ids)  # the server's own diagnosis of the break
        if self.policy.cache_hints:
            place_cache_hints(call, self.policy, adapter)  # breakpoints, cache keys
        apply_limits(call, self.policy, adapter, self.caps)  # decode limits: the cap, stops, penalties
        if self.caps is not None and call.cap is not None and (workload := workload_of(call)) is not None:
            listeners.append(CapLearner(self.caps, workload, call.cap.tokens, call.cap.source == CapSource.ADAPTIVE))
        if self.outage is not None:
            call.decided.store_outage = self.outage()  # the shared memory's store failed: in-process state
        call.decided.expected_read, learner = self.sent.expect(call, ttl)  # the read to expect, breakpoints placed
        if learner is not None:
            listeners.append(learner)
        if kind is not Kind.BATCH:
            self.refusals.mark(call, server)  # none of what this server refused is added
        key = fanout_key(call, client) if self.fanout is not None and kind is Kind.CALL else None
        listened = tuple(listeners) if kind is Kind.CALL else ()
        return Sender(call, kind, client, server, self.sending, key, listened)  # its order: `Sender._sending`
