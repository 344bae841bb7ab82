"""Helpers that let one parametrised test drive the sync and the async clients alike (the SDK's tests
and the simulator's own)."""

from __future__ import annotations

import importlib
import inspect
import time
from collections.abc import Callable
from typing import Any

import pytest

LONG_SYSTEM = " ".join(
    f"Rule {i}: answer questions about prefill, decode and the KV cache precisely and briefly." for i in range(160)
)
DECODE_SECONDS_PER_TOKEN = 0.002
"""The simulator's pause per token where a test cuts or stops a stream: a real server decodes for
milliseconds per token, so it is still sending when the client hangs up, and sees it."""


async def resolve(value: Any) -> Any:
    """Await `value` if the async client returned an awaitable."""
    return await value if inspect.isawaitable(value) else value


async def collect(stream: Any, stop_after: int | None = None) -> list[Any]:
    """All events of a sync or async stream, or its first `stop_after`: then the stream is closed, as a
    caller who stops reading closes it."""
    items: list[Any] = []
    if hasattr(stream, "__aiter__"):
        async for item in stream:
            items.append(item)
            if stop_after is not None and len(items) >= stop_after:
                await stream.close()
                break
    else:
        for item in stream:
            items.append(item)
            if stop_after is not None and len(items) >= stop_after:
                stream.close()
                break
    return items


async def in_stream(manager: Any, read: Any) -> Any:
    """Enter a stream helper's manager (sync or async) and return what `read(stream)` gives, awaited
    where the async helpers give an awaitable."""
    if hasattr(manager, "__aenter__"):
        async with manager as stream:
            return await resolve(read(stream))
    with manager as stream:
        return await resolve(read(stream))


CONDITION_DEADLINE_SECONDS = 120.0  # how long a scripted condition may take before the test gives up on it


def until(condition: Callable[[], bool]) -> None:
    """Wait for `condition` (a step of the script, not a timing assertion)."""
    deadline = time.monotonic() + CONDITION_DEADLINE_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the scripted condition never came true")
        time.sleep(0.002)


def require(client: Any, path: str) -> Any:
    """The resource at dotted `path` of `client`; the test is skipped where the installed release has
    none (`beta.responses`, `responses.input_tokens` came with openai 2.x)."""
    resource = client
    for name in path.split("."):
        resource = getattr(resource, name, None)
        if resource is None:
            pytest.skip(f"the installed {type(client).__module__.partition('.')[0]} has no {path}")
    return resource


def http_library(package: Any) -> Any:
    """The HTTP library the installed client package sends with (httpx2 from openai 3.x and anthropic
    1.x, httpx before): an older release lets its transport errors escape a stream (`sdk.compat._breaks`)."""
    base = importlib.import_module(f"{package.__name__}._base_client")
    return getattr(base, "httpx2", None) or base.httpx


def connection_errors(package: Any) -> tuple[type[Exception], ...]:
    """What the installed client raises for a stream whose connection breaks: its `APIConnectionError`,
    or its transport's error where the release lets that escape (`http_library`)."""
    return package.APIConnectionError, http_library(package).TransportError


def anthropic_traces_itself() -> bool:
    """Whether the installed anthropic traces its own calls (`open_telemetry=`, from 2.x)."""
    import anthropic

    return "open_telemetry" in inspect.signature(anthropic.Anthropic.__init__).parameters
