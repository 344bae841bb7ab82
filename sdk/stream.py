"""Stream guards: observe each event, cut upstream on a loop or a client-side stop, catch truncation.

The client's own stream object is kept (the caller gets `openai.Stream`, `anthropic.Stream`, ...):
only its event iterator is replaced by a guarded generator. `StreamWatch` holds all the logic and
does no I/O; the sync and async generators are thin loops around it. Each finalises the call's
telemetry exactly once: on the final event, a cut, an error, `close()`, or the garbage collection of
a half-read stream; and each always closes the HTTP response.

A stream is broken when it ends without its final event or a transport fault interrupts it (a
dropped connection, a read timeout, a `data:` line cut short). Before its first content chunk it is
sent again, from the call's `Attempts`; after, the caller gets `StreamTruncated`.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from sdk.adapters import Adapter, StreamState
from sdk.adapters._base import first_stop
from sdk.call import Call
from sdk.errors import StreamTruncated
from sdk.loopguard import LoopDetector
from sdk.policy import Policy
from sdk.retry import Attempts, transport_errors
from sdk.telemetry import CallRecord


TRANSPORT_ERRORS = transport_errors()


class StreamWatch:
    """What the guard knows about one stream, and what to do with each event."""

    def __init__(self, adapter: Adapter, call: Call, policy: Policy, record: CallRecord, attempts: Attempts) -> None:
        self.adapter = adapter
        self.record = record
        self.state = StreamState()
        self.detector = LoopDetector() if policy.loop_guard else None
        self.stops = call.client_stops
        self._stop_tail = ""
        self.cap = next((call.params[p] for p in adapter.max_tokens_params if isinstance(call.params.get(p), int)), None)
        self.delivered = 0  # content chunks handed to the caller: after the first, never send again
        self.attempts = attempts
        self._finalized = False

    def process(self, event: Any) -> tuple[list[Any], bool]:
        """The events to hand the caller for one upstream event, and whether to cut upstream now."""
        text = self.adapter.read_event(event, self.state)
        if not text:
            return [event], False
        if not self.delivered:
            self.record.first_chunk()
        self.delivered += 1
        self.record.chunk()
        if self.stops and (cut := self._cut_at_stop(event, text)) is not None:
            return cut, True
        self.state.text.append(text)
        if self.detector is not None and self.detector.feed(text) is not None:
            saved = self.cap - self.state.output_units if self.cap is not None else None
            self.record.guard_tripped("loop", saved)
            return [event, *self.adapter.cut_events(self.state, truncated=True)], True
        return [event], False

    def _cut_at_stop(self, event: Any, text: str) -> list[Any] | None:
        window = self._stop_tail + text
        index = first_stop(window, self.stops)
        if index is None:
            self._stop_tail = window[-max(len(s) for s in self.stops) :]
            return None
        keep = text[: max(0, index - len(self._stop_tail))]
        self.state.text.append(keep)
        self.adapter.set_event_text(event, keep)
        head = [event] if keep else []
        return [*head, *self.adapter.cut_events(self.state, truncated=False)]

    def reopen_after(self, broken: BaseException | None) -> bool:
        """After upstream ended (`broken`: the transport fault, if any): False when the stream is
        complete, True to send it again, else raise `StreamTruncated`.

        A stream is sent again only if it broke before its first content chunk, within the call's
        attempts: only header events (role chunk, `message_start`, `response.created`) can have
        reached the caller; the new stream repeats them, and every client's accumulator starts over
        on them.
        """
        if broken is None and self.state.finished:
            return False
        if self.delivered or self.attempts.left <= 0:
            why = "the body ended without the final event" if broken is None else f"{type(broken).__name__}: {broken}"
            raise StreamTruncated(
                f"the stream broke after {self.delivered} content chunks reached the caller, on attempt "
                f"{self.attempts.made} ({why}); the answer is incomplete: send the request again"
            ) from broken
        return True

    def finish(self, error: BaseException | None) -> None:
        """End the call's telemetry, once."""
        if self._finalized:
            return
        self._finalized = True
        state = self.state
        self.record.end(
            usage=state.usage,
            response_id=state.response_id,
            response_model=state.response_model,
            finish_reasons=tuple(state.finish_reasons),
            timings=state.timings,
            output_text="".join(state.text) if self.record.captures_content else None,
            error=error if error is not None else (None if state.finished else "stream_abandoned"),
        )


class Upstream:
    """The HTTP stream being read: replaced when a stream is reopened before any output."""

    def __init__(self, stream: Any) -> None:
        self.outer = weakref.ref(stream)  # no reference cycle: a dropped stream is closed at once
        self.response = stream.response
        self.iterator = stream._iterator

    def replace(self, stream: Any) -> None:
        self.response, self.iterator = stream.response, stream._iterator
        if (outer := self.outer()) is not None:
            outer.response = self.response


def guard_sync(stream: Any, watch: StreamWatch, reopen: Callable[[], Any]) -> Any:
    """Swap `stream`'s iterator for a guarded one; return the same stream object."""
    upstream = Upstream(stream)
    stream._iterator = _guarded(upstream, watch, reopen)
    return stream


def _guarded(upstream: Upstream, watch: StreamWatch, reopen: Callable[[], Any]) -> Iterator[Any]:
    error: BaseException | None = None
    try:
        while True:
            broken: BaseException | None = None
            try:
                for event in upstream.iterator:
                    out, cut = watch.process(event)
                    if cut:
                        upstream.response.close()
                    for item in out:
                        yield item
                    if cut:
                        return
            except TRANSPORT_ERRORS as exc:
                broken = exc
            if not watch.reopen_after(broken):
                return
            upstream.replace(reopen())
    except GeneratorExit:  # the caller closed or dropped the stream: abandoned, not failed
        raise
    except BaseException as exc:
        error = exc
        raise
    finally:
        upstream.response.close()
        watch.finish(error)


def guard_async(stream: Any, watch: StreamWatch, reopen: Callable[[], Awaitable[Any]]) -> Any:
    """Async twin of `guard_sync`."""
    upstream = Upstream(stream)
    stream._iterator = _aguarded(upstream, watch, reopen)
    return stream


async def _aguarded(upstream: Upstream, watch: StreamWatch, reopen: Callable[[], Awaitable[Any]]) -> AsyncIterator[Any]:
    error: BaseException | None = None
    try:
        while True:
            broken: BaseException | None = None
            try:
                async for event in upstream.iterator:
                    out, cut = watch.process(event)
                    if cut:
                        await upstream.response.aclose()
                    for item in out:
                        yield item
                    if cut:
                        return
            except TRANSPORT_ERRORS as exc:
                broken = exc
            if not watch.reopen_after(broken):
                return
            upstream.replace(await reopen())
    except GeneratorExit:  # the caller closed or dropped the stream: abandoned, not failed
        raise
    except BaseException as exc:
        error = exc
        raise
    finally:
        await upstream.response.aclose()
        watch.finish(error)
