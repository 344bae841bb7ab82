"""Call and outcome -> GenAI semconv and kvwise span attributes (pure functions, no OpenTelemetry calls).

Kept apart from the span plumbing so another flavour of the same facts (OpenInference for Phoenix:
`llm.token_count.*`, `llm.model_name`, ...) is one more sibling module mapping the same `Call` and
`Outcome`, called beside these from `spans.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sdk import providers
from sdk import semconv as sc
from sdk.call import Call, Decisions, Miss, Provider, Usage
from sdk.errors import StreamTruncated
from sdk.lifecycle import CallEnd, Ending
from sdk.telemetry.pricing import Cost

if TYPE_CHECKING:  # a fan-out follower's wait is read here, never made
    from sdk.cache.fanout import Waited

Attributes = dict[str, Any]

_PARAM_ATTRIBUTES = {
    "max_tokens": sc.GEN_AI_REQUEST_MAX_TOKENS,
    "max_completion_tokens": sc.GEN_AI_REQUEST_MAX_TOKENS,
    "max_output_tokens": sc.GEN_AI_REQUEST_MAX_TOKENS,
    "temperature": sc.GEN_AI_REQUEST_TEMPERATURE,
    "top_p": sc.GEN_AI_REQUEST_TOP_P,
    "top_k": sc.GEN_AI_REQUEST_TOP_K,
    "frequency_penalty": sc.GEN_AI_REQUEST_FREQUENCY_PENALTY,
    "presence_penalty": sc.GEN_AI_REQUEST_PRESENCE_PENALTY,
    "seed": sc.GEN_AI_REQUEST_SEED,
}
"""Native scalar request parameters (of any of the three APIs) and the attribute each is reported under."""

_STOP_PARAMS = ("stop", "stop_sequences")
_SCALARS = (bool, int, float, str)
_CHAT = sc.OperationName.CHAT.value


@dataclass(slots=True)  # not frozen, as `CallEnd`: built on every call, never changed once built
class Outcome:
    """A call's end as told (`end`) and what the recorder measured or derived beside it: the input of
    every end-of-call attribute. Nothing of `end` is copied here.

    `finish_reasons`: the end's, or "unfinished" for a generation that started and then failed.
    """

    end: CallEnd
    cost: Cost | None
    finish_reasons: tuple[str, ...]
    error_type: str | None
    attempts: int
    chunks: int | None
    time_to_first_chunk_s: float | None
    break_cause_server: str | None = None
    miss: Miss | None = None  # read fewer cached tokens than kvwise expected (`sdk.cache.expected_reads`)


def provider_name(call: Call, host: str | None) -> str:
    """`gen_ai.provider.name`: the cloud platform hosting the model (Bedrock, Vertex AI, Azure AI
    Inference) if the host is one, else the provider, or an OpenAI-compatible server's semconv name."""
    return providers.semconv_name(call.provider, host)


def span_name(call: Call) -> str:
    """The call span's name: `"{gen_ai.operation.name} {gen_ai.request.model}"`, e.g. `chat gpt-4o`."""
    return f"{_CHAT} {call.model}" if call.model else _CHAT


def shape_attributes(call: Call, provider: str, server: tuple[str | None, int | None]) -> Attributes:
    """Request attributes shared by every call of the same model, stream flag and server (cacheable)."""
    attributes: Attributes = {
        sc.GEN_AI_OPERATION_NAME: _CHAT,
        sc.GEN_AI_PROVIDER_NAME: provider,
        sc.GEN_AI_REQUEST_MODEL: call.model,
    }
    if call.stream:  # set if and only if streaming
        attributes[sc.GEN_AI_REQUEST_STREAM] = True
    host, port = server
    if host:
        attributes[sc.SERVER_ADDRESS] = host
    if port:
        attributes[sc.SERVER_PORT] = port
    return attributes


def request_attributes(call: Call, shape: Attributes) -> Attributes:
    """Attributes known before sending: `shape`'s, then the request parameters and prefix facts."""
    attributes = dict(shape)
    for name, value in call.params.items():
        key = _PARAM_ATTRIBUTES.get(name)
        if key is not None:
            if isinstance(value, _SCALARS):
                attributes[key] = value
        elif name in _STOP_PARAMS:
            if isinstance(value, str):
                attributes[sc.GEN_AI_REQUEST_STOP_SEQUENCES] = (value,)
            elif isinstance(value, (list, tuple)) and value:
                attributes[sc.GEN_AI_REQUEST_STOP_SEQUENCES] = tuple(str(stop) for stop in value)
    tier = call.params.get("service_tier")
    if isinstance(tier, str) and call.provider != Provider.ANTHROPIC:
        attributes[sc.OPENAI_REQUEST_SERVICE_TIER] = tier
    if call.cap is not None:
        attributes[sc.KVWISE_OUTPUT_CAP_TOKENS] = call.cap.tokens
        attributes[sc.KVWISE_OUTPUT_CAP_SOURCE] = call.cap.source
    if call.decided.fingerprint:
        attributes[sc.KVWISE_PREFIX_FINGERPRINT] = call.decided.fingerprint
    if call.decided.break_at:
        attributes[sc.KVWISE_PREFIX_BREAK_AT] = call.decided.break_at
    if call.decided.break_cause:
        attributes[sc.KVWISE_PREFIX_BREAK_CAUSE] = call.decided.break_cause
    if call.decided.family:
        attributes[sc.KVWISE_PROMPT_FAMILY] = call.decided.family
    if call.decided.stable_kept is not None:
        attributes[sc.KVWISE_PROMPT_STABLE_KEPT] = call.decided.stable_kept
    if call.decided.changes:
        attributes[sc.KVWISE_CANONICAL_CHANGES] = tuple(call.decided.changes)
    if call.decided.store_outage is not None:
        attributes[sc.KVWISE_STATE_DEGRADED] = True
        attributes[sc.KVWISE_STATE_DEGRADED_REASON] = call.decided.store_outage
    return attributes


