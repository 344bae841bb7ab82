"""The provider's cache misses: calls that read fewer tokens than kvwise expected it to (`sdk.cache.expected_reads`).

Kept apart from the breaks the prompt caused (`kvwise.prefix.break_cause`: the prompt changed, so
nothing was there to read): here the prefix was sent before and the provider read less of it.
Each cause is a row, in tokens and in dollars (the missed tokens at the call's uncached input
rate, which they were billed at instead of the cached one); the provider's own (`evicted`,
`breakpoint_ignored`) come first, then those kvwise can explain (`lifetime_passed`,
`under_minimum`, `other_endpoint`). A healthy run has no row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sdk.report.spans import ReportedCall
from sdk.semconv import MissCause

PROVIDER_CAUSES = frozenset({MissCause.EVICTED.value, MissCause.BREAKPOINT_IGNORED.value})
"""Misses that are the provider's (or a gateway's) doing, not the caller's."""


@dataclass(frozen=True, slots=True)
class MissRow:
    """The calls of one miss cause: how many, the tokens they missed and what those cost."""

    cause: str
    by_provider: bool
    calls: int
    tokens: int
    usd: float


def missed_usd(record: ReportedCall) -> float:
    """What a call paid for its missed tokens: at its uncached input rate (0 where it paid none)."""
    plain = record.input_tokens - record.cache_read_tokens - record.cache_write_tokens
    return record.missed_tokens * record.cost.input_usd / plain if plain > 0 else 0.0


def miss_rows(records: Sequence[ReportedCall]) -> list[MissRow]:
    """One row per miss cause: the provider's first, then by tokens missed."""
    rows: dict[str, list[ReportedCall]] = {}
    for record in records:
        if record.miss_cause is not None and record.missed_tokens:
            rows.setdefault(record.miss_cause, []).append(record)
    found = [
        MissRow(
            cause,
            cause in PROVIDER_CAUSES,
            len(calls),
            sum(r.missed_tokens for r in calls),
            sum(map(missed_usd, calls)),
        )
        for cause, calls in rows.items()
    ]
    return sorted(found, key=lambda row: (not row.by_provider, -row.tokens))
