"""Every telemetry name kvwise emits: attributes, metrics, span and event names, allowed values.

GenAI names follow the newest OpenTelemetry GenAI semantic conventions
(open-telemetry/semantic-conventions-genai), which moved out of the core conventions: the installed
`opentelemetry-semantic-conventions` package marks them deprecated and still spells the cache-write
count `cache_creation`, so the names are written out here rather than imported. kvwise's own names
live under `kvwise.*`. No other module spells a telemetry string: they import it from here.
It sits at the SDK's root, below every step, because the steps name their decisions with it
(`MissCause`, `CapSource`) as much as `sdk.telemetry` emits them.

OpenInference names (the flavour Arize Phoenix reads: `openinference.*`, `llm.*`) have their own
section, as spelled by the `openinference-semantic-conventions` package; `sdk.telemetry.openinference` maps
calls to them beside `sdk.telemetry.attributes`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

# --- GenAI: operation and provider ---------------------------------------------------------------

GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
"""The operation being performed; kvwise reports `chat` for all three intercepted APIs."""

GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
"""The provider as the client sees it: `openai`, `anthropic`, or a known OpenAI-compatible server."""

# --- GenAI: request ------------------------------------------------------------------------------

GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
"""The model name the request was made to, exactly as the caller wrote it."""

GEN_AI_REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
"""The output cap actually sent (after the policy clamped or filled it in)."""

GEN_AI_REQUEST_TEMPERATURE: Final = "gen_ai.request.temperature"
"""Sampling temperature sent."""

GEN_AI_REQUEST_TOP_P: Final = "gen_ai.request.top_p"
"""Nucleus-sampling threshold sent."""

GEN_AI_REQUEST_TOP_K: Final = "gen_ai.request.top_k"
"""Top-k sampling limit sent."""

GEN_AI_REQUEST_STOP_SEQUENCES: Final = "gen_ai.request.stop_sequences"
"""Stop sequences sent (the caller's merged with the policy's)."""

GEN_AI_REQUEST_FREQUENCY_PENALTY: Final = "gen_ai.request.frequency_penalty"
"""Frequency penalty sent."""

GEN_AI_REQUEST_PRESENCE_PENALTY: Final = "gen_ai.request.presence_penalty"
"""Presence penalty sent."""

GEN_AI_REQUEST_SEED: Final = "gen_ai.request.seed"
"""Sampling seed sent."""

GEN_AI_REQUEST_STREAM: Final = "gen_ai.request.stream"
"""Set (to true) if and only if the caller asked for a stream."""

GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
"""The conversation the call belongs to, as the app named it with `sdk.conversation(id)`."""

OPENAI_REQUEST_SERVICE_TIER: Final = "openai.request.service_tier"
"""The service tier an OpenAI request asked for (`auto`, `default`, `flex`, `priority`), if it asked."""

OPENAI_RESPONSE_SERVICE_TIER: Final = "openai.response.service_tier"
"""The service tier OpenAI says served the request."""

OPENAI_RESPONSE_SYSTEM_FINGERPRINT: Final = "openai.response.system_fingerprint"
"""OpenAI's fingerprint of the backend configuration that answered (Chat Completions)."""

# --- GenAI: response -----------------------------------------------------------------------------

GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
"""The provider's id of the completion."""

GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
"""The model that answered (often a dated snapshot of the requested name)."""

GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
"""Why generation stopped, one entry per choice, in the provider's own words."""

GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: Final = "gen_ai.response.time_to_first_chunk"
"""Seconds from the send of the request that produced it to the first chunk received, of any kind
(a role or `message_start` header, text, tool-call arguments); streams only."""

# --- GenAI: usage --------------------------------------------------------------------------------

GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
"""ALL input tokens, cached ones included (Anthropic: input + cache read + cache write)."""

GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
"""Output tokens, reasoning ones included."""

GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
"""Input tokens served from the provider's prefix cache (a subset of the input tokens)."""

GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS: Final = "gen_ai.usage.cache_write.input_tokens"
"""Input tokens written to the provider's prefix cache (the newest name; it replaced `cache_creation`)."""

GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: Final = "gen_ai.usage.reasoning.output_tokens"
"""Output tokens spent on hidden reasoning (a subset of the output tokens)."""

GEN_AI_TOKEN_TYPE: Final = "gen_ai.token.type"
"""Metric attribute of `gen_ai.client.token.usage`: which tokens a measurement counts."""

# --- GenAI: content (opt-in) ---------------------------------------------------------------------

GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
"""The chat history sent, as a JSON string in the semconv message shape (`role`, `parts`)."""

GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
"""The answer, as a JSON string in the semconv output-message shape (`role`, `parts`); the finish
reason is on `gen_ai.response.finish_reasons`, not in the message."""

GEN_AI_SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
"""The system prompt, as a JSON string: a list of parts (`{"type": "text", "content": ...}`)."""

GEN_AI_INFERENCE_DETAILS_EVENT: Final = "gen_ai.client.inference.operation.details"
"""Event name carrying the content when capture goes to events (a log record tied to the span): the
span's attributes, with the content as structured values (lists of maps), not JSON strings."""

# --- General ---------------------------------------------------------------------------------

ERROR_TYPE: Final = "error.type"
"""Low-cardinality error class of a failed call: the exception's class name or an `ErrorType`."""

SERVER_ADDRESS: Final = "server.address"
"""Host the wrapped client sends to."""

SERVER_PORT: Final = "server.port"
"""Port the wrapped client sends to."""

# --- GenAI metrics -------------------------------------------------------------------------------

GEN_AI_CLIENT_TOKEN_USAGE: Final = "gen_ai.client.token.usage"
"""Histogram of input and output tokens per call (split by `gen_ai.token.type`)."""

GEN_AI_CLIENT_OPERATION_DURATION: Final = "gen_ai.client.operation.duration"
"""Histogram of whole-call durations in seconds."""

GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK: Final = "gen_ai.client.operation.time_to_first_chunk"
"""Histogram of seconds to the first content chunk (streams only): the client-side TTFT."""

GEN_AI_CLIENT_OPERATION_TIME_PER_OUTPUT_CHUNK: Final = "gen_ai.client.operation.time_per_output_chunk"
"""Histogram of seconds per output chunk after the first (streams only); one mean per call."""

TOKEN_UNIT: Final = "{token}"
"""UCUM annotation unit of token counts."""

SECONDS_UNIT: Final = "s"
"""Unit of the duration histograms."""

USD_UNIT: Final = "USD"
"""Unit of the cost counter."""

TOKEN_BUCKETS: Final = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
"""Semconv explicit bucket boundaries of `gen_ai.client.token.usage`."""

DURATION_BUCKETS: Final = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
"""Semconv explicit bucket boundaries of the duration, time-to-first-chunk and per-chunk histograms."""

# --- kvwise: cache and prefix ----------------------------------------------------------------

KVWISE_CACHE_HIT_RATIO: Final = "kvwise.cache.hit_ratio"
"""Cache-read tokens divided by all input tokens, in [0, 1]: the share of prefill the cache skipped."""

KVWISE_CACHE_READ_TOKENS: Final = "kvwise.cache.read_tokens"
"""Counter of input tokens read from provider caches, summed over calls."""

KVWISE_CACHE_EXPECTED_READ_TOKENS: Final = "kvwise.cache.expected_read_tokens"
"""Input tokens kvwise expected the provider to read (`sdk.cache.expected_reads`): the longest prefix this client
sent before to the same provider and model, counted from that call's reported usage; set on calls that read fewer."""

KVWISE_CACHE_MISSED_TOKENS: Final = "kvwise.cache.missed_tokens"
"""Expected minus read input tokens of a call that read fewer than kvwise expected (span attribute), and the
counter that sums them over calls (with `kvwise.cache.miss_cause`)."""

KVWISE_CACHE_MISS_CAUSE: Final = "kvwise.cache.miss_cause"
"""Why a call read fewer tokens than kvwise expected, where kvwise can tell: a `MissCause`."""

