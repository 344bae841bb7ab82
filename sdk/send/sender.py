"""One kvwise send: the client's own request, under kvwise's telemetry, take-backs and stream watching.

`Sender.post` stands in for a resource's `_post` (see `sdk.compat.with_send`): the client's method
(`create`, `parse`, a stream helper, a `with_raw_response` form) builds its request as usual and
hands it here. It goes through the live client's `post` with the caller's options as written, so
the client's own retry loop runs inside, exactly as bare (`sdk.send.retry`; `Policy.retries` only
where the caller set no `max_retries`); once `post` returned, the request is never sent again (a 200
was accepted). kvwise sends it once more only after a refusal of something it added, as the caller
wrote it (`sdk.send.attempts`, `sdk.send.refusals`). One CLIENT span covers the sends, its
`kvwise.attempts` the requests made as far as the client tells (`_attempts`); what the send learns
on the way (a fan-out wait, a refusal taken back, a store failed at the join) it leaves as data, on
the call's record and decisions, for the telemetry to write (`sdk.telemetry.spans`); a stream comes back
watched, and a raw response comes back as the client's own object, unread (a streamed one's stream
not yet built): kvwise's bookkeeping runs when the caller parses it (`sdk.send.raw_answer`), and a
streamed one's `.parse()` gives the watched stream. Before the first send a limit kvwise filled
in is fitted to the model's context where kvwise was told it (`sdk.decode.limits.fit_to_context`):
here, not among `sdk.pipeline.Pipeline.prepare`'s steps, since it measures and rewrites the body the
client built, which only exists once the client's method calls `post`.
All of that is written once, in `Sender._sending`, which does no I/O: `post` and `apost` run it
with the sync and the async driver of `sdk.send.drive`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from sdk import compat
from sdk.adapters import adapter_for
from sdk.adapters._base import timings_of
from sdk.adapters.responses import response_facts
from sdk.cache.fanout import FanOut, LeaderRelease
from sdk.call import Call, Server
from sdk.decode.limits import ContextLimit, fit_to_context
from sdk.lifecycle import CallEnd, CallListener, Ending, Lifecycle
from sdk.memory.records import Leader
from sdk.policy import Policy
from sdk.semconv import CapSource
from sdk.send import raw_answer
from sdk.send.attempts import sending
from sdk.send.drive import Io, Steps, arun, run
from sdk.send.refusals import ADDITIONS, Refusals, TakeBack
from sdk.send.retry import max_retries_for
from sdk.surface import Kind
from sdk.telemetry import CallRecord, Telemetry, client_tracing, content


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

    def _lifecycle(self, request: compat.Request) -> tuple[Lifecycle[CallRecord], Leader | None]:
        """The call's span and end, and the fan-out leader it must wait for (None: none)."""
        if request.stream and not self.call.stream:
            self.call.params["stream"] = True  # a stream helper says so only to `post`
        record = self.parts.telemetry.start(self.call, self.server, client_tracing.switched_off(self.client))
        fanout = self.parts.fanout
        if fanout is None or self.fanout_key is None:
            return Lifecycle(record, self.listeners), None
        follow, leader = fanout.join(self.fanout_key, _span_id(record.span))
        if self.call.decided.store_outage is None and (reason := fanout.outage()) is not None:
            self.call.decided.store_outage = reason  # the store failed at the join: the span says so at its end
        release = () if leader is None else (LeaderRelease(fanout, leader),)  # the leader tells its followers
        return Lifecycle(record, self.listeners + release), follow

    def _send(
        self, request: compat.Request, record: CallRecord, asynchronous: bool
    ) -> tuple[Callable[[], Any], list[int], bool]:
        """One send of the call as `request` says at the time (a take-back rewrites it): the live
        client's `post`, its own retries inside; the count of sends made, kept as each starts; and
        whether the send returns the client's response wrapper of a parsed answer, to be parsed here
        (`sdk.compat.counting_cast_to`: its `retries_taken` counted)."""
        tracing = client_tracing.trace_headers(self.client, record.span)  # None: the client's own spans, under ours
        max_retries = max_retries_for(self.client, request.options, self.parts.policy.retries)
        counting = None
        if not request.stream and request.raw_mode is None:
            own_span = tracing is None and getattr(self.client, "open_telemetry", None) is not None
            counting = compat.counting_cast_to(self.client, request.cast_to, asynchronous, own_span)
        made = [0]

        def send() -> Any:
            made[0] += 1
            record.attempt(made[0])
            return self.client.post(request.path, **request.send_kwargs(tracing, max_retries, counting))

        return send, made, counting is not None

    def post(self, path: str, **arguments: Any) -> Any:
        """The sync client's `post(path, ...)`, sent the kvwise way."""
        return self.send(compat.Request.of_post(path, arguments))

    async def apost(self, path: str, **arguments: Any) -> Any:
        """The async client's `post(path, ...)`, sent the kvwise way."""
        return await self.asend(compat.Request.of_post(path, arguments))

    def send(self, request: compat.Request) -> Any:
        """`request` through the sync client, sent the kvwise way."""
        return run(self._sending(request, asynchronous=False))

    async def asend(self, request: compat.Request) -> Any:
        """`request` through the async client, sent the kvwise way."""
        return await arun(self._sending(request, asynchronous=True))

    def _sending(self, request: compat.Request, asynchronous: bool) -> Steps[Any]:
        """The send, top to bottom and without I/O: the I/O it needs is yielded to the driver (`sdk.send.drive`)."""
        if self.kind is Kind.CALL and (context := self._context()) is not None:
            fit_to_context(self.call, request, context)  # a limit kvwise filled in fits the model's context
        lifecycle, follow = self._lifecycle(request)  # the span, the end's listeners, the fan-out join
        record = lifecycle.record
        send, made, counted = self._send(request, record, asynchronous)
        if follow is not None and self.parts.fanout is not None:  # a follower waits for its leader's first chunk
            waiting = (follow, self.parts.policy.fanout_wait_seconds)
            record.waited((yield Io(self.parts.fanout.wait, self.parts.fanout.await_release, waiting)))
        raw = request.raw_mode
        take_back = TakeBack(self.parts.refusals, self.call, request, self.server, self.client)
        try:
            with record.activate():
                result = yield from sending(send, take_back, len(ADDITIONS) + 1)
        except BaseException as error:
            _attempts(record, made[0], error, request)
            self._failed(lifecycle, error)
            raise
        if raw or counted or self.call.stream:  # else the answer keeps no trace of the client's retries
            _attempts(record, made[0], result, request)
        if raw:  # the caller reads the body when it chooses (a stream too): the bookkeeping then
            read = partial(self._watch, lifecycle, asynchronous) if self.call.stream else partial(self._read, lifecycle)
            raw_answer.defer(result, read, partial(_unread, lifecycle))
            return result
        try:
            parsed = (yield Io(_parsed, _aparsed, (result,))) if counted else result
        except Exception as error:  # a body that is not JSON: the caller's own `.parse()` raises it, as the bare one's
            self._failed(lifecycle, error)
            if counted:  # where the client's `post` raises it
                raise
            return result
        if self.call.stream:
            return self._watch(lifecycle, asynchronous, parsed, None)
        finish(self.call, self.kind, parsed, lifecycle)
        return parsed if counted else result

    def _context(self) -> ContextLimit | None:
        """The model's context as kvwise was told it, where this call's limit is kvwise's:
        `Policy.model_contexts`, else what a refusal named (`sdk.send.refusals`); None: not told."""
        cap = self.call.cap
        if cap is None or cap.source == CapSource.CALLER:
            return None
        stated = self.parts.policy.model_contexts
        if stated is not None and (tokens := stated.get(self.call.model)) is not None:
            return ContextLimit(tokens)
        return self.parts.refusals.context(self.client, self.call.model)

    def _read(self, lifecycle: Lifecycle[CallRecord], parsed: Any, error: Exception | None) -> Any:
        """The caller parsed a raw response into `parsed`, or its parse raised `error` (a body that is
        not JSON): the call ends as a plain one would have. The caller gets `parsed`."""
        if error is not None:
            self._failed(lifecycle, error)
        else:
            finish(self.call, self.kind, parsed, lifecycle)
        return parsed

    def _watch(self, lifecycle: Lifecycle[CallRecord], asynchronous: bool, stream: Any, error: Exception | None) -> Any:
        """The client's `stream` (from `post`, or the caller's parse of a raw response, which raised
        `error`), watched by kvwise: what the caller gets."""
        if error is not None:
            self._failed(lifecycle, error)
            return stream
        # on a stream's first call: a plain call never loads the watcher's modules
        from sdk.send.stream_watch import StreamWatch, watch_async, watch_sync

        parts = self.parts
        watch = StreamWatch(adapter_for(self.call.api), self.call, parts.policy, lifecycle, parts.connection_error)
        return (watch_async if asynchronous else watch_sync)(stream, watch)

    @staticmethod
    def _failed(lifecycle: Lifecycle[CallRecord], error: BaseException) -> None:
        """End a call that failed with `error`, the bare client's own exception."""
        lifecycle.end(CallEnd(Ending.FAILED, error=error))


def _attempts(record: CallRecord, sends: int, outcome: object, request: compat.Request) -> None:
    """Count in the span's `kvwise.attempts` the retries the client's own loop took before `outcome`
    (`sdk.compat.retries_taken`): kvwise's `sends` are counted as each starts. After retries the
    answering request's time runs from here: the client's waits stay out of its time to first chunk."""
    taken = compat.retries_taken(outcome, request)
    if taken > 0:
        record.attempt(sends + taken)


def _unread(lifecycle: Lifecycle[CallRecord]) -> None:
    """A raw response closed or dropped before its caller parsed it: answered, with what is known."""
    lifecycle.end(CallEnd(Ending.ANSWERED))


def _span_id(span: Any) -> str | None:
    """A recording span's id as 16 hex digits (None without one)."""
    if span is None or not span.is_recording():
        return None
    return f"{span.get_span_context().span_id:016x}"


def _parsed(response: Any) -> Any:
    """The answer of the client's response wrapper (`sdk.compat.counting_cast_to`), sync."""
    return response.parse()


async def _aparsed(response: Any) -> Any:
    """The answer of the client's async response wrapper (`sdk.compat.counting_cast_to`)."""
    return await response.parse()


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
