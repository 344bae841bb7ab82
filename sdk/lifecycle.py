"""The life of one call after its request is built: attempts, the first content chunk, and one end.

How a call ended is published once, as a typed `CallEnd`, to the call's listeners: what kvwise's
features learn from an answer subscribe here (adaptive caps: its usage, `sdk.decode.adaptive_caps`;
fan-out followers: its first chunk or end, `sdk.cache.fanout`; cache diagnostics: its id,
`sdk.cache.diagnostics`), and the telemetry record is told last. No feature hangs on the telemetry, so
each works without a tracer, and each is found where it subscribes.

    lifecycle = Lifecycle(record, call.listeners)
    lifecycle.record.attempt(1); ...            # the telemetry's own per-attempt and per-chunk calls
    lifecycle.first_chunk()                     # listeners, then the record
    lifecycle.end(CallEnd(Ending.ANSWERED, usage=...))   # once: listeners, then the record
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, Protocol, TypeVar

from sdk.call import Usage

logger = logging.getLogger(__name__)


class Ending(StrEnum):
    """How a call ended."""

    ANSWERED = "answered"  # the server finished the answer (a whole response, or a stream to its final event)
    CUT = "cut"  # kvwise ended the stream: the loop guard or a client-side stop
    FAILED = "failed"  # the attempts ran out, the answer was not the API's, or the stream broke
    ABANDONED = "abandoned"  # the caller stopped reading the stream before its end (no failure)


# Not frozen: built on every call, and a frozen __init__ sets each field through object.__setattr__ (slower).
@dataclass(slots=True)
class CallEnd:
    """What is known when a call ends (read-only by convention: nothing changes it once built).

    `usage_estimated`: the server never reported the input tokens (`kvwise.usage.estimated`).
    `guard`, `tokens_saved`: the guard that cut the answer ("loop") and the tokens the cap still allowed.
    `end_unmarked`: a stream whose body ended cleanly without its end marker or a finish reason (an end,
    as the bare client has it, but the answer may be short: `kvwise.stream.end_marker=false`).
    `output_text`, `output_tool_calls`: the answer (semconv `tool_call` parts), only where content is
    captured. `cache_miss_reason`: the provider's own diagnosis of a cache miss (Anthropic's diagnostics).
    """

    ending: Ending
    usage: Usage | None = None
    usage_estimated: bool = False
    response_id: str | None = None
    response_model: str | None = None
    finish_reasons: tuple[str, ...] = ()
    timings: dict[str, float] | None = None
    output_text: str | None = None
    output_tool_calls: list[dict[str, Any]] | None = None
    error: BaseException | str | None = None  # a failed call's error, or its type's name
    service_tier: str | None = None
    system_fingerprint: str | None = None
    cache_miss_reason: str | None = None
    guard: str | None = None
    tokens_saved: int | None = None
    end_unmarked: bool = False

    @property
    def usage_to_learn(self) -> Usage | None:
        """The usage of an answer that ran its course (answered or cut) and was counted by the server
        (not one whose stream ended unmarked: it may have stopped short)."""
        if self.ending in (Ending.ANSWERED, Ending.CUT) and not self.usage_estimated and not self.end_unmarked:
            return self.usage
        return None


class CallListener(Protocol):
    """A feature told of a call's first content chunk and of its end (each at most once)."""

    def first_chunk(self) -> None: ...

    def ended(self, end: CallEnd) -> None: ...


class Record(Protocol):
    """The telemetry of the call (`sdk.telemetry.CallRecord`), told after the listeners."""

    def first_chunk(self, received_ns: int | None = None) -> None: ...

    def end(self, end: CallEnd) -> None: ...


R = TypeVar("R", bound=Record)


class Lifecycle(Generic[R]):
    """One call's first chunk and end, published to its `listeners`, then to its telemetry `record`."""

    __slots__ = ("_ended", "_first", "_listeners", "record")

    def __init__(self, record: R, listeners: Sequence[CallListener] = ()) -> None:
        self.record = record
        self._listeners = tuple(listeners)
        self._first = self._ended = False

    def first_chunk(self, received_ns: int | None = None) -> None:
        """The first content chunk reached the caller (`received_ns`: see `CallRecord.first_chunk`)."""
        if not self._first:
            self._first = True
            for listener in self._listeners:
                _tell(listener.first_chunk)
        self.record.first_chunk(received_ns)

    def end(self, end: CallEnd) -> None:
        """The call ended: tell every listener, then the record; later ends are ignored."""
        if self._ended:
            return
        self._ended = True
        for listener in self._listeners:
            _tell(listener.ended, end)
        self.record.end(end)


def _tell(method: Any, *args: Any) -> None:
    """A listener's failure is logged, never the call's (like the telemetry's own)."""
    try:
        method(*args)
    except Exception:
        logger.debug("kvwise: %s failed; the call goes on", getattr(method, "__qualname__", method), exc_info=True)
