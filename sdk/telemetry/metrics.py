"""The GenAI client histograms and kvwise's counters, recorded once per call.

    gen_ai.client.token.usage                      {token}  per successful call, input and output (gen_ai.token.type)
    gen_ai.client.operation.duration               s        per call (error.type on failure)
    gen_ai.client.operation.time_to_first_chunk    s        per streamed call
    gen_ai.client.operation.time_per_output_chunk  s        per streamed call: (last - first) / (chunks - 1)
    kvwise.cache.read_tokens                       {token}  counter
    kvwise.cache.missed_tokens                     {token}  counter, with kvwise.cache.miss_cause
    kvwise.cost.usd                                USD      counter

Histograms carry the semconv explicit bucket boundaries as advice. The semconv records
time-per-chunk once per chunk after the first; kvwise records the call's mean once instead: a
histogram record costs microseconds, and a per-chunk cost on a 200-chunk stream would be most of the
SDK's overhead. The mean keeps the sum right for rate dashboards; the count is per call.

Every point carries the attributes the semconv requires (operation, provider, request model, and
`gen_ai.token.type` / `error.type` where they apply) and none of the merely recommended ones
(`gen_ai.response.model`, `server.*`): each attribute adds to the cost of every record in the
OpenTelemetry SDK (docs/benchmarks.md, `by_hand`), and the call span carries them all.
"""

from __future__ import annotations

from opentelemetry.context import get_current
from opentelemetry.metrics import Counter, Histogram, Meter

from sdk import semconv as sc
from sdk.telemetry.attributes import Attributes, Outcome

_NS_PER_S = 1e9
_INPUT, _OUTPUT = sc.TokenType.INPUT.value, sc.TokenType.OUTPUT.value


class Instruments:
    """The instruments of one wrapped client, created once from its meter."""

    __slots__ = ("cache_misses", "cache_reads", "cost", "duration", "per_chunk", "time_to_first_chunk", "token_usage")

    def __init__(self, meter: Meter) -> None:
        self.token_usage: Histogram = meter.create_histogram(
            sc.GEN_AI_CLIENT_TOKEN_USAGE,
            unit=sc.TOKEN_UNIT,
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=list(sc.TOKEN_BUCKETS),
        )
        self.duration: Histogram = self._seconds(
            meter, sc.GEN_AI_CLIENT_OPERATION_DURATION, "GenAI operation duration."
        )
        self.time_to_first_chunk: Histogram = self._seconds(
            meter, sc.GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK, "Time from the request to the first content chunk."
        )
        self.per_chunk: Histogram = self._seconds(
            meter,
            sc.GEN_AI_CLIENT_OPERATION_TIME_PER_OUTPUT_CHUNK,
            "Mean time per output chunk after the first, per call.",
        )
        self.cache_reads: Counter = meter.create_counter(
            sc.KVWISE_CACHE_READ_TOKENS,
            unit=sc.TOKEN_UNIT,
            description="Input tokens read from provider prefix caches.",
        )
        self.cache_misses: Counter = meter.create_counter(
            sc.KVWISE_CACHE_MISSED_TOKENS,
            unit=sc.TOKEN_UNIT,
            description="Input tokens the provider should have read from its cache and did not.",
        )
        self.cost: Counter = meter.create_counter(
            sc.KVWISE_COST_USD, unit=sc.USD_UNIT, description="Cost of calls at the price table's rates."
        )

    @staticmethod
    def _seconds(meter: Meter, name: str, description: str) -> Histogram:
        return meter.create_histogram(
            name,
            unit=sc.SECONDS_UNIT,
            description=description,
            explicit_bucket_boundaries_advisory=list(sc.DURATION_BUCKETS),
        )

    def record(self, outcome: Outcome, attributes: Attributes, duration_ns: int, per_chunk_ns: float | None) -> None:
        """Record one finished call; `attributes` are its operation, provider and request model.

        Every point gets the context read once here, which each record would otherwise read again."""
        context = get_current()
        if outcome.error_type:
            self.duration.record(duration_ns / _NS_PER_S, {**attributes, sc.ERROR_TYPE: outcome.error_type}, context)
        else:
            self.duration.record(duration_ns / _NS_PER_S, attributes, context)
        usage = outcome.end.usage
        if usage is not None:
            if not outcome.error_type:  # the conventions record token usage of successful operations only
                self.token_usage.record(usage.input_tokens, {**attributes, sc.GEN_AI_TOKEN_TYPE: _INPUT}, context)
                self.token_usage.record(usage.output_tokens, {**attributes, sc.GEN_AI_TOKEN_TYPE: _OUTPUT}, context)
            if usage.cache_read_tokens:
                self.cache_reads.add(usage.cache_read_tokens, attributes, context)
        if outcome.miss is not None:
            self.cache_misses.add(
                outcome.miss.missed, {**attributes, sc.KVWISE_CACHE_MISS_CAUSE: outcome.miss.cause}, context
            )
        if outcome.time_to_first_chunk_s is not None:
            self.time_to_first_chunk.record(outcome.time_to_first_chunk_s, attributes, context)
        if per_chunk_ns is not None:
            self.per_chunk.record(per_chunk_ns / _NS_PER_S, attributes, context)
        if outcome.cost is not None:
            self.cost.add(outcome.cost.total_usd, attributes, context)