KVWISE_PREFIX_FINGERPRINT: Final = "kvwise.prefix.fingerprint"
"""Hash of the stable prefix (tools, system, history): equal fingerprints can share a cache entry."""

KVWISE_PREFIX_BREAK_AT: Final = "kvwise.prefix.break_at"
"""The first prefix segment that changed since the previous call (e.g. `system[0]`)."""

KVWISE_PREFIX_BREAK_CAUSE: Final = "kvwise.prefix.break_cause"
"""Why the cacheable prefix changed since the previous call of its API and model, as kvwise sees it client-side:
a cause code of `sdk.cache.fingerprint.BreakCause`."""

KVWISE_PREFIX_BREAK_CAUSE_SERVER: Final = "kvwise.prefix.break_cause_server"
"""Why the provider says its cache missed (Anthropic's `diagnostics.cache_miss_reason.type`:
`model_changed`, `system_changed`, `tools_changed`, `messages_changed`,
`previous_message_not_found`, `unavailable`), beside kvwise's own `kvwise.prefix.break_cause`."""

KVWISE_PROMPT_FAMILY: Final = "kvwise.prompt.family"
"""The id of the call's prompt family (`sdk.prompt.families`): the calls of one prompt, whatever changes in it."""

KVWISE_PROMPT_STABLE_KEPT: Final = "kvwise.prompt.stable_kept"
"""The share (0 to 1) of the system prompt's stable bytes this call kept, from its start, of its family's
previous call, as their lines tell it (absent on a family's first call)."""

KVWISE_CANONICAL_CHANGES: Final = "kvwise.canonical.changes"
"""What canonicalisation rewrote in this request (one short description per change)."""

# --- kvwise: guards and retries ------------------------------------------------------------------

KVWISE_GUARD_TRIPPED: Final = "kvwise.guard.tripped"
"""Which guard cut the answer (a `GuardKind`)."""

KVWISE_GUARD_TOKENS_SAVED: Final = "kvwise.guard.tokens_saved"
"""Output tokens the cut saved against the cap (cap minus tokens seen)."""

KVWISE_OUTPUT_CAP_TOKENS: Final = "kvwise.output_cap.tokens"
"""The output-token limit kvwise decided for the request (`Call.cap`; thinking budget included)."""

KVWISE_OUTPUT_CAP_SOURCE: Final = "kvwise.output_cap.source"
"""Where that limit came from (a `CapSource`): the policy's cap, the caller's own, or the prompt family's
adaptive cap."""

KVWISE_GUARD_CAP_REFUSED: Final = "kvwise.guard.cap_refused"
"""True when the server refused (400/422 naming the output limit or the context) the output cap kvwise
filled in or clamped, and the call went again with the limit as the caller wrote it (`sdk.decode.limits`);
`kvwise.output_cap.*` keep the figures of the refused cap."""

KVWISE_FANOUT_WAITED_MS: Final = "kvwise.fanout.waited_ms"
"""How long the call waited for an in-flight call with the same cacheable prefix to warm the cache."""

KVWISE_FANOUT_LEADER_SPAN_ID: Final = "kvwise.fanout.leader_span_id"
"""The span id (16 hex digits) of the in-flight call this one waited for."""

KVWISE_STATE_DEGRADED: Final = "kvwise.state.degraded"
"""True when the shared state store (`sdk.wrap(state=...)`) failed this call: it went on with in-process state."""

KVWISE_STATE_DEGRADED_REASON: Final = "kvwise.state.degraded_reason"
"""Why the shared state store failed (the error's type and message, no credentials)."""

KVWISE_ATTEMPTS: Final = "kvwise.attempts"
"""The requests the call made: kvwise's sends (1, or 2 after a refusal of what kvwise added), plus
the retries the client's own loop took, as its outcome says (`sdk.compat.retries_taken`); only an
anthropic client with middleware, or whose own call span records the answer, leaves a parsed
answer's retries uncounted (`sdk.compat.counting_cast_to`)."""

