"""The `data: [DONE]` that ends an OpenAI Chat or Completions stream (and a Responses stream, where a
server sends one), which the openai client reads and never hands on.

A stream the server ended explicitly is complete, as the bare client holds it, even with no
`finish_reason` in it; one whose body just stops is truncated (`sdk.send.stream_watch`). Only the
stream's SSE decoder sees the marker, so `DoneMarker` stands in for it and notes it on the way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

_DONE = "[DONE]"  # what the clients' streams stop at (`sse.data.startswith("[DONE]")`)


class DoneMarker:
    """The decoder of one client stream (`stream._decoder`), noting whether `[DONE]` went through it."""

    __slots__ = ("_decoder", "seen")

    def __init__(self, decoder: Any) -> None:
        self._decoder = decoder
        self.seen = False

    @classmethod
    def install(cls, stream: Any) -> DoneMarker | None:
        """Stand in for `stream`'s decoder before its first read; None where the client has none to
        stand in for (a release that decodes otherwise: its streams end at their finish reason)."""
        decoder = getattr(stream, "_decoder", None)
        if decoder is None or not hasattr(decoder, "iter_bytes"):
            return None
        marker = stream._decoder = cls(decoder)
        return marker

    def iter_bytes(self, iterator: Iterator[bytes]) -> Iterator[Any]:
        for sse in self._decoder.iter_bytes(iterator):
            if sse.data.startswith(_DONE):
                self.seen = True
            yield sse

    async def aiter_bytes(self, iterator: AsyncIterator[bytes]) -> AsyncIterator[Any]:
        async for sse in self._decoder.aiter_bytes(iterator):
            if sse.data.startswith(_DONE):
                self.seen = True
            yield sse
