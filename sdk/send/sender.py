"""One kvwise send: the client's own request, under kvwise's retries, telemetry and stream watching.

`Sender.post` stands in for a resource's `_post` (see `sdk.compat.with_send`): the client's method
(`create`, `parse`, a stream helper, a `with_raw_response` form) builds its request as usual and
hands it here. Each attempt goes through the live client's `post` with the client's own retries
off and the attempt's `x-stainless-retry-count`, as many as the caller's `max_retries` allows
(`sdk.send.retry.retries_for`) and only where the client's own rules would send again
(`sdk.send.retry.is_retryable`); once `post` returned, the request is never sent again (a 200 was
accepted). One CLIENT span covers the attempts; a stream comes back watched, and a
raw response comes back as the client's own object whose `.parse()` gives the parsed (or watched)
result kvwise recorded. Before the first attempt a limit kvwise filled in is fitted to the model's
context (`sdk.decode.limits.fit_to_context`); what a server refuses of kvwise's additions is taken back
(`sdk.send.refusals`). All of that is written once, in `Sender._sending`, which does no I/O: `post` and
`apost` run it with the sync and the async driver of `sdk.send.drive`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sdk import compat
from sdk.adapters import adapter_for
from sdk.adapters._base import timings_of
from sdk.adapters.responses import response_facts
from sdk.cache.fanout import FanOut, Leader, LeaderRelease, Waited
from sdk.call import Call
from sdk.decode.limits import fit_to_context, wants_context
from sdk.decode.model_context import ModelContexts
from sdk.lifecycle import CallEnd, CallListener, Ending, Lifecycle
from sdk.policy import Policy
from sdk.send.attempts import Attempts, attempting
from sdk.send.drive import Io, Steps, arun, run
from sdk.send.refusals import Refusals
from sdk.send.retry import is_retryable, retries_for
from sdk.surface import Kind
from sdk.telemetry import CallRecord, Telemetry, client_tracing, content
from sdk.telemetry import semconv as sc

Server = tuple[str | None, int | None]


@dataclass(frozen=True, slots=True)
class SendParts:
    """What every send of one wrapped client shares: its policy and telemetry, the client's own connection
    error (a truncated stream is raised as it), the fan-out gate and what its servers refused."""

    policy: Policy
    telemetry: Telemetry
    connection_error: type[Exception]
    refusals: Refusals
    fanout: FanOut | None = None  # None unless the policy asks (`sdk.cache.fanout`)


@dataclass(slots=True)
class Sender:
    """The send of one prepared call through the live client `client` (sync or async `post`)."""

    call: Call
    kind: Kind
    client: Any
    server: Server
    parts: SendParts
    fanout_key: bytes | None = None  # the call's place at the fan-out gate (None: it goes straight out)
    listeners: tuple[CallListener, ...] = ()  # told of a model call's end (`sdk.pipeline.Pipeline.prepare`)

    def _lifecycle(self, post_kwargs: dict[str, Any]) -> tuple[Lifecycle[CallRecord], Leader | None]:
        """The call's span and end, and the fan-out leader it must wait for (None: none)."""
        if post_kwargs.get("stream") and not self.call.stream:
            self.call.params["stream"] = True  # a stream helper says so only to `post`
        record = self.parts.telemetry.start(self.call, self.server)
        fanout = self.parts.fanout
        if fanout is None or self.fanout_key is None:
            return Lifecycle(record, self.listeners), None
        follow, leader = fanout.join(self.fanout_key, _span_id(record.span))
        if self.call.decided.state_degraded is None and (reason := fanout.outage()) is not None:
            _note_degraded(record, reason)
        release = () if leader is None else (LeaderRelease(fanout, leader),)  # the leader tells its followers
        return Lifecycle(record, self.listeners + release), follow

    def _attempts(
        self, path: str, post_kwargs: dict[str, Any], record: CallRecord
    ) -> tuple[Attempts, Callable[[], Any]]:
        """The call's attempts under the client's retry rules, and the send of one attempt."""
        retries = retries_for(self.client, post_kwargs.get("options"), self.parts.policy.retries)
        attempts = Attempts(retries, record.attempt, functools.partial(is_retryable, client=self.client))

        tracing = client_tracing.trace_headers(self.client, record.span)  # the client's own span gives way to ours

        def send() -> Any:  # reads `post_kwargs` at each attempt: a take-back rewrites them
            options = compat.attempt_options(post_kwargs.get("options"), attempts.made - 1, tracing)
            return self.client.post(path, **{**post_kwargs, "options": options})

        return attempts, send

    def post(self, path: str, **post_kwargs: Any) -> Any:
        """The sync client's `post(path, ...)`, sent the kvwise way."""
        return run(self._sending(path, post_kwargs, asynchronous=False))

    async def apost(self, path: str, **post_kwargs: Any) -> Any:
        """The async client's `post(path, ...)`, sent the kvwise way."""
        return await arun(self._sending(path, post_kwargs, asynchronous=True))

    def _sending(self, path: str, post_kwargs: dict[str, Any], asynchronous: bool) -> Steps[Any]:
        """The send, top to bottom and without I/O: the I/O it needs is yielded to the driver (`sdk.send.drive`)."""
        if (contexts := self._contexts()) is not None:  # a limit kvwise filled in fits the model's context
            context = yield Io(contexts.context, contexts.acontext, (self.client, self.call.model))
            if context is not None:
                fit_to_context(self.call, post_kwargs, context)
        lifecycle, follow = self._lifecycle(post_kwargs)  # the span, the end's listeners, the fan-out join
        record = lifecycle.record
        attempts, send = self._attempts(path, post_kwargs, record)
        if follow is not None and self.parts.fanout is not None:  # a follower waits for its leader's first chunk
            waiting = (follow, self.parts.policy.fanout_wait_seconds)
            _note_wait(record, (yield Io(self.parts.fanout.wait, self.parts.fanout.await_release, waiting)))
        raw = compat.raw_mode(post_kwargs.get("options"))
        try:
            with record.activate():
                result = yield from self._attempting(send, attempts, post_kwargs, record)
        except BaseException as error:
            self._failed(lifecycle, error)
            raise
        try:
            parsed = (yield Io(_parsed, _aparsed, (result,))) if raw else result
        except Exception as error:  # a body that is not JSON: the caller's own `.parse()` raises it, as the bare one's
            self._failed(lifecycle, error)
            return result
        if self.call.stream:
            # on a stream's first call: a plain call never loads the watcher's modules
            from sdk.send.stream_watch import StreamWatch, watch_async, watch_sync

            parts = self.parts
            watch = StreamWatch(adapter_for(self.call.api), self.call, parts.policy, lifecycle, parts.connection_error)
            watched = (watch_async if asynchronous else watch_sync)(parsed, watch)
            return self._raw_with(result, watched) if raw else watched
        finish(self.call, self.kind, parsed, lifecycle)
        return result

    def _attempting(
        self, send: Callable[[], Any], attempts: Attempts, post_kwargs: dict[str, Any], record: CallRecord
    ) -> Steps[Any]:
        """The attempts (`sdk.send.attempts`), and once more after each refusal kvwise takes back."""
        while True:
            try:
                return (yield from attempting(send, attempts))
            except Exception as error:
                if not self._took_back(error, post_kwargs, record):
                    raise

    def _contexts(self) -> ModelContexts | None:
        """The wrapped client's model contexts, where this call's filled limit must be fitted to one."""
        if self.kind is not Kind.CALL or not wants_context(self.call):
            return None
        return self.parts.refusals.contexts

    def _took_back(self, error: Exception, post_kwargs: dict[str, Any], record: CallRecord) -> bool:
        """Whether the server refused something kvwise added (`sdk.send.refusals`), now sent as the caller wrote it;
        then the loop sends again (each addition is taken back once, so it ends)."""
        return self.parts.refusals.take_back(error, self.call, self.server, post_kwargs, record.span)

    @staticmethod
    def _raw_with(raw: Any, watched: Any) -> Any:
        compat.cache_parsed(raw, watched)
        return raw

    @staticmethod
    def _failed(lifecycle: Lifecycle[CallRecord], error: BaseException) -> None:
        """End a call that failed with `error`, the bare client's own exception."""
        lifecycle.end(CallEnd(Ending.FAILED, error=error))