def add_sending_attributes(attributes: Attributes, decided: Decisions, waited: Waited | None) -> None:
    """What became known while sending, after the span started, written into `attributes` in place
    (the span's alone: the content event carries the attributes the span started with): the changes
    again once a refusal was taken back, and the output limit's refusal; a shared state store that
    failed (at the fan-out join, if not before); how long a fan-out follower waited, and for which leader."""
    if decided.taken_back:
        attributes[sc.KVWISE_CANONICAL_CHANGES] = tuple(decided.changes)
        if decided.cap_refused:
            attributes[sc.KVWISE_GUARD_CAP_REFUSED] = True
    if decided.store_outage is not None:
        attributes[sc.KVWISE_STATE_DEGRADED] = True
        attributes[sc.KVWISE_STATE_DEGRADED_REASON] = decided.store_outage
    if waited is not None:
        attributes[sc.KVWISE_FANOUT_WAITED_MS] = waited.waited_ms
        if waited.leader_span_id is not None:
            attributes[sc.KVWISE_FANOUT_LEADER_SPAN_ID] = waited.leader_span_id


def outcome_attributes(outcome: Outcome) -> Attributes:
    """Attributes known at the end: response, usage, cache ratio, cost, guards, attempts, server timings."""
    end = outcome.end
    attributes: Attributes = {sc.KVWISE_ATTEMPTS: outcome.attempts}
    if end.response_id:
        attributes[sc.GEN_AI_RESPONSE_ID] = end.response_id
    if end.response_model:
        attributes[sc.GEN_AI_RESPONSE_MODEL] = end.response_model
    if outcome.finish_reasons:
        attributes[sc.GEN_AI_RESPONSE_FINISH_REASONS] = outcome.finish_reasons
    if end.service_tier:
        attributes[sc.OPENAI_RESPONSE_SERVICE_TIER] = end.service_tier
    if end.system_fingerprint:
        attributes[sc.OPENAI_RESPONSE_SYSTEM_FINGERPRINT] = end.system_fingerprint
    if outcome.break_cause_server:
        attributes[sc.KVWISE_PREFIX_BREAK_CAUSE_SERVER] = outcome.break_cause_server
    if end.usage is not None:
        _add_usage(attributes, end.usage)
    if outcome.cost is not None:
        _add_cost(attributes, outcome.cost)
    if outcome.miss is not None:
        attributes[sc.KVWISE_CACHE_EXPECTED_READ_TOKENS] = outcome.miss.expected
        attributes[sc.KVWISE_CACHE_MISSED_TOKENS] = outcome.miss.missed
        attributes[sc.KVWISE_CACHE_MISS_CAUSE] = outcome.miss.cause
    if outcome.time_to_first_chunk_s is not None:
        attributes[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = outcome.time_to_first_chunk_s
    if outcome.chunks is not None:
        attributes[sc.KVWISE_STREAM_CHUNKS] = outcome.chunks
    if end.ending is Ending.ABANDONED:  # the caller stopped reading the stream before its end (no error)
        attributes[sc.KVWISE_STREAM_ABANDONED] = True
    if end.end_unmarked:  # the body ended cleanly, but the server never said the answer was whole
        attributes[sc.KVWISE_STREAM_END_MARKER] = False
    if end.guard:
        attributes[sc.KVWISE_GUARD_TRIPPED] = end.guard
        if end.tokens_saved is not None:
            attributes[sc.KVWISE_GUARD_TOKENS_SAVED] = end.tokens_saved
    if end.timings:
        for native, key in sc.SERVER_TIMINGS:
            value = end.timings.get(native)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                attributes[key] = value if isinstance(value, int) else float(value)
    if outcome.error_type:
        attributes[sc.ERROR_TYPE] = outcome.error_type
    return attributes


def _add_usage(attributes: Attributes, usage: Usage) -> None:
    """Token counts under their semconv names, and the cache hit ratio (written into `attributes`,
    in place: no dict of their own to merge on every call)."""
    attributes[sc.GEN_AI_USAGE_INPUT_TOKENS] = usage.input_tokens
    attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] = usage.output_tokens
    attributes[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = usage.cache_read_tokens
    attributes[sc.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS] = usage.cache_write_tokens
    attributes[sc.KVWISE_CACHE_HIT_RATIO] = usage.hit_ratio
    if usage.reasoning_tokens:
        attributes[sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] = usage.reasoning_tokens


def _add_cost(attributes: Attributes, cost: Cost) -> None:
    """The cost split in USD and what the cache reads saved (written into `attributes`, in place)."""
    attributes[sc.KVWISE_COST_USD] = cost.total_usd
    attributes[sc.KVWISE_COST_INPUT_USD] = cost.input_usd
    attributes[sc.KVWISE_COST_CACHED_INPUT_USD] = cost.cached_input_usd
    attributes[sc.KVWISE_COST_CACHE_WRITE_USD] = cost.cache_write_usd
    attributes[sc.KVWISE_COST_OUTPUT_USD] = cost.output_usd
    attributes[sc.KVWISE_COST_SAVED_USD] = cost.saved_usd


def error_type(error: BaseException | str) -> str:
    """`error.type`: a kvwise code for its own failures, else the exception's class name."""
    if isinstance(error, str):
        return error or sc.ErrorType.OTHER.value
    if isinstance(error, StreamTruncated):
        return sc.ErrorType.STREAM_TRUNCATED.value
    return type(error).__qualname__
