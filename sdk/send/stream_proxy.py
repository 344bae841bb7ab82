"""The caller's stream under kvwise: the client's own stream object behind a proxy that owns the
call's telemetry (the OpenTelemetry GenAI utilities' idea: a `wrapt.ObjectProxy` that finalises once).

`WatchedStream` and `AsyncWatchedStream` keep the client's type (`isinstance(s, openai.Stream)`),
every attribute is the client stream's, and the client's stream helpers (`ChatCompletionStream`,
`MessageStream`, `ResponseStream`) work on them. Iterating one runs the watching generator
(`sdk.send.stream_watch`). It finalises exactly once (the call span ends, the HTTP response is closed) on
exhaustion, error, `close()`, `with` exit, `response.close()` (what the helpers' `close()` calls:
`stream.response` is the client's own `httpx2.Response`, its `close` hooked), and when the caller
drops it, half-read or never read. Nothing a proxy holds refers back to it, and the hook holds weak
references only, so reference counting alone frees a dropped stream: its span ends at `del stream`,
not whenever the cycle collector runs.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from types import AsyncGeneratorType, GeneratorType
from typing import Any, Protocol

import wrapt

from sdk import compat

logger = logging.getLogger(__name__)


class Finishing(Protocol):
    """What a proxy needs of the stream's watch: end its telemetry, once."""

    finalized: bool

    def finish(self, error: BaseException | None) -> None: ...


class Upstream:
    """The client stream being read, and its iterator."""

    __slots__ = ("events", "stream")

    def __init__(self, stream: Any, events: Any) -> None:
        self.stream = stream
        self.events = events


class _Closer:
    """Ends one stream: its watching generator, the client stream, the telemetry (sync). Where the
    caller holds a copy of the client's stream (`_Watched.of`), whose own `close()` the caller's close
    already ran, it closes the response alone, so the client's `close()` runs as often as bare."""

    __slots__ = ("__weakref__", "closing", "copied", "events", "upstream", "watch")

    def __init__(
        self, upstream: Upstream, events: GeneratorType[Any, None, None], watch: Finishing, copied: bool = False
    ) -> None:
        self.upstream, self.events, self.watch, self.copied = upstream, events, watch, copied
        self.closing = False

    def busy(self) -> bool:
        """Whether a close of the response now is the stream's own: this closer's, or the client's at
        the end of a read the watching loop is in."""
        return self.closing or self.events.gi_running

    def close(self) -> None:
        self.closing = True
        try:
            if self.copied:  # first, so the watching generator's `finally` finds it closed
                response = self.upstream.stream.response
                type(response).close(response)
            try:
                self.events.close()  # a suspended guard runs its `finally`; one never started has none
            except ValueError:  # being read in another thread: closing the response ends that read
                pass
            if not self.copied:
                self.upstream.stream.close()
            self.watch.finish(None)
        finally:
            self.closing = False

    def drop(self) -> None:
        """The caller let go of the stream: close it, raising nothing."""
        if self.watch.finalized and self.upstream.stream.response.is_closed:
            return
        try:
            self.close()
        except Exception:
            logger.debug("kvwise: closing a dropped stream failed", exc_info=True)


class _AsyncCloser:
    """Async twin of `_Closer`."""

    __slots__ = ("__weakref__", "closing", "copied", "events", "upstream", "watch")

    def __init__(
        self, upstream: Upstream, events: AsyncGeneratorType[Any, None], watch: Finishing, copied: bool = False
    ) -> None:
        self.upstream, self.events, self.watch, self.copied = upstream, events, watch, copied
        self.closing = False

    def busy(self) -> bool:
        return self.closing or self.events.ag_running

    async def close(self) -> None:
        self.closing = True
        try:
            if self.copied:
                response = self.upstream.stream.response
                await type(response).aclose(response)
            try:
                await self.events.aclose()
            except RuntimeError:  # being read by another task: closing the response ends that read
                pass
            if not self.copied:
                await self.upstream.stream.close()
            self.watch.finish(None)
        finally:
            self.closing = False

    def drop(self) -> None:
        """The caller let go of the stream: end the telemetry now and close the response on the
        running loop. (A watching generator already started is also closed by asyncio's own async
        generator finaliser; closing twice is harmless.)"""
        try:
            self.watch.finish(None)
            if self.upstream.stream.response.is_closed:
                return
            asyncio.get_running_loop().create_task(self.upstream.stream.close())
        except RuntimeError:  # no running loop (interpreter shutdown): the client's own cleanup remains
            pass
        except Exception:
            logger.debug("kvwise: closing a dropped stream failed", exc_info=True)


