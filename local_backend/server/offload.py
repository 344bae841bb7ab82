"""A request's CPU work off the event loop: decoding its JSON, parsing it, rendering and tokenizing its prompt.

One request once held the event loop for seconds (a count of a few MB of text: docs/benchmarks.md,
`by_hand`), and every other client, `/health` included, waited. Each such step now runs on one of a few worker threads
(`OFFLOAD_WORKERS`): tokenizing releases the GIL, and Python code (the chat template, the parsers)
gives the loop its turn every switch interval, so the loop keeps answering. Work beyond the
workers waits in a bounded queue (`OFFLOAD_MAX_WAITING`); past it a request is refused at once
(`ErrorKind.OVERLOADED`: 429 OpenAI, 529 Anthropic), as the engine's admission does. A slot is
held until its work ends, even when the client has gone: work cannot be interrupted once started.

    ids = await backend.offload.run(prompt_ids, tokenizer, messages, tools)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import Callable
from typing import Any, TypeVar

from local_backend.server.errors import ApiError, ErrorKind

T = TypeVar("T")


class Offload:
    """Worker threads for requests' CPU-bound steps, with a bounded number of steps in flight."""

    def __init__(self, workers: int, max_waiting: int):
        if workers < 1 or max_waiting < 0:
            raise ValueError(f"workers={workers} must be >= 1 and max_waiting={max_waiting} >= 0")
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="kvwise-request")
        self._capacity = workers + max_waiting
        self.in_flight = 0
        self.rejected = 0

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on a worker thread; its exception (an `ApiError`: the request's 400) is raised here."""
        if self.in_flight >= self._capacity:
            self.rejected += 1
            raise ApiError(f"the server is busy preparing {self.in_flight} requests: retry later", ErrorKind.OVERLOADED)
        loop = asyncio.get_running_loop()
        self.in_flight += 1
        work = self._pool.submit(functools.partial(fn, *args))
        work.add_done_callback(lambda _: loop.call_soon_threadsafe(self._leave))
        return await asyncio.wrap_future(work)

    def _leave(self) -> None:
        self.in_flight -= 1
