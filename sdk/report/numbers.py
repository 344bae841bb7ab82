"""The report's numbers, as pure functions of `ReportedCall`s: the physics first, the money second.

The report groups calls by conversation, the calls kvwise compares a call's prefix with to name its
cache breaks: the calls of one `gen_ai.conversation.id` where the app names it, else those of one
model (the prefix tracker's own key is the API and the model of one wrapped client).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass

from sdk.report.spans import ReportedCall
from sdk.telemetry.pricing import Cost


@dataclass(frozen=True, slots=True)
class PrefillFit:
    """TTFT = intercept + slope x uncached input tokens, fitted by least squares over `points` calls."""

    slope_s_per_token: float
    intercept_s: float
    points: int

    @property
    def seconds_per_1k(self) -> float:
        return self.slope_s_per_token * 1000


@dataclass(frozen=True, slots=True)
class ModelCost:
    """One model's spend split by token kind (its calls' costs summed), and decode's share of it."""

    model: str
    calls: int
    cost: Cost

    @property
    def decode_share(self) -> float:
        return self.cost.output_usd / self.cost.total_usd if self.cost.total_usd else 0.0

    @property
    def input_usd(self) -> float:
        """All input spend: uncached input, cache reads and cache writes."""
        return self.cost.input_usd + self.cost.cached_input_usd + self.cost.cache_write_usd

    @property
    def output_to_input(self) -> float | None:
        """Output spend over input spend (None without input spend): the finance question, in one number."""
        return self.cost.output_usd / self.input_usd if self.input_usd else None


@dataclass(frozen=True, slots=True)
class ModelDecode:
    """One model's decode speed (median over streamed calls: the effective speed, speculation
    included), its loop-guard cuts, and the share of drafted tokens its server's speculative
    decoding kept (None where none ran)."""

    model: str
    tokens_per_s: float | None
    output_lengths: tuple[int, ...]
    guard_cuts: int
    guard_tokens_saved: int
    draft_acceptance: float | None = None


@dataclass(frozen=True, slots=True)
class ConversationStats:
    """One conversation: its spend, hit ratio, breaks and their most frequent cause and place."""

    conversation: str
    calls: int
    spend_usd: float
    hit_ratio: float
    breaks: int
    top_cause: str | None
    top_cause_count: int
    top_break_at: str | None


@dataclass(frozen=True, slots=True)
class HitPoint:
    """One call of a conversation's hit-ratio series; `cause` is set where the cache broke."""

    start_ns: int
    hit_ratio: float
    cause: str | None


def prefill_fit(records: Sequence[ReportedCall]) -> PrefillFit | None:
    """The least-squares line of TTFT on uncached input tokens (None below two distinct sizes)."""
    points = [(record.uncached_input_tokens, record.ttft_s) for record in records if record.ttft_s is not None]
    if len({x for x, _ in points}) < 2:
        return None
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in points)
    slope = sxy / sxx
    return PrefillFit(slope, mean_y - slope * mean_x, n)


def hit_ratio(records: Sequence[ReportedCall]) -> float:
    """Cache-read tokens over all input tokens of `records` (0 without input)."""
    total = sum(record.input_tokens for record in records)
    return sum(record.cache_read_tokens for record in records) / total if total else 0.0


def cause_of(record: ReportedCall) -> str | None:
    """A break's label: kvwise's cause, with the provider's beside it when it gave one."""
    if record.break_cause and record.break_cause_server:
        return f"{record.break_cause} (server: {record.break_cause_server})"
    return record.break_cause or (f"server: {record.break_cause_server}" if record.break_cause_server else None)


def by_conversation(records: Sequence[ReportedCall]) -> dict[str, list[ReportedCall]]:
    conversations: dict[str, list[ReportedCall]] = defaultdict(list)
    for record in records:
        conversations[record.conversation].append(record)
    return dict(conversations)


def hit_series(records: Sequence[ReportedCall]) -> dict[str, list[HitPoint]]:
    """Each conversation's hit ratio call by call, in time order, with its breaks."""
    return {
        conversation: [HitPoint(r.start_ns, hit_ratio([r]), cause_of(r)) for r in calls]
        for conversation, calls in by_conversation(records).items()
    }


def model_costs(records: Sequence[ReportedCall]) -> list[ModelCost]:
    """The cost split per model, most expensive first."""
    models: dict[str, list[ReportedCall]] = defaultdict(list)
    for record in records:
        models[record.model].append(record)
    costs = [ModelCost(model, len(calls), summed(r.cost for r in calls)) for model, calls in models.items()]
    return sorted(costs, key=lambda spend: (-spend.cost.total_usd, spend.model))


def summed(costs: Iterable[Cost]) -> Cost:
    """The costs added field by field."""
    parts = [astuple(cost) for cost in costs]
    return Cost(*(sum(column) for column in zip(*parts))) if parts else Cost(0.0, 0.0, 0.0, 0.0, 0.0)


def model_decode(records: Sequence[ReportedCall]) -> list[ModelDecode]:
    """Decode speed and output lengths per model, by name."""
    models: dict[str, list[ReportedCall]] = defaultdict(list)
    for record in records:
        models[record.model].append(record)
    result = []
    for model in sorted(models):
        calls = models[model]
        speeds = sorted(r.output_tokens / r.decode_s for r in calls if r.decode_s and r.output_tokens)
        cuts = [r for r in calls if r.guard]
        drafted = sum(r.draft_tokens for r in calls)
        result.append(
            ModelDecode(
                model,
                speeds[len(speeds) // 2] if speeds else None,
                tuple(r.output_tokens for r in calls),
                len(cuts),
                sum(r.guard_tokens_saved for r in cuts),
                sum(r.draft_accepted_tokens for r in calls) / drafted if drafted else None,
            )
        )
    return result


def conversation_stats(records: Sequence[ReportedCall], top: int) -> list[ConversationStats]:
    """The `top` conversations by spend, with their hit ratio and most frequent break cause."""
    stats = []
    for conversation, calls in by_conversation(records).items():
        broken = [r for r in calls if r.broke]
        causes = Counter(_cause_key(r) for r in broken)
        top_cause, count = causes.most_common(1)[0] if causes else (None, 0)
        places = Counter(r.break_at for r in broken if r.break_at and _cause_key(r) == top_cause)
        stats.append(
            ConversationStats(
                conversation,
                len(calls),
                sum(r.cost_usd for r in calls),
                hit_ratio(calls),
                len(broken),
                top_cause,
                count,
                places.most_common(1)[0][0] if places else None,
            )
        )
    return sorted(stats, key=lambda s: (-s.spend_usd, s.conversation))[:top]


def _cause_key(record: ReportedCall) -> str:
    """A break's cause for counting: kvwise's own, else the provider's (a broken record has one)."""
    return record.break_cause or f"server: {record.break_cause_server}"
