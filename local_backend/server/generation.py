"""One request's life in the engine: admission against a bounded queue, its deltas, and its end.

The server never waits forever for a slot: `Admission` counts the requests it has handed to the
engine and refuses a new one at once (`ErrorKind.OVERLOADED`: 429 OpenAI, 529 Anthropic) when the
engine's batch (`max_num_seqs`) and `max_queue` waiting requests are all taken.

A `Generation` owns its engine stream: closing it, finishing, or the client hanging up aborts the
request, which returns its KV blocks to the pool at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from local_backend.engine import Engine
from local_backend.outputs import Completion, StreamDelta
from local_backend.sampling_params import SamplingParams
from local_backend.server._constants import OFFLOAD_MAX_WAITING, OFFLOAD_WORKERS
from local_backend.server.auth import tenant_of
from local_backend.server.constrained import Grammars
from local_backend.server.errors import ApiError, ErrorKind
from local_backend.server.offload import Offload


class ClientGone(Exception):
    """The client hung up before its answer was ready; nothing is left to send."""


@dataclass(slots=True)
class Admission:
    """Requests in the engine now, and how many were refused; touched only by the event loop."""

    capacity: int
    max_queue: int
    in_flight: int = 0
    rejected: int = 0
    hung_up: int = 0
    """Requests whose client hung up before their whole (non-streamed) answer was ready."""

    def enter(self) -> None:
        if self.in_flight >= self.capacity + self.max_queue:
            self.rejected += 1
            raise ApiError(
                f"the server is at capacity ({self.capacity} running, {self.max_queue} waiting): retry later",
                ErrorKind.OVERLOADED,
            )
        self.in_flight += 1

    def leave(self) -> None:
        self.in_flight -= 1


@dataclass(slots=True)
class Backend:
    """What every route needs: the engine, the served model's names, the admission queue, the grammars,
    the threads that prepare requests off the event loop (`offload`).

    `model_names[0]` is the name answers report; the others are aliases (`--served-model-name`).
    The app keeps it in its state; a route finds it with `Backend.of(request)`.
    """

    engine: Engine
    model_names: tuple[str, ...]
    max_queue: int = 0
    on_finish: Callable[[Completion], None] | None = None  # each finished request (the metrics)
    admission: Admission = field(init=False)
    grammars: Grammars = field(init=False)
    offload: Offload = field(init=False)

    def __post_init__(self) -> None:
        self.admission = Admission(self.engine.stats().max_num_seqs, self.max_queue)
        self.offload = Offload(OFFLOAD_WORKERS, OFFLOAD_MAX_WAITING)
        self.grammars = Grammars(self.engine.tokenizer, self.engine.config.vocab_size, sorted(self.engine.core.eos))

    @staticmethod
    def of(request: Request) -> Backend:
        """The backend of the app serving `request`."""
        backend: Backend = request.app.state.backend
        return backend

    @property
    def model_name(self) -> str:
        return self.model_names[0]

    def check_model(self, name: str | None) -> str:
        """The name answers report; an unknown name is a 404 (vLLM's rule), a missing one the first."""
        if name is not None and name not in self.model_names:
            raise ApiError(
                f"model: {name!r} does not exist; this server serves {list(self.model_names)}",
                ErrorKind.NOT_FOUND,
                param="model",
                code="model_not_found",
            )
        return self.model_name

    def start(self, request: Request, token_ids: list[int], params: SamplingParams) -> Generation:
        """Check the input with the engine, then take a slot (or refuse at once).

        The request's tenant (its API key's, see `auth`) salts its prefix-cache blocks.
        """
        try:
            deltas = self.engine.stream(token_ids, params, cache_salt=tenant_of(request))
        except ValueError as exc:
            raise ApiError(str(exc)) from None
        self.admission.enter()
        return Generation(deltas, self.admission, len(token_ids), self.on_finish)

    async def start_choices(self, request: Request, token_ids: list[int], params: Sequence[SamplingParams]) -> list[Generation]:
        """One generation per choice (`n`); if one is refused (a full queue), those started are closed first."""
        started: list[Generation] = []
        try:
            for choice in params:
                started.append(self.start(request, token_ids, choice))
        except ApiError:
            for generation in started:
                await generation.aclose()
            raise
        return started


class Generation:
    """An admitted request's `StreamDelta`s; the last carries the `Completion`.

    `aclose()` (idempotent) aborts the request if it is still running and frees its slot.
    """

    def __init__(
        self,
        deltas: AsyncIterator[StreamDelta],
        admission: Admission,
        prompt_tokens: int,
        on_finish: Callable[[Completion], None] | None = None,
    ):
        self._deltas = deltas
        self._admission: Admission | None = admission
        self._on_finish = on_finish
        self.prompt_tokens = prompt_tokens

    def __aiter__(self) -> Generation:
        return self

    async def __anext__(self) -> StreamDelta:
        delta = await self._deltas.__anext__()
        if delta.completion is not None:
            self._release()
            if self._on_finish is not None:
                self._on_finish(delta.completion)
        return delta

    async def aclose(self) -> None:
        self._release()
        await self._deltas.aclose()  # type: ignore[attr-defined]

    async def completion(self) -> Completion:
        """Drain the deltas; the finished request (an engine failure is a 500)."""
        async for delta in self:
            if delta.completion is not None:
                return ensure_finished(delta.completion)
        raise ApiError("the engine ended the request without a result", ErrorKind.INTERNAL)

    def _release(self) -> None:
        if self._admission is not None:
            self._admission.leave()
            self._admission = None


def ensure_finished(completion: Completion) -> Completion:
    """The completion, unless the engine failed it (a failed step) or shut down first: then a 500."""
    if completion.finish_reason == "error":
        raise ApiError("the engine failed while generating; see the server log", ErrorKind.INTERNAL)
    if completion.finish_reason == "abort":
        raise ApiError("the engine shut down before the answer was finished", ErrorKind.INTERNAL)
    return completion


async def run_to_completion(request: Request, generations: Sequence[Generation]) -> list[Completion]:
    """The finished requests (one per choice), or `ClientGone` (after aborting them) if the client hangs up first."""
    work: asyncio.Future[list[Completion]] = asyncio.ensure_future(
        asyncio.gather(*(generation.completion() for generation in generations))
    )
    gone = asyncio.ensure_future(_disconnected(request))
    answered = False
    try:
        racers: list[asyncio.Future[Any]] = [work, gone]
        await asyncio.wait(racers, return_when=asyncio.FIRST_COMPLETED)
        answered = work.done()
    finally:
        gone.cancel()
        if not work.done():
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
        for generation in generations:
            await generation.aclose()
    if not answered:  # a cancelled gather is not `cancelled()`: its result raises CancelledError
        raise ClientGone
    return work.result()


async def _disconnected(request: Request) -> None:
    """Return when the client disconnects (the body is read, so only `http.disconnect` can come)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