class _Absent:
    """A method `wrapt.ObjectProxy` defines that the proxied stream lacks (the sync stream's
    `__aenter__`, the async one's `__enter__` and `__iter__`): reading it raises `AttributeError`,
    so `hasattr` answers as it would for the client's stream."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        raise AttributeError(self._name)


def _close_hook(response: Any, closer: _Closer) -> Callable[[], None]:
    """`response.close` that closes the whole watched stream when its caller calls it (the client's
    stream helpers close the response they read at their start, not the stream), and the response
    alone when the stream closes it itself (`_Closer.busy`)."""
    owner, own = weakref.ref(closer), weakref.ref(response)

    def close() -> None:
        closer, response = owner(), own()
        if closer is not None and not closer.busy():
            closer.close()
        elif response is not None:
            type(response).close(response)

    return close


def _aclose_hook(response: Any, closer: _AsyncCloser) -> Callable[[], Awaitable[None]]:
    """Async twin of `_close_hook`: `response.aclose`."""
    owner, own = weakref.ref(closer), weakref.ref(response)

    async def aclose() -> None:
        closer, response = owner(), own()
        if closer is not None and not closer.busy():
            await closer.close()
        elif response is not None:
            await type(response).aclose(response)

    return aclose


class _Watched(wrapt.ObjectProxy):  # type: ignore[type-arg]  # wrapt before 2.0 has no ObjectProxy[...] at runtime
    """What the sync and the async proxies share: their closer, the response, and the drop."""

    _self_closer_type: type[_Closer] | type[_AsyncCloser]
    _self_close_name: str  # the response's close method the client's stream helpers call
    _self_close_hook: Callable[[Any, Any], Any]  # makes that method close this stream (a staticmethod)

    @classmethod
    def of(cls, stream: Any, upstream: Upstream, events: Any, watch: Finishing) -> Any:
        """The caller's stream: this proxy of `stream`; or, for a client whose stream class takes no
        proxy (`compat.stream_takes_proxy`), a copy of `stream` of the client's own class reading
        `events`, closed by its response's close as the proxy is, and dropped as the proxy is (the
        finaliser holds the closer)."""
        if compat.stream_takes_proxy(stream):
            return cls(stream, upstream, events, watch)
        closer = cls._self_closer_type(upstream, events, watch, copied=True)
        response = stream.response
        setattr(response, cls._self_close_name, cls._self_close_hook(response, closer))
        copied = compat.stream_reading(stream, events)
        weakref.finalize(copied, closer.drop)
        return copied

    def __init__(self, stream: Any, upstream: Upstream, events: Any, watch: Finishing) -> None:
        super().__init__(stream)
        self._self_events = events
        self._self_closer: _Closer | _AsyncCloser = self._self_closer_type(upstream, events, watch)
        self._self_response: Any = None  # the response whose close is hooked

    @property
    def response(self) -> Any:
        """The client's response, of its own type, whose closing closes this stream."""
        response = self.__wrapped__.response
        if self._self_response is not response:
            self._self_response = response
            setattr(response, self._self_close_name, self._self_close_hook(response, self._self_closer))
        return response

    def __del__(self) -> None:
        try:
            closer = self._self_closer
        except (AttributeError, ValueError):  # never initialised
            return
        closer.drop()


class WatchedStream(_Watched):
    """A client's sync stream (`openai.Stream`, `anthropic.Stream`) as the caller sees it under kvwise.

    Like the bare stream, `iter()` gives a new generator over the one shared event iterator, which
    holds the stream while a loop runs (so a stream is dropped only once nothing, loop included,
    refers to it), and a loop left with `break` can be taken up again. Per event it costs one
    generator step: reading an attribute of a `wrapt` proxy costs far more, so none is read per event.
    """

    _self_closer_type = _Closer
    _self_close_name = "close"
    _self_closer: _Closer

    _self_close_hook = staticmethod(_close_hook)

    def __iter__(self) -> Iterator[Any]:
        return _iterate(self)

    def __next__(self) -> Any:
        return self._self_events.__next__()

    def close(self) -> None:
        """Close the response and end the call's telemetry (the answer, if unfinished, is abandoned)."""
        self._self_closer.close()

    def __enter__(self) -> WatchedStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._self_closer.close()

    __aenter__, __aexit__ = _Absent(), _Absent()


class AsyncWatchedStream(_Watched):
    """A client's async stream (`openai.AsyncStream`, `anthropic.AsyncStream`) under kvwise."""

    _self_closer_type = _AsyncCloser
    _self_close_name = "aclose"
    _self_closer: _AsyncCloser

    _self_close_hook = staticmethod(_aclose_hook)

    async def close(self) -> None:
        """Close the response and end the call's telemetry (the answer, if unfinished, is abandoned)."""
        await self._self_closer.close()

    aclose = close  # openai's `AsyncStream` has both

    def __aiter__(self) -> AsyncIterator[Any]:
        return _aiterate(self)

    def __anext__(self) -> Any:
        return self._self_events.__anext__()

    async def __aenter__(self) -> AsyncWatchedStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._self_closer.close()

    __enter__, __exit__, __iter__ = _Absent(), _Absent(), _Absent()


def _iterate(stream: WatchedStream) -> Iterator[Any]:
    """The events of `stream`, holding it while a loop reads them (the bare stream's `__iter__`)."""
    for event in stream._self_events:  # noqa: UP028 (`yield from` would close the shared events with this loop)
        yield event


async def _aiterate(stream: AsyncWatchedStream) -> AsyncIterator[Any]:
    """Async twin of `_iterate` (the bare stream's `__aiter__`)."""
    async for event in stream._self_events:
        yield event
