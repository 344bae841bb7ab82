"""Stream watching: observe each event, cut upstream on a loop (the loop guard) or a client-side stop,
tell an end from a break.

The caller gets the client's own stream object behind a proxy (`sdk.send.stream_proxy`), so it is
still an `openai.Stream`, an `anthropic.AsyncStream`, ...; iterating it runs a watching generator
over the client stream's own iteration. `StreamWatch` holds all the logic and does no I/O:
`on_event` says what each upstream event becomes, `ended` what the end of upstream does, and
leaving `with watch` ends the call; the sync and async generators only read upstream, hand on, and
close it. The call's telemetry ends exactly once: on the final event, a cut, an error, `close()`,
`with` exit, or when the caller drops the stream; and the HTTP response is always closed.

Content is text, tool-call and function arguments, thinking, refusals (each adapter's `read_event`
says which). Every event reaches the caller as it arrives, header events before the first content
(the role chunk, `message_start`, `response.created`) included: the time to first chunk runs to the
first header, the prefill phase to the first content.

A stream is never sent again: its 200 means the provider accepted the request, and may bill every
copy. When it breaks, the caller gets what the bare client raises for that break, on that one
attempt: a connection that drops or times out is the client's `APIConnectionError` or
`APITimeoutError`, raised as `StreamTruncated` of that class and chained to the transport error the
client chained it to (`httpx2.RemoteProtocolError`, ...); anything else (a `data:` line that is not
JSON, an error event) is the client's own exception, untouched.

A body the server ended cleanly is an end, as the bare client holds it (it ends the iteration): the
caller gets the same events and no exception. The span says whether the server marked that end: with
its end marker (the `[DONE]` the openai client swallows, which `sdk.send.stream_done` watches for;
Messages' `message_stop`; Responses' terminal event), finish reason or not, or after saying why the
answer stopped (a `finish_reason`, a `stop_reason`: the clients' decoders drop a last event that
lacks the blank line that dispatches it). A body that ends with neither is recorded
`kvwise.stream.end_marker=false`, its usage estimated where the server sent none, and not learnt
from (the answer may be short).

Usage: a Chat stream is sent with `stream_options.include_usage` when the caller did not ask for it
(`openai_chat.stream_usage_options`); its usage chunk and the `"usage": null` on every other chunk
are kept from the caller, who sees the bare client's chunks. A caller who closes the stream at its
finish chunk leaves the rest unread: closing reads on for the usage chunk the server sends right
behind it (only then, so the span's usage stays exact). A stream that ends before the server
reported its usage (cut by a guard, closed early) gets `estimated_usage`, marked
`kvwise.usage.estimated` on the span; Anthropic's `message_start`, and servers that report usage
on every chunk, give exact input and cache figures even then.

A cut stream ends as the bare one would have (`Adapter.cut_events`): in the classes of the API
called (a beta call's own), with the usage the span records where the API reports it at the end
(a Chat or Completions usage chunk where the caller asked for one). A stream its caller stops
reading is no failure: its span ends without error, marked `kvwise.stream.abandoned`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncGenerator, Generator
from contextlib import suppress
from time import time_ns
from typing import Any

from sdk.adapters import Adapter, StreamState
from sdk.adapters._base import first_stop
from sdk.adapters.responses import stream_facts
from sdk.call import Api, Call, Usage
from sdk.decode.loop_guard import LoopDetector
from sdk.errors import stream_truncated
from sdk.lifecycle import CallEnd, Ending, Lifecycle
from sdk.policy import Policy
from sdk.send.stream_done import DoneMarker
from sdk.send.stream_proxy import AsyncWatchedStream, Upstream, WatchedStream
from sdk.telemetry import CallRecord
from sdk.telemetry.content import streamed_tool_calls
from sdk.tokens import estimate_tokens

logger = logging.getLogger(__name__)

_ENDS_WITH_DONE = frozenset({Api.CHAT, Api.COMPLETIONS, Api.RESPONSES})  # the openai client's: it stops at `[DONE]`


class StreamWatch:
    """What the watcher knows about one stream, and what to do with each content event."""

    def __init__(
        self,
        adapter: Adapter,
        call: Call,
        policy: Policy,
        lifecycle: Lifecycle[CallRecord],
        connection_error: type[Exception],
    ) -> None:
        self.adapter = adapter
        # the wrapped client's: what its stream raises for a dropped connection or a timeout
        self.connection_error = connection_error
        self.call = call
        self.lifecycle = lifecycle
        self.record = lifecycle.record
        self.state = StreamState(hide_usage=adapter.hides_usage(call), usage_asked=adapter.asks_usage(call))
        if self.record.captures_content:
            self.state.tool_calls = {}  # the answer's tool calls, for its output message
        self.read = adapter.read_event
        self.detector = LoopDetector.for_call(call) if policy.loop_guard else None
        self.stops = call.client_stops
        self._stop_tail = ""
        self.cap = call.cap.tokens if call.cap is not None else None  # the cap the decode limits decided and sent
        self.delivered = 0  # content events handed to the caller
        self.finalized = False
        self.received_ns: int | None = None  # when the answering attempt's first event (a header) arrived
        self.cut = False  # kvwise ended the stream (a loop or a client-side stop): the server's count stopped early
        self.tripped: tuple[str, int | None] | None = None  # the guard that cut it, and the tokens it saved
        self.done: DoneMarker | None = None  # the `[DONE]` watch of an openai stream
        self.unmarked = False  # the body ended cleanly without its end marker or a finish reason

    def watch_end(self, stream: Any) -> None:
        """Before `stream` (the client's) is first read: watch for the end marker the openai client
        swallows (`[DONE]`)."""
        if self.call.api in _ENDS_WITH_DONE:
            self.done = DoneMarker.install(stream)

    def on_event(self, event: Any) -> list[Any] | None:
        """What the caller gets now for `event` from upstream: None for the event itself, else a list
        (empty for the SDK's own usage chunk). After a cut (`self.cut`: a loop or a client-side stop)
        the list ends the stream, and upstream is to be closed before it is handed on. One call per
        content event, the streams' hot path."""
        text = self.read(event, self.state)
        if text is None:
            if self.state.swallow:  # the usage chunk the SDK asked for
                self.state.swallow = False
                return []
            if self.received_ns is None and not self.delivered:
                self.received_ns = time_ns()  # a header: the first chunk received
            return None
        if not self.delivered:
            self.lifecycle.first_chunk(self.received_ns)
        self.delivered += 1
        self.record.chunk()
        cut = None
        if text:
            if self.stops:
                cut = self._cut_at_stop(event, text)
            if cut is None:
                self.state.text.append(text)
                if self.detector is not None and self.detector.feed(text) is not None:
                    cut = self._loop_cut(event)
        return cut

    def _loop_cut(self, event: Any) -> list[Any]:
        """The loop guard tripped on `event`: it goes on, then the stream's end (the span records the
        tokens the cap still allowed as saved)."""
        self.tripped = ("loop", self.cap - self.state.output_units if self.cap is not None else None)
        return [event, *self._cut(truncated=True)]

    def _cut(self, truncated: bool) -> list[Any]:
        """The events that end a stream kvwise cuts, reporting the usage its span records."""
        self.cut = True
        return self.adapter.cut_events(self.state, truncated, self._usage()[0])

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
        return [*head, *self._cut(truncated=False)]

    def awaits_usage(self) -> bool:
        """Whether the stream finished but the usage the SDK asked for is still to come (right behind
        the finish chunk)."""
        state = self.state
        return state.finished and state.hide_usage and state.usage is None

    def took_usage(self, event: Any) -> bool:
        """Read `event`, upstream's next after the caller left at the finish chunk: whether the usage
        the SDK asked for is now in."""
        self.read(event, self.state)
        return not self.awaits_usage()

    def ended(self, broken: Exception | None) -> None:
        """Upstream ended (`broken`: what the client raised, if anything). A clean end is an end, as
        the bare client has it (`self.unmarked` when the server did not mark it). A break raises
        `broken` itself unless it is the client's connection error or timeout, else `StreamTruncated`
        as `broken`'s class, chained to what the client chained `broken` to; never sent again (see
        the module docstring).
        """
        if broken is None:
            if self.state.finish_reasons or (self.done is not None and self.done.seen):
                self.state.finished = True  # ended by the server: its end marker, or why the answer stopped
            else:
                self.unmarked = True
            return
        if not isinstance(broken, self.connection_error):
            raise broken
        if self.state.finished and self.awaits_usage():  # the break lost only the usage chunk kvwise asked for
            return
        raise stream_truncated(type(broken))(
            f"the stream broke after {self.delivered} content chunks reached the caller ({type(broken).__name__}: "
            f"{broken}); the answer is incomplete. The provider accepted the request (it answered 200), so kvwise "
            "did not send it again",
            request=getattr(broken, "request", None),
        ) from broken.__cause__

    def __enter__(self) -> StreamWatch:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, traceback: Any) -> None:
        """The watching loop ended: end the call with what ended it (a closed generator's
        `GeneratorExit` is its caller closing or dropping the stream: abandoned, not failed)."""
        self.finish(None if kind is GeneratorExit else error)

    def finish(self, error: BaseException | None) -> None:
        """End the call, once.

        Ended by its caller (`error` None: closed, dropped, `with` exit; or anything but an
        `Exception`, such as a cancelled task's `CancelledError`), a stream is no failure, and one
        that had not reached its final event is abandoned. A broken one carries its error.
        """
        if self.finalized:
            return
        self.finalized = True
        state = self.state
        by_caller = error is None or not isinstance(error, Exception)
        usage, estimated = self._usage()
        guard, tokens_saved = self.tripped or (None, None)
        self.lifecycle.end(
            CallEnd(
                _ending(by_caller, self.cut, state.finished or self.unmarked),
                usage=usage,
                usage_estimated=estimated,
                response_id=state.response_id,
                response_model=state.response_model,
                finish_reasons=tuple(state.finish_reasons),
                timings=state.timings,
                output_text="".join(state.text) if state.tool_calls is not None else None,
                output_tool_calls=streamed_tool_calls(state.tool_calls) if state.tool_calls is not None else None,
                error=None if by_caller else error,
                guard=guard,
                tokens_saved=tokens_saved,
                end_unmarked=self.unmarked,
                **stream_facts(state.last_event, state.start_message),
            )
        )

    def _usage(self) -> tuple[Usage | None, bool]:
        """The stream's usage, and whether it is an estimate (the server never reported it)."""
        state = self.state
        usage = state.usage
        try:
            if usage is None:
                return estimated_usage(self.call, state.output_units), True
            stopped_early = self.cut or not state.finished  # the server's count stopped early
            if stopped_early and usage.output_tokens < state.output_units:
                return dataclasses.replace(usage, output_tokens=state.output_units), False
        except Exception:
            logger.debug("kvwise: could not estimate a stream's usage", exc_info=True)
        return usage, False


def _ending(by_caller: bool, cut: bool, finished: bool) -> Ending:
    """How a stream ended: broken (not by its caller), cut by kvwise, left by its caller, or answered."""
    if not by_caller:
        return Ending.FAILED
    if cut:
        return Ending.CUT
    return Ending.ANSWERED if finished else Ending.ABANDONED


def estimated_usage(call: Call, output_units: int) -> Usage:
    """The usage of a stream whose server never reported it (cut, closed early, or usage at the end only).

        input  = characters of the tools, system prompt and turns as sent (JSON) / 4   (`estimate_tokens`)
        output = content events seen (about one token each on OpenAI's streams)
        cache  = 0: which prefix the server had cached is not knowable client-side, so the estimate
                 prices every input token as uncached (an upper bound on the cost)

    No tokenizer: tiktoken, the OpenAI models' own, downloads its BPE files at run time, and no
    package on the registry ships o200k offline at a reasonable size.
    """
    prompt = estimate_tokens(call.tools) + estimate_tokens(call.system) + estimate_tokens(call.messages)
    return Usage(input_tokens=max(prompt, 1), output_tokens=output_units)


def watch_sync(stream: Any, watch: StreamWatch) -> Any:
    """The caller's stream: `stream` (the client's) behind a `WatchedStream` proxy, watched by `watch`."""
    watch.watch_end(stream)
    upstream = Upstream(stream, iter(stream))
    return WatchedStream.of(stream, upstream, _watching(upstream, watch), watch)


def _watching(upstream: Upstream, watch: StreamWatch) -> Generator[Any, None, None]:
    """The sync watching loop: read upstream, hand on what `watch` says, close upstream at a cut and at the end."""
    on_event, broken = watch.on_event, None
    try:
        with watch:
            try:
                for event in upstream.events:
                    if (out := on_event(event)) is None:
                        yield event
                        continue
                    if watch.cut:
                        upstream.stream.close()  # the server stops decoding now
                    yield from out
                    if watch.cut:
                        return
            except Exception as exc:  # what the client raised for the break
                broken = exc
            except GeneratorExit:  # the caller closed the stream: at its finish, read on for the usage
                if watch.awaits_usage():
                    with suppress(Exception):
                        for event in upstream.events:
                            if watch.took_usage(event):
                                break
                raise
            watch.ended(broken)
    finally:
        if not upstream.stream.response.is_closed:  # at its end the client's stream closed it, as bare
            upstream.stream.close()


def watch_async(stream: Any, watch: StreamWatch) -> Any:
    """Async twin of `watch_sync`: an `AsyncWatchedStream`."""
    watch.watch_end(stream)
    upstream = Upstream(stream, aiter(stream))
    return AsyncWatchedStream.of(stream, upstream, _awatching(upstream, watch), watch)


async def _awatching(upstream: Upstream, watch: StreamWatch) -> AsyncGenerator[Any, None]:
    """The async watching loop: `_watching`'s I/O awaited (an async generator cannot `yield from`)."""
    on_event, broken = watch.on_event, None
    try:
        with watch:
            try:
                async for event in upstream.events:
                    out = on_event(event)
                    if watch.cut:
                        await upstream.stream.close()  # the server stops decoding now
                    for item in (event,) if out is None else out:
                        yield item
                    if watch.cut:
                        return
            except Exception as exc:
                broken = exc
            except GeneratorExit:
                if watch.awaits_usage():
                    with suppress(Exception):
                        async for event in upstream.events:
                            if watch.took_usage(event):
                                break
                raise
            watch.ended(broken)
    finally:
        if not upstream.stream.response.is_closed:  # at its end the client's stream closed it, as bare
            await upstream.stream.close()