def _span_id(span: Any) -> str | None:
    """A recording span's id as 16 hex digits (None without one)."""
    if span is None or not span.is_recording():
        return None
    return f"{span.get_span_context().span_id:016x}"


def _note_degraded(record: CallRecord, reason: str) -> None:
    """Record on the span that the shared state store failed at the fan-out join (`sdk.memory.redis_store`)."""
    span = record.span
    if span is not None:
        span.set_attributes({sc.KVWISE_STATE_DEGRADED: True, sc.KVWISE_STATE_DEGRADED_REASON: reason})


def _note_wait(record: CallRecord, waited: Waited) -> None:
    """Record on the follower's span how long it waited, and for which leader."""
    span = record.span
    if span is None or not span.is_recording():
        return
    span.set_attribute(sc.KVWISE_FANOUT_WAITED_MS, waited.waited_ms)
    if waited.leader_span_id is not None:
        span.set_attribute(sc.KVWISE_FANOUT_LEADER_SPAN_ID, waited.leader_span_id)


def _parsed(raw: Any) -> Any:
    """A sync raw response's `parse()`."""
    return raw.parse()


async def _aparsed(raw: Any) -> Any:
    """`raw.parse()`: a coroutine on the async clients' raw responses, a value on openai's legacy one."""
    parsed = raw.parse()
    return await parsed if inspect.isawaitable(parsed) else parsed


def finish(call: Call, kind: Kind, response: Any, lifecycle: Lifecycle[CallRecord]) -> None:
    """End a call that was not streamed: client-side stops and usage for a model call, the id alone
    for a token count or a batch (no model output yet), nothing more for a 200 body that was not the
    API's JSON (an HTML page: the clients hand it over as text)."""
    if kind is not Kind.CALL or isinstance(response, (str, bytes)):
        lifecycle.end(CallEnd(Ending.ANSWERED, response_id=getattr(response, "id", None)))
        return
    adapter = adapter_for(call.api)
    if call.client_stops:
        adapter.truncate_text(response, call.client_stops)
    captures = lifecycle.record.captures_content
    lifecycle.end(
        CallEnd(
            Ending.ANSWERED,
            usage=adapter.usage(response),
            response_id=getattr(response, "id", None),
            response_model=getattr(response, "model", None),
            finish_reasons=adapter.finish_reasons(response),
            timings=timings_of(response),
            output_text=adapter.output_text(response) if captures else None,
            output_tool_calls=content.answer_tool_calls(response) if captures else None,
            **response_facts(response),
        )
    )
