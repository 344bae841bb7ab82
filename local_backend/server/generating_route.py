"""The one skeleton every generating route runs, so each route writes only what differs: its `Plan`.

    read_json ──▶ prepare (offload thread: parse, check the model, render, tokenize) ──▶ Plan
    Plan.sampling.params ──▶ the grammar compiled ──▶ per_choice ──▶ Backend.start_choices ──▶ respond

The wire format is made (`Plan.wire`) only once the choices have started: the engine refuses token
ids outside the vocabulary, which a format echoing the prompt could not decode.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from local_backend.sampling.sampling_params import LogitsProcessor
from local_backend.server.bounds import read_json
from local_backend.server.constrained import Constraint
from local_backend.server.generation import Backend
from local_backend.server.sampling import Sampling, per_choice
from local_backend.server.streaming import WireFormat, respond


@dataclass(frozen=True, slots=True)
class Plan:
    """What one generating request asks: its prompt, sampling, constraint, choices, and wire format."""

    ids: list[int]
    sampling: Sampling
    constraint: Constraint | None
    stream: bool
    wire: Callable[[], WireFormat]
    """Makes the response's format (called once, after the choices have started)."""
    n: int = 1
    recorders: Sequence[LogitsProcessor] = ()
    """One logprobs recorder per choice, when logprobs are asked for."""
    bias: LogitsProcessor | None = None


Prepare = Callable[[Backend, dict[str, Any]], Plan]
"""A route's own step, on an offload thread: the body checked into a `Plan`."""


async def serve_generation(request: Request, prepare: Prepare) -> Response:
    """Read the body, plan it (`prepare`), start one generation per choice, and answer, whole or streamed."""
    backend = Backend.of(request)
    engine = backend.engine
    body = await read_json(request, backend.offload)
    plan = await backend.offload.run(prepare, backend, body)
    params = plan.sampling.params(len(plan.ids), engine.max_model_len, engine.sampling_defaults)
    grammar = await backend.grammars.compile(plan.constraint)
    choices = per_choice(params, plan.n, recorders=plan.recorders, bias=plan.bias, grammar=grammar)
    generations = backend.start_choices(request, plan.ids, choices)
    return await respond(request, generations, plan.wire(), plan.stream)
