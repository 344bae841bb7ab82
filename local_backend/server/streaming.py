"""The one streaming loop both wire formats share, and the response that owns it.

A route checks its request, starts a `Generation` and hands it to `respond` with its `WireFormat`:
non-streamed, the whole body once the request finishes; streamed, `text/event-stream` built from
the format's opening, per-delta and closing events. The response closes the generation however
the stream ends, so a client that hangs up aborts its request and frees its blocks at once.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Send

from local_backend.outputs import Completion
from local_backend.server._constants import SSE_HEADERS
from local_backend.server.errors import ApiError, Flavor, error_body
from local_backend.server.generation import ClientGone, Generation, ensure_finished, run_to_completion
from local_backend.server.usage import Usage


class WireFormat(Protocol):
    """How one API spells a response: whole, or as server-sent events."""

    flavor: Flavor

    def whole(self, completion: Completion) -> dict[str, Any]: ...

    def opening(self, usage: Usage) -> list[bytes]: ...

    def text(self, text: str) -> list[bytes]: ...

    def closing(self, completion: Completion) -> list[bytes]: ...

    def failure(self, body: dict[str, Any]) -> list[bytes]: ...


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event: an optional `event:` line and one `data:` line of compact JSON."""
    payload = b"data: " + json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"
    return payload if event is None else f"event: {event}\n".encode() + payload


async def respond(request: Request, generation: Generation, fmt: WireFormat, stream: bool) -> Response:
    if stream:
        return EventStreamResponse(generation, _events(generation, fmt))
    try:
        completion = await run_to_completion(request, generation)
    except ClientGone:
        return Response(status_code=204)  # nobody is listening; nothing more to do
    return JSONResponse(fmt.whole(completion))


async def _events(generation: Generation, fmt: WireFormat) -> AsyncIterator[bytes]:
    """The opening events wait for the first delta, which knows how the prompt met the cache."""
    opened = False
    async for delta in generation:
        if not opened:
            opened = True
            for chunk in fmt.opening(Usage.at_start(generation.prompt_tokens, delta)):
                yield chunk
        if delta.text:
            for chunk in fmt.text(delta.text):
                yield chunk
        if delta.completion is not None:
            try:
                chunks = fmt.closing(ensure_finished(delta.completion))
            except ApiError as error:
                chunks = fmt.failure(error_body(error, fmt.flavor))
            for chunk in chunks:
                yield chunk


class EventStreamResponse(StreamingResponse):
    """`text/event-stream` that closes its `Generation` when the stream ends, fails or is cancelled."""

    def __init__(self, generation: Generation, events: AsyncIterator[bytes]):
        super().__init__(events, media_type="text/event-stream", headers=SSE_HEADERS)
        self._generation = generation

    async def stream_response(self, send: Send) -> None:
        try:
            await super().stream_response(send)
        finally:
            await self._generation.aclose()

