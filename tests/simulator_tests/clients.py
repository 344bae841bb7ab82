"""Helpers that let one parametrised test drive the sync and the async clients alike."""

from __future__ import annotations

import inspect
from typing import Any

REPLY = "Prefill reads the prompt once; decode writes one token at a time."
REPLY_TOKENS = 14  # see tests.simulator.tokens: words and punctuation, each with the space before it


async def resolve(value: Any) -> Any:
    """The value of a client call, awaited when the client is async."""
    return await value if inspect.isawaitable(value) else value


async def collect(stream: Any, stop_after: int | None = None) -> list[Any]:
    """The items of a sync or async stream (the first `stop_after`, then the stream is closed)."""
    items: list[Any] = []
    if hasattr(stream, "__aiter__"):
        async for item in stream:
            items.append(item)
            if stop_after is not None and len(items) >= stop_after:
                break
        await stream.close()
    else:
        for item in stream:
            items.append(item)
            if stop_after is not None and len(items) >= stop_after:
                break
        stream.close()
    return items


async def final_of(manager: Any, method: str) -> Any:
    """`get_final_message()` / `get_final_response()` of a sync or async stream manager."""
    if hasattr(manager, "__aenter__"):
        async with manager as stream:
            return await getattr(stream, method)()
    with manager as stream:
        return getattr(stream, method)()

