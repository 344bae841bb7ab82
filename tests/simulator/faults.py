"""Scripted faults: what the next requests get instead of (or during) a normal answer.

Faults queue up in the order they were scripted; each request takes the head of the queue, and an
entry scripted `times=N` serves N requests before the next entry's turn. A new kind of fault is a
new dataclass here plus its case in `ProviderSimulator._serve` (or in `respond` for faults that act
mid-answer); the queue does not care what it holds.
"""

from __future__ import annotations

import enum
import threading
from collections import deque
from dataclasses import dataclass

from .errors import SimulatedError


class CutMode(enum.Enum):
    """How a cut answer ends on the wire.

    END: the HTTP body ends properly (last chunk of a chunked stream, or a `Content-Length` that
    matches the cut JSON), so only the API's own final event is missing.
    DROP: the server closes the connection mid-body (FIN): the HTTP framing is incomplete.
    RESET: the server aborts the connection with a TCP RST mid-body.
    """

    END = "end"
    DROP = "drop"
    RESET = "reset"


@dataclass(frozen=True, slots=True)
class ErrorFault:
    """Answer with this API error (status, body in the API's shape, extra headers)."""

    error: SimulatedError


@dataclass(frozen=True, slots=True)
class ResetFault:
    """Abort the connection with a TCP RST before sending any byte of the answer."""


@dataclass(frozen=True, slots=True)
class CutFault:
    """Stop a stream after `after_tokens` content tokens without its final events (a JSON answer:
    after half its body), ending the connection as `mode` says."""

    after_tokens: int
    mode: CutMode

    def __post_init__(self) -> None:
        if self.after_tokens < 0:
            raise ValueError(f"after_tokens must be >= 0, got {self.after_tokens!r}")


@dataclass(frozen=True, slots=True)
class StallFault:
    """Pause `seconds` more before content token `at_token` (0: before the first event, or before a
    JSON answer), e.g. to trip a client's read timeout once."""

    seconds: float
    at_token: int = 0

    def __post_init__(self) -> None:
        if self.seconds < 0 or self.at_token < 0:
            raise ValueError(f"seconds and at_token must be >= 0, got {self.seconds!r}, {self.at_token!r}")


class EventKind(enum.Enum):
    """A malformed or unexpected SSE event slipped into a stream.

    BAD_JSON: a `data:` line whose JSON is cut off half-way; the stream then goes on normally.
    UNKNOWN: an event of a type the API does not define (`event: simulator.unknown`); the stream
    then goes on normally, so a client that skips unknown events completes the call.
    ERROR: the API's own mid-stream error event (OpenAI: a `data: {"error": ...}` chunk; Anthropic:
    `event: error` with an `overloaded_error` body); the HTTP body then ends properly.
    """

    BAD_JSON = "bad_json"
    UNKNOWN = "unknown"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class EventFault:
    """Send a `kind` event before content token `at_token` of a stream (0: right after the opening
    events). A JSON answer under it is sent normally: only streams have events."""

    kind: EventKind
    at_token: int = 0

    def __post_init__(self) -> None:
        if self.at_token < 0:
            raise ValueError(f"at_token must be >= 0, got {self.at_token!r}")


@dataclass(frozen=True, slots=True)
class HtmlFault:
    """Answer 200 with an HTML page instead of the API's JSON or SSE (a proxy's or captive portal's
    page): the request was accepted as far as the client can tell."""


@dataclass(frozen=True, slots=True)
class HoldFault:
    """The answer's prefill lasts until `release` is set (at most `timeout` seconds), then it is
    served, or, with `status`, fails with that error: a leader a test controls (`sdk.cache.fanout`)."""

    release: threading.Event
    timeout: float
    status: int | None = None


Fault = ErrorFault | ResetFault | CutFault | StallFault | EventFault | HtmlFault | HoldFault


class FaultQueue:
    """A thread-safe FIFO of faults, each for a number of requests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: deque[tuple[Fault, int]] = deque()

    def add(self, fault: Fault, times: int) -> None:
        if times < 1:
            raise ValueError(f"times must be >= 1, got {times!r}")
        with self._lock:
            self._queue.append((fault, times))

    def take(self) -> Fault | None:
        """The fault for the request now arriving, or None when none is scripted."""
        with self._lock:
            if not self._queue:
                return None
            fault, times = self._queue.popleft()
            if times > 1:
                self._queue.appendleft((fault, times - 1))
            return fault

    def clear(self) -> None:
        with self._lock:
            self._queue.clear()
