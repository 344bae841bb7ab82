"""One request's life in the engine: admission against a bounded queue, its deltas, and its end.

The server never waits forever for a slot: `Admission` counts the requests it has handed to the
engine and refuses a new one at once (`ErrorKind.OVERLOADED`: 429 OpenAI, 529 Anthropic) when the
engine's batch (`max_num_seqs`) and `max_queue` waiting requests are all taken.

A `Generation` owns its engine request and its admission slot. Both end in one place,
`Generation.close()` (synchronous, idempotent): when its last delta arrives, and, whichever way the
HTTP request ends (answered, refused, failed, cancelled, the client hanging up before, during or
after admission), when the request's ASGI call returns (`closing_generations`, around the app).
Nothing there awaits, so a cancelled stream (anyio cancels every await of its scope again) cannot
stop it part-way: a stream of 16 choices whose client hung up once closed only the first and
leaked 15 slots for the life of the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from starlette.requests import Request
from starlette.types import Scope

from local_backend.engine.engine import Engine
from local_backend.engine.outputs import Completion, StreamDelta
from local_backend.sampling.sampling_params import SamplingParams
from local_backend.server._constants import OFFLOAD_MAX_WAITING, OFFLOAD_WORKERS
from local_backend.server.auth import tenant_of
from local_backend.server.constrained import Grammars
from local_backend.server.errors import ApiError, ErrorKind
from local_backend.server.offload import Offload

GENERATIONS_SCOPE_KEY: Final = "kvwise.generations"
"""Where an HTTP request's ASGI scope lists the `Generation`s it started (`closing_generations`)."""

REQUEST_ID_PREFIX: Final = "http-"
"""Engine request ids of the server's generations (the engine's own are `req-N`)."""


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
                f"the server is at capacity: {self.in_flight} requests admitted, of {self.capacity} running "
                f"and {self.max_queue} waiting: retry later",
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
        request_id = REQUEST_ID_PREFIX + uuid.uuid4().hex
        try:
            deltas = self.engine.stream(token_ids, params, request_id=request_id, cache_salt=tenant_of(request))
        except ValueError as exc:
            raise ApiError(str(exc)) from None
        self.admission.enter()
        generation = Generation(
            deltas, lambda: self.engine.abort(request_id), self.admission, len(token_ids), self.on_finish
        )
        request.scope[GENERATIONS_SCOPE_KEY].append(generation)
        return generation

    def start_choices(
        self, request: Request, token_ids: list[int], params: Sequence[SamplingParams]
    ) -> list[Generation]:
        """One generation per choice (`n`); if one is refused (a full queue), those started are closed
        with the request (`closing_generations`)."""
        return [self.start(request, token_ids, choice) for choice in params]


class Generation:
    """An admitted request's `StreamDelta`s; the last carries the `Completion`.

    `close()` (idempotent, never awaits) aborts the engine request if it still runs and frees its
    slot; a closed generation yields nothing more. The engine stream itself ends with whoever
    iterates it (its cleanup only aborts, which `close` has done).
    """

    def __init__(
        self,
        deltas: AsyncIterator[StreamDelta],
        abort: Callable[[], None],
        admission: Admission,
        prompt_tokens: int,
        on_finish: Callable[[Completion], None] | None = None,
    ):
        self._deltas = deltas
        self._abort: Callable[[], None] | None = abort
        self._admission = admission
        self._on_finish = on_finish
        self.prompt_tokens = prompt_tokens

    def __aiter__(self) -> Generation:
        return self

    async def __anext__(self) -> StreamDelta:
        if self._abort is None:
            raise StopAsyncIteration
        delta = await self._deltas.__anext__()
        if delta.completion is not None:
            self.close()
            if self._on_finish is not None:
                self._on_finish(delta.completion)
        return delta

    def close(self) -> None:
        """The one place a generation ends: its engine request aborted (a no-op once finished), its slot freed."""
        abort, self._abort = self._abort, None
        if abort is None:
            return
        try:
            abort()
        finally:
            self._admission.leave()

    async def completion(self) -> Completion:
        """Drain the deltas; the finished request (an engine failure is a 500)."""
        async for delta in self:
            if delta.completion is not None:
                return ensure_finished(delta.completion)
        raise ApiError("the engine ended the request without a result", ErrorKind.INTERNAL)


@contextlib.contextmanager
def closing_generations(scope: Scope) -> Iterator[None]:
    """Around an HTTP request's ASGI call: every `Generation` it started is closed when the call
    returns or raises, however the request ended (see the module doc)."""
    started: list[Generation] = []
    scope[GENERATIONS_SCOPE_KEY] = started
    try:
        yield
    finally:
        for generation in started:
            generation.close()


def ensure_finished(completion: Completion) -> Completion:
    """The completion, unless the engine failed it (a failed step) or shut down first: then a 500."""
    if completion.finish_reason == "error":
        raise ApiError("the engine failed while generating; see the server log", ErrorKind.INTERNAL)
    if completion.finish_reason == "abort":
        raise ApiError("the engine shut down before the answer was finished", ErrorKind.INTERNAL)
    return completion


async def run_to_completion(request: Request, generations: Sequence[Generation]) -> list[Completion]:
    """The finished requests (one per choice), or `ClientGone` if the client hangs up first (its
    generations are closed with the request, `closing_generations`)."""
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
    if not answered:  # a cancelled gather is not `cancelled()`: its result raises CancelledError
        raise ClientGone
    return work.result()


async def _disconnected(request: Request) -> None:
    """Return when the client disconnects (the body is read, so only `http.disconnect` can come)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
