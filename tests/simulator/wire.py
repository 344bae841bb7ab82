"""What the three API modules share: the parsed request, its outcome, SSE events, body checks.

Each API module (`openai_chat`, `openai_responses`, `anthropic_messages`) provides an `GenerationEndpoint`: `parse`
turns a request body into a `Job` (or raises `SimulatedError` with the API's own wording), and `encoder`
returns an `Encoder` that renders one `ServedJob` either as a JSON body or as SSE events (opening,
one batch per token, closing). The server drives both from the same generation core.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

from .cache import CacheUse
from .decode import Decoded, DecodeParams
from .errors import Flavour, SimulatedError
from .tokens import RenderedPrompt


@dataclass(frozen=True, slots=True)
class Job:
    """A parsed generation request; `body` is kept for API-specific options."""

    model: str
    prompt: RenderedPrompt
    decode: DecodeParams
    stream: bool
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ServedJob:
    """A served job: its cache accounting and decoded reply."""

    job: Job
    cache: CacheUse
    decoded: Decoded

    @property
    def prompt_tokens(self) -> int:
        return len(self.job.prompt)

    @property
    def output_tokens(self) -> int:
        return len(self.decoded.tokens)


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One server-sent event; `data` is JSON (or the literal `[DONE]`)."""

    data: str
    event: str | None = None

    @classmethod
    def of(cls, payload: dict[str, Any], event: str | None = None) -> SseEvent:
        return cls(json.dumps(payload, separators=(",", ":")), event)

    def encode(self) -> bytes:
        head = f"event: {self.event}\n" if self.event else ""
        return f"{head}data: {self.data}\n\n".encode()


class Encoder(Protocol):
    """Renders one outcome, as a whole or as a stream."""

    def complete(self) -> dict[str, Any]: ...
    def opening(self) -> list[SseEvent]: ...
    def token(self, text: str) -> list[SseEvent]: ...
    def closing(self) -> list[SseEvent]: ...


class GenerationEndpoint(Protocol):
    """One generation endpoint."""

    path: str
    flavour: Flavour

    def parse(self, body: dict[str, Any]) -> Job: ...
    def encoder(self, outcome: ServedJob) -> Encoder: ...


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def required(body: dict[str, Any], key: str, *kinds: type) -> Any:
    """`body[key]`, which must be present and of one of `kinds`, else a 400 naming the field."""
    value = body.get(key)
    if value is None:
        raise SimulatedError(400, f"{key}: Field required", param=key)
    if not isinstance(value, kinds):
        expected = " or ".join(kind.__name__ for kind in kinds)
        raise SimulatedError(400, f"{key}: expected {expected}, got {type(value).__name__}", param=key)
    return value


def token_cap(body: dict[str, Any], *keys: str, minimum: int = 1) -> int | None:
    """The smallest integer >= `minimum` given under any of `keys`, None when none is given."""
    caps = []
    for key in keys:
        value = body.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise SimulatedError(400, f"{key}: must be an integer >= {minimum}, got {value!r}", param=key)
        caps.append(value)
    return min(caps, default=None)


def stop_list(body: dict[str, Any], key: str, limit: int | None) -> tuple[str, ...]:
    """Stop sequences given as a string or a list of strings, at most `limit` of them."""
    value = body.get(key)
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise SimulatedError(400, f"{key}: expected a string or a list of strings", param=key)
    if limit is not None and len(stops) > limit:
        raise SimulatedError(400, f"{key}: at most {limit} stop sequences are allowed, got {len(stops)}", param=key)
    return tuple(stops)