KVWISE_STREAM_CHUNKS: Final = "kvwise.stream.chunks"
"""Content chunks that reached the caller (streams only)."""

KVWISE_STREAM_ABANDONED: Final = "kvwise.stream.abandoned"
"""True when the caller stopped reading a stream before its end, on purpose (`close()`, a `break`
and the stream dropped, `with` exit, a cancelled task): no error (frameworks stop streams early by
design), and no finish reason, as the answer never reached one. A dropped connection is an error
instead (`error.type` `stream_truncated`)."""

KVWISE_STREAM_END_MARKER: Final = "kvwise.stream.end_marker"
"""False when a stream's body ended cleanly with neither its end marker (`[DONE]`, `message_stop`,
Responses' terminal event) nor a finish reason: an end, as the bare client has it (the caller got no
error), but the answer may be short; its usage is estimated where the server sent none. Absent
otherwise."""

KVWISE_USAGE_ESTIMATED: Final = "kvwise.usage.estimated"
"""True when the server never reported the input tokens of a stream (it was cut or closed before the
usage the server sends at the end): the `gen_ai.usage.*` figures are then estimates, input from the
prompt's characters (4 per token), output from the content chunks seen, cache reads 0 (unknowable
client-side, so the cost is an upper bound). See `sdk.send.stream_watch.estimated_usage`."""

# --- kvwise: cost ----------------------------------------------------------------------------

KVWISE_COST_USD: Final = "kvwise.cost.usd"
"""Span attribute and counter: what the call cost in USD at the price table's rates."""

KVWISE_COST_INPUT_USD: Final = "kvwise.cost.input_usd"
"""Cost of the uncached input tokens."""

KVWISE_COST_CACHED_INPUT_USD: Final = "kvwise.cost.cached_input_usd"
"""Cost of the input tokens read from the cache."""

KVWISE_COST_CACHE_WRITE_USD: Final = "kvwise.cost.cache_write_usd"
"""Cost of the input tokens written to the cache."""

KVWISE_COST_OUTPUT_USD: Final = "kvwise.cost.output_usd"
"""Cost of the output tokens."""

KVWISE_COST_SAVED_USD: Final = "kvwise.cost.saved_usd"
"""What the cache reads saved: cache-read tokens priced at the input rate minus at the cached rate."""

# --- kvwise: server-reported timings ---------------------------------------------------------

KVWISE_SERVER_QUEUE_MS: Final = "kvwise.server.queue_ms"
"""Milliseconds the request waited in the server's queue (llama.cpp-style `timings.queue_ms`)."""

KVWISE_SERVER_PREFILL_MS: Final = "kvwise.server.prefill_ms"
"""Milliseconds the server spent on prefill (`timings.prompt_ms`)."""

KVWISE_SERVER_DECODE_MS: Final = "kvwise.server.decode_ms"
"""Milliseconds the server spent on decode (`timings.predicted_ms`)."""

KVWISE_SERVER_DRAFT_TOKENS: Final = "kvwise.server.draft_tokens"
"""Tokens the server's speculative decoding proposed for the answer (`timings.draft_n`)."""

KVWISE_SERVER_DRAFT_ACCEPTED_TOKENS: Final = "kvwise.server.draft_accepted_tokens"
"""Of those, the tokens the model kept (`timings.draft_n_accepted`): accepted ÷ proposed is the acceptance rate."""

SERVER_TIMINGS: Final = (
    ("queue_ms", KVWISE_SERVER_QUEUE_MS),
    ("prompt_ms", KVWISE_SERVER_PREFILL_MS),
    ("predicted_ms", KVWISE_SERVER_DECODE_MS),
    ("draft_n", KVWISE_SERVER_DRAFT_TOKENS),
    ("draft_n_accepted", KVWISE_SERVER_DRAFT_ACCEPTED_TOKENS),
)
"""llama.cpp `timings` keys and the attributes they are reported under."""

# --- OpenInference (Arize Phoenix) -----------------------------------------------------------

