"""The call's telemetry record, also telling kvwise's own features when the answer starts and ends.

Adaptive caps learn from each answer's usage (`Call.learn_usage`) and fan-out followers go at their
leader's first chunk or end (`sdk.fanout`). Both must work without a tracer, and every path of a
send (a whole answer, a stream, a failure) drives the `CallRecord`, so they hang on it: `Observed`
stands in for the record only on calls that need it, forwarding everything else unchanged (the
per-chunk method is the record's own bound method: no extra call per chunk; any other name is
looked up on the record, so the record's surface can grow without this file).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sdk.call import Usage
from sdk.telemetry import CallRecord


class Observed:
    """`record`, with `release` called at the first chunk or the end (once is enough: it is
    idempotent) and `learn` told the usage of an answer that ended well (not failed, not abandoned
    by its caller half-way, not estimated)."""

    __slots__ = ("_record", "_learn", "_release", "chunk")

    def __init__(
        self, record: CallRecord, learn: Callable[[Usage], None] | None, release: Callable[[], None] | None
    ) -> None:
        self._record = record
        self._learn = learn
        self._release = release
        self.chunk = record.chunk

    def __getattr__(self, name: str) -> Any:  # the rest of the record's surface, as it is
        return getattr(self._record, name)

    def first_chunk(self, *args: Any, **kwargs: Any) -> None:
        if self._release is not None:
            self._release()
        self._record.first_chunk(*args, **kwargs)

    def end(self, **facts: Any) -> None:
        if self._release is not None:
            self._release()
        usage = facts.get("usage")
        ended_well = facts.get("error") is None and not facts.get("abandoned") and not facts.get("usage_estimated")
        if self._learn is not None and usage is not None and ended_well:
            self._learn(usage)
        self._record.end(**facts)
