"""OpenTelemetry for kvwise calls: one CLIENT span per call, prefill/decode phases, usage, cost, metrics.

Placeholder seam (the telemetry issue replaces it): `Telemetry.start(call)` returns a `CallRecord`
that the wrapper drives; this version records nothing.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

from sdk.call import Call, Usage
from sdk.policy import Policy


class CallRecord:
    """The telemetry of one call, driven by the wrapper and the stream guard."""

    def activate(self) -> AbstractContextManager[Any]:
        return nullcontext()

    def attempt(self, number: int) -> None: ...

    def first_chunk(self) -> None: ...

    def chunk(self) -> None: ...

    def guard_tripped(self, kind: str, tokens_saved: int | None) -> None: ...

    def end(
        self,
        *,
        usage: Usage | None = None,
        response_id: str | None = None,
        response_model: str | None = None,
        finish_reasons: tuple[str, ...] = (),
        timings: dict[str, float] | None = None,
        output_text: str | None = None,
        error: BaseException | str | None = None,
    ) -> None: ...


class Telemetry:
    def __init__(self, policy: Policy, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        self.policy = policy

    def start(self, call: Call, server: tuple[str | None, int | None]) -> CallRecord:
        return CallRecord()