OPENINFERENCE_SPAN_KIND: Final = "openinference.span.kind"
"""How Phoenix classifies a span (an `OpenInferenceSpanKind`): `LLM` for the call span."""

OPENINFERENCE_PROJECT_NAME: Final = "openinference.project.name"
"""Resource attribute: the Phoenix project a provider's spans land in (`default` without it)."""

LLM_MODEL_NAME: Final = "llm.model_name"
"""The model that answered, else the one requested (Phoenix looks its prices up by this name)."""

LLM_PROVIDER: Final = "llm.provider"
"""Who hosts the model, in OpenInference's words (an `LlmProvider`)."""

LLM_SYSTEM: Final = "llm.system"
"""The API the client speaks (an `LlmSystem`)."""

LLM_TOKEN_COUNT_PROMPT: Final = "llm.token_count.prompt"
"""ALL prompt tokens, cached ones included: the same count as `gen_ai.usage.input_tokens`."""

LLM_TOKEN_COUNT_COMPLETION: Final = "llm.token_count.completion"
"""Completion tokens, reasoning ones included: the same count as `gen_ai.usage.output_tokens`."""

LLM_TOKEN_COUNT_TOTAL: Final = "llm.token_count.total"
"""Prompt plus completion tokens."""

LLM_TOKEN_COUNT_PROMPT_DETAILS_CACHE_READ: Final = "llm.token_count.prompt_details.cache_read"
"""Prompt tokens read from the provider's prefix cache."""

LLM_TOKEN_COUNT_PROMPT_DETAILS_CACHE_WRITE: Final = "llm.token_count.prompt_details.cache_write"
"""Prompt tokens written to the provider's prefix cache."""

LLM_TOKEN_COUNT_COMPLETION_DETAILS_REASONING: Final = "llm.token_count.completion_details.reasoning"
"""Completion tokens spent on hidden reasoning (set only when there were some)."""

LLM_COST_TOTAL: Final = "llm.cost.total"
"""USD of the whole call at kvwise's price table (Phoenix's own cost column prices by model name)."""

LLM_COST_PROMPT: Final = "llm.cost.prompt"
"""USD of all prompt tokens: uncached input, cache reads and cache writes."""

LLM_COST_COMPLETION: Final = "llm.cost.completion"
"""USD of the completion tokens."""

LLM_COST_PROMPT_DETAILS_INPUT: Final = "llm.cost.prompt_details.input"
"""USD of the prompt tokens neither read from nor written to the cache."""

LLM_COST_PROMPT_DETAILS_CACHE_READ: Final = "llm.cost.prompt_details.cache_read"
"""USD of the prompt tokens read from the cache."""

LLM_COST_PROMPT_DETAILS_CACHE_WRITE: Final = "llm.cost.prompt_details.cache_write"
"""USD of the prompt tokens written to the cache."""

LLM_COST_PROMPT_DETAILS_CACHE_INPUT: Final = "llm.cost.prompt_details.cache_input"
"""USD of the prompt tokens that went through the cache: the cache reads plus the cache writes."""

LLM_FINISH_REASON: Final = "llm.finish_reason"
"""Why generation stopped (the first of `gen_ai.response.finish_reasons`)."""

LLM_INVOCATION_PARAMETERS: Final = "llm.invocation_parameters"
"""The request's parameters as JSON, without its content (messages, prompt, tools): always set."""

LLM_INPUT_MESSAGES: Final = "llm.input_messages"
"""Prefix of the prompt's messages, `llm.input_messages.{i}.message.*` (content capture only)."""

LLM_OUTPUT_MESSAGES: Final = "llm.output_messages"
"""Prefix of the answer's messages, `llm.output_messages.{i}.message.*` (content capture only)."""

LLM_TOOLS: Final = "llm.tools"
"""Prefix of the tools offered, `llm.tools.{i}.tool.json_schema` (content capture only)."""

INPUT_VALUE: Final = "input.value"
"""The request as sent, as JSON (content capture only; Phoenix shows it as the span's input)."""

