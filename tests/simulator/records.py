"""What the simulator records for tests to assert on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request as received: `headers` with lower-cased names, `body` the parsed JSON (None when
    the body is empty or not JSON), `raw` the exact bytes."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    raw: bytes


@dataclass(frozen=True, slots=True)
class StreamRecord:
    """One streamed answer once it ended.

    `tokens_sent`: content tokens written to the socket before the end; `events_sent`: SSE events
    written; `client_closed`: the client hung up before the stream ended; `completed`: the final
    events were sent.
    """

    path: str
    tokens_sent: int
    events_sent: int
    client_closed: bool
    completed: bool
