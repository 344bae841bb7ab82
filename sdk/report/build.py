"""One report: every number, table row and finding, computed once from the calls."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sdk._constants import REPORT_TOP_CONVERSATIONS
from sdk.report.families import FamilyRow, family_lines, family_rows
from sdk.report.findings import findings
from sdk.report.misses import MissRow, miss_rows
from sdk.report.numbers import (
    ConversationStats,
    HitPoint,
    ModelCost,
    ModelDecode,
    PrefillFit,
    conversation_stats,
    hit_series,
    model_costs,
    model_decode,
    prefill_fit,
)
from sdk.report.spans import ReportedCall


@dataclass(frozen=True, slots=True)
class Report:
    calls: tuple[ReportedCall, ...]
    fit: PrefillFit | None
    hits: dict[str, list[HitPoint]]
    costs: tuple[ModelCost, ...]
    decode: tuple[ModelDecode, ...]
    conversations: tuple[ConversationStats, ...]
    findings: tuple[str, ...]
    misses: tuple[MissRow, ...] = ()
    families: tuple[FamilyRow, ...] = ()


def build(records: Sequence[ReportedCall], top: int = REPORT_TOP_CONVERSATIONS) -> Report:
    """The report of `records` (the wrapped calls, see `sdk.report.spans.calls`)."""
    fit, costs, decode = prefill_fit(records), model_costs(records), model_decode(records)
    conversations = conversation_stats(records, top)
    misses = miss_rows(records)
    return Report(
        tuple(records),
        fit,
        hit_series(records),
        tuple(costs),
        tuple(decode),
        tuple(conversations),
        tuple(findings(conversations, costs, decode, fit, misses)),
        tuple(misses),
        tuple(family_rows(records)),
    )


def summary(report: Report) -> str:
    """The short text the CLI prints: totals, the findings, then per prompt family the stable prefix kept."""
    spend = sum(model.cost.total_usd for model in report.costs)
    saved = sum(model.cost.saved_usd for model in report.costs)
    missed = sum(row.tokens for row in report.misses if row.by_provider)
    lines = [
        f"{len(report.calls)} calls, ${spend:.4f} spent, ${saved:.4f} saved by cache reads, "
        f"{missed} cached tokens the provider missed"
    ]
    lines += [f"- {finding}" for finding in report.findings]
    lines += family_lines(report.families)
    return "\n".join(lines)
