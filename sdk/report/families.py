"""Per prompt family, the share of the stable prefix kept: what moving the changing bytes saved.

A family is the calls of one prompt whatever changes in it (`kvwise.prompt.family`, see
`sdk.prompt.families`); each call after a family's first says which share of its system prompt's
stable bytes it kept, from the start, of the family's previous call (`kvwise.prompt.stable_kept`).
A family that keeps less than all of it has a changing line kvwise did not move (`sdk.lint` names
it) or one it learnt on that call. The families that keep least come first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sdk.report.spans import ReportedCall


@dataclass(frozen=True, slots=True)
class FamilyRow:
    """One prompt family: its calls, how many were compared with an earlier one, and the share of the
    stable prefix they kept (mean and lowest)."""

    family: str
    calls: int
    compared: int
    kept_mean: float
    kept_lowest: float


def family_rows(records: Sequence[ReportedCall]) -> list[FamilyRow]:
    """One row per family with a call compared with an earlier one, the least kept first."""
    calls: dict[str, int] = {}
    kept: dict[str, list[float]] = {}
    for record in records:
        if record.family is None:
            continue
        calls[record.family] = calls.get(record.family, 0) + 1
        if record.stable_kept is not None:
            kept.setdefault(record.family, []).append(record.stable_kept)
    rows = [
        FamilyRow(family, calls[family], len(shares), sum(shares) / len(shares), min(shares))
        for family, shares in kept.items()
    ]
    return sorted(rows, key=lambda row: (row.kept_mean, -row.calls))


def family_lines(rows: Sequence[FamilyRow]) -> list[str]:
    """The summary's lines for `rows`."""
    return [
        f"family {row.family}: {row.calls} calls, {row.kept_mean:.1%} of the stable prefix kept "
        f"(lowest {row.kept_lowest:.1%}, over {row.compared} compared)"
        for row in rows
    ]
