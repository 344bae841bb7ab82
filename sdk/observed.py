"""The call's telemetry record, also telling kvwise's own features when the answer starts and ends.

Adaptive caps learn from each answer's usage (`Call.learn_usage`) and fan-out followers go at their
leader's first chunk or end (`sdk.fanout`). Both must work without a tracer, and every path of a
send (a whole answer, a stream, a failure) drives the `CallRecord`, so they hang on it: `Observed`
stands in for the record only on calls that need it, forwarding everything else unchanged (the
per-chunk method is the record's own bound method: no extra call per chunk).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from sdk.call import Usage
from sdk.telemetry import CallRecord


class Observed:
    """`record`, with `release` called at the first chunk or the end (once is enough: it is
    idempotent) and `learn` told the usage of an answer that ended well."""

    __slots__ = ("_record", "_learn", "_release", "attempt", "chunk", "guard_tripped")

    def __init__(
        self, record: CallRecord, learn: Callable[[Usage], None] | None, release: Callable[[], None] | None
    ) -> None:
        self._record = record
        self._learn = learn
        self._release = release
        self.attempt = record.attempt
        self.chunk = record.chunk
        self.guard_tripped = record.guard_tripped

    @property
    def span(self) -> Any:
        return self._record.span

    @property
    def captures_content(self) -> bool:
        return self._record.captures_content

    def activate(self) -> AbstractContextManager[Any]:
        return self._record.activate()

    def first_chunk(self) -> None:
        if self._release is not None:
            self._release()
        self._record.first_chunk()

    def end(self, *, usage: Usage | None = None, error: BaseException | str | None = None,
            usage_estimated: bool = False, **facts: Any) -> None:
        if self._release is not None:
            self._release()
        if self._learn is not None and usage is not None and error is None and not usage_estimated:
            self._learn(usage)
        self._record.end(usage=usage, error=error, usage_estimated=usage_estimated, **facts)
