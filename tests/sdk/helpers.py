"""Helpers of the SDK tests that run one body against sync and async clients."""

from __future__ import annotations

import inspect
from typing import Any

LONG_SYSTEM = " ".join(
    f"Rule {i}: answer questions about prefill, decode and the KV cache precisely and briefly." for i in range(160)
)


async def resolve(value: Any) -> Any:
    """Await `value` if the async client returned an awaitable."""
    return await value if inspect.isawaitable(value) else value


async def collect(stream: Any) -> list[Any]:
    """All events of a sync or async stream."""
    if hasattr(stream, "__aiter__"):
        return [event async for event in stream]
    return list(stream)


async def in_stream(manager: Any, read: Any) -> Any:
    """Enter a stream helper's manager (sync or async) and return what `read(stream)` gives, awaited
    where the async helpers give an awaitable."""
    if hasattr(manager, "__aenter__"):
        async with manager as stream:
            return await resolve(read(stream))
    with manager as stream:
        return await resolve(read(stream))