INPUT_MIME_TYPE: Final = "input.mime_type"
"""The `MimeType` of `input.value`."""

OUTPUT_VALUE: Final = "output.value"
"""The answer's messages (call span, content capture only) or a phase's measures, as JSON."""

OUTPUT_MIME_TYPE: Final = "output.mime_type"
"""The `MimeType` of `output.value`."""

MESSAGE_ROLE: Final = "message.role"
"""Suffix of one message: its role (`user`, `assistant`, `system`, `tool`)."""

MESSAGE_CONTENT: Final = "message.content"
"""Suffix of one message: its text, when it is one text part."""

MESSAGE_CONTENTS: Final = "message.contents"
"""Suffix of one message's text parts, `message.contents.{k}.message_content.*`, when there are several."""

MESSAGE_CONTENT_TYPE: Final = "message_content.type"
"""Suffix of one content part: its type (`text`)."""

MESSAGE_CONTENT_TEXT: Final = "message_content.text"
"""Suffix of one content part: its text."""

MESSAGE_TOOL_CALLS: Final = "message.tool_calls"
"""Suffix of one message's tool calls, `message.tool_calls.{j}.tool_call.*`."""

MESSAGE_TOOL_CALL_ID: Final = "message.tool_call_id"
"""Suffix of a `tool` message: the id of the call it answers."""

TOOL_CALL_ID: Final = "tool_call.id"
"""Suffix of one tool call: its id."""

TOOL_CALL_FUNCTION_NAME: Final = "tool_call.function.name"
"""Suffix of one tool call: the tool's name."""

TOOL_CALL_FUNCTION_ARGUMENTS: Final = "tool_call.function.arguments"
"""Suffix of one tool call: its arguments as a JSON string."""

TOOL_JSON_SCHEMA: Final = "tool.json_schema"
"""Suffix of one offered tool: its native definition as JSON."""

# --- Phases (the `prefill` and `decode` child spans) -------------------------------------------

KVWISE_PREFILL_TOKENS: Final = "kvwise.prefill.tokens"
"""Input tokens the server had to prefill: all input tokens less the ones read from the cache."""

KVWISE_PREFILL_CACHED_TOKENS: Final = "kvwise.prefill.cached_tokens"
"""Input tokens read from the cache instead of prefilled."""

KVWISE_PREFILL_MS: Final = "kvwise.prefill.ms"
"""Milliseconds from the answering attempt's send to its first content chunk."""

KVWISE_DECODE_TOKENS: Final = "kvwise.decode.tokens"
"""Output tokens decoded (`gen_ai.usage.output_tokens`)."""

KVWISE_DECODE_MS: Final = "kvwise.decode.ms"
"""Milliseconds from the first content chunk to the last."""

KVWISE_DECODE_TOKENS_PER_S: Final = "kvwise.decode.tokens_per_s"
"""Output tokens over the decode time (set when decode took any time)."""

# --- Environment variables -------------------------------------------------------------------

CAPTURE_MESSAGE_CONTENT_ENV: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""Where content goes: a `ContentCapture` value (case-insensitive); `true`/`false` as older spellings."""


# --- Allowed values --------------------------------------------------------------------------


class OperationName(StrEnum):
    """Values of `gen_ai.operation.name` that kvwise reports."""

    CHAT = "chat"


class ProviderName(StrEnum):
    """Values of `gen_ai.provider.name` that kvwise reports (the semconv well-known values); which hosts report
    each is `sdk.providers`' knowledge."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    AWS_BEDROCK = "aws.bedrock"
    GCP_VERTEX_AI = "gcp.vertex_ai"
    AZURE_AI_INFERENCE = "azure.ai.inference"
    AZURE_AI_OPENAI = "azure.ai.openai"
    DEEPSEEK = "deepseek"
    GCP_GEMINI = "gcp.gemini"
    GROQ = "groq"
    MISTRAL_AI = "mistral_ai"
    MOONSHOT_AI = "moonshot_ai"
    PERPLEXITY = "perplexity"
    X_AI = "x_ai"


