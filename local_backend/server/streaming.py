"""The one streaming loop every wire format shares, and the response that owns it.

A route checks its request, starts one `Generation` per choice (`n`) and hands them to `respond`
with its `WireFormat`: non-streamed, the whole body once every choice finishes; streamed,
`text/event-stream` built from the format's opening, per-delta, per-choice finishing and closing
events, the choices' deltas interleaved as they come. However the response ends, the request's
generations are closed when its ASGI call returns (`generation.closing_generations`), so a client
that hangs up aborts its requests and frees their blocks and slots at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any, Final, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from local_backend.engine.outputs import Completion, StreamDelta
from local_backend.server.errors import ApiError, Flavor, error_body
from local_backend.server.generation import Backend, ClientGone, Generation, ensure_finished, run_to_completion
from local_backend.server.usage import RequestUsage

logger = logging.getLogger(__name__)

SSE_HEADERS: Final = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
"""Sent with every event stream: no cache and no proxy buffering may hold an event back."""


class WireFormat(Protocol):
    """How one API spells a response of one or more choices: whole, or as server-sent events."""

    flavor: Flavor

    def whole(self, completions: Sequence[Completion]) -> dict[str, Any]: ...

    def opening(self, usage: RequestUsage) -> list[bytes]: ...

    def delta(self, index: int, delta: StreamDelta) -> list[bytes]: ...

    def finished(self, index: int, completion: Completion) -> list[bytes]: ...

    def closing(self, completions: Sequence[Completion]) -> list[bytes]: ...

    def failure(self, body: dict[str, Any]) -> list[bytes]: ...


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event: an optional `event:` line and one `data:` line of compact JSON."""
    payload = b"data: " + json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"
    return payload if event is None else f"event: {event}\n".encode() + payload


async def respond(request: Request, generations: Sequence[Generation], fmt: WireFormat, stream: bool) -> Response:
    if stream:
        return StreamingResponse(_events(generations, fmt), media_type="text/event-stream", headers=SSE_HEADERS)
    try:
        completions = await run_to_completion(request, generations)
    except ClientGone:  # nobody is listening: counted, one quiet line, nothing more to do
        Backend.of(request).admission.hung_up += 1
        logger.debug("%s %s: the client hung up before its answer", request.method, request.url.path)
        return Response(status_code=204)
    return JSONResponse(fmt.whole(completions))


async def _events(generations: Sequence[Generation], fmt: WireFormat) -> AsyncIterator[bytes]:
    """The opening events wait for the first delta, which knows how the prompt met the cache."""
    opened = False
    done: dict[int, Completion] = {}
    async for index, delta in _interleaved(generations):
        if not opened:
            opened = True
            for chunk in fmt.opening(RequestUsage.at_start(generations[0].prompt_tokens, delta)):
                yield chunk
        for chunk in fmt.delta(index, delta):
            yield chunk
        if delta.completion is not None:
            try:
                completion = ensure_finished(delta.completion)
            except ApiError as error:
                for chunk in fmt.failure(error_body(error, fmt.flavor)):
                    yield chunk
                return
            done[index] = completion
            for chunk in fmt.finished(index, completion):
                yield chunk
    for chunk in fmt.closing([done[i] for i in range(len(generations))]):
        yield chunk


async def _interleaved(generations: Sequence[Generation]) -> AsyncIterator[tuple[int, StreamDelta]]:
    """(choice index, delta) from every generation, in arrival order, until each has finished."""
    if len(generations) == 1:
        async for delta in generations[0]:
            yield 0, delta
        return
    queue: asyncio.Queue[tuple[int, StreamDelta | BaseException]] = asyncio.Queue()

    async def pump(index: int, generation: Generation) -> None:
        try:
            async for delta in generation:
                queue.put_nowait((index, delta))
        except Exception as exc:  # handed to the consumer, which raises it in the response
            queue.put_nowait((index, exc))

    tasks = [asyncio.ensure_future(pump(i, g)) for i, g in enumerate(generations)]
    try:
        remaining = len(generations)
        while remaining:
            index, item = await queue.get()
            if isinstance(item, BaseException):
                raise item
            yield index, item
            remaining -= item.completion is not None
    finally:  # never awaits: a hung-up stream's scope cancels every await again
        for task in tasks:
            task.cancel()