class FinishReason(StrEnum):
    """kvwise's own value of `gen_ai.response.finish_reasons`."""

    ERROR = "error"
    """The generation started but failed before a terminal reason (a truncated stream, an error mid-answer)."""


class TokenType(StrEnum):
    """Values of `gen_ai.token.type`."""

    INPUT = "input"
    OUTPUT = "output"


class ErrorType(StrEnum):
    """kvwise's own values of `error.type` (otherwise the exception's class name is used).

    `stream_truncated`: the connection dropped or timed out after the stream's 200 (`sdk.StreamTruncated`).
    A stream the caller stops reading is no error: see `KVWISE_STREAM_ABANDONED`; nor is one whose body
    ended cleanly without its end marker: see `KVWISE_STREAM_END_MARKER`.
    """

    STREAM_TRUNCATED = "stream_truncated"
    OTHER = "_OTHER"


class MissCause(StrEnum):
    """Values of `kvwise.cache.miss_cause`: why the provider read less than kvwise sent before.

    The first three kvwise can explain from its side (the user can act on them); the last two are
    the provider's: it did not keep or honour what it should have."""

    LIFETIME_PASSED = "lifetime_passed"  # the earlier call is older than the cache lifetime kvwise knows
    UNDER_MINIMUM = (
        "under_minimum"  # the shared prefix is at the provider's minimum cacheable length, by kvwise's count
    )
    OTHER_ENDPOINT = "other_endpoint"  # the prefix was sent before to another base URL or key
    BREAKPOINT_IGNORED = "breakpoint_ignored"  # breakpoints were sent and the answer shows no cache write nor read
    EVICTED = (
        "evicted"  # within the lifetime, breakpoints honoured: the provider dropped it (eviction, another replica)
    )


class CapSource(StrEnum):
    """Values of `kvwise.output_cap.source`."""

    POLICY = "policy"
    CALLER = "caller"
    ADAPTIVE = "adaptive"


class GuardKind(StrEnum):
    """Values of `kvwise.guard.tripped`."""

    LOOP = "loop"


class PhaseName(StrEnum):
    """Names of the child spans of a streamed call."""

    PREFILL = "prefill"
    DECODE = "decode"


class ContentCapture(StrEnum):
    """Values of `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`: where prompt and answer text go."""

    NO_CONTENT = "NO_CONTENT"
    SPAN_ONLY = "SPAN_ONLY"
    EVENT_ONLY = "EVENT_ONLY"
    SPAN_AND_EVENT = "SPAN_AND_EVENT"

    @property
    def on_span(self) -> bool:
        """Whether content goes on the call span's attributes."""
        return self in (ContentCapture.SPAN_ONLY, ContentCapture.SPAN_AND_EVENT)

    @property
    def on_event(self) -> bool:
        """Whether content goes on a `gen_ai.client.inference.operation.details` event."""
        return self in (ContentCapture.EVENT_ONLY, ContentCapture.SPAN_AND_EVENT)


class OpenInferenceSpanKind(StrEnum):
    """Values of `openinference.span.kind` that kvwise reports."""

    LLM = "LLM"
    CHAIN = "CHAIN"
    """A step inside the call (the phase spans): Phoenix shows its input and output, counts no tokens."""


class MimeType(StrEnum):
    """Values of `input.mime_type` and `output.mime_type`."""

    JSON = "application/json"


class LlmProvider(StrEnum):
    """Values of `llm.provider` (OpenInference's well-known providers) that kvwise reports."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    AWS = "aws"
    AZURE = "azure"
    DEEPSEEK = "deepseek"
    GOOGLE = "google"
    GROQ = "groq"
    MISTRALAI = "mistralai"
    MOONSHOT = "moonshot"
    PERPLEXITY = "perplexity"
    XAI = "xai"


class LlmSystem(StrEnum):
    """Values of `llm.system`: the API, `openai` for every OpenAI-compatible server."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"


INSTRUMENTATION_SCOPE: Final = "kvwise"
"""Name of the tracer, meter and event logger kvwise creates."""
