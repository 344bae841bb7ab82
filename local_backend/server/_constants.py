"""Server tunables and wire names in one place: defaults a caller may override, never literals in the logic."""

from typing import Final

DEFAULT_HOST: Final = "127.0.0.1"
"""Loopback by default: binding elsewhere without `--api-key` opens the model to the network."""

DEFAULT_PORT: Final = 8000

LOOPBACK_HOSTS: Final = frozenset({"127.0.0.1", "::1", "localhost"})
"""Hosts that need no warning when the server runs without an API key."""

MAX_BODY_BYTES: Final = 4 * 1024**2
"""Largest request body accepted; a larger one gets 413 (its bytes are read and dropped, never kept)."""

DEFAULT_MAX_QUEUE: Final = 256
"""Requests allowed to wait beyond the engine's batch (`max_num_seqs`); more get 429 / 529 at once."""

SHUTDOWN_GRACE_SECONDS: Final = 30
"""On SIGTERM, in-flight requests may finish for this long before the server exits."""

MAX_STOP_SEQUENCES: Final = 16
"""Most stop strings one request may give (OpenAI allows 4; vLLM and llama.cpp allow more)."""

OPENAI_DEFAULT_TEMPERATURE: Final = 1.0
OPENAI_MAX_TEMPERATURE: Final = 2.0
ANTHROPIC_DEFAULT_TEMPERATURE: Final = 1.0
ANTHROPIC_MAX_TEMPERATURE: Final = 1.0

MODEL_OWNER: Final = "kvwise"
"""`owned_by` of the one model `GET /v1/models` lists."""

HEALTH_PATH: Final = "/health"
"""The one path that never needs the API key (load balancers and readiness probes)."""

ANTHROPIC_PATH_PREFIX: Final = "/v1/messages"
"""Requests under this path get Anthropic error bodies; every other path gets OpenAI's."""

API_KEY_HEADER: Final = "x-api-key"
AUTHORIZATION_HEADER: Final = "authorization"
BEARER_PREFIX: Final = "bearer "

SSE_DONE: Final = b"data: [DONE]\n\n"
"""OpenAI's end-of-stream sentinel."""

SSE_HEADERS: Final = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

MAX_DRAINED_BODY_BYTES: Final = 64 * 1024**2
"""An oversized body is read and dropped up to this size so the client sees its 413, then the
connection is given up (a client sending more is not waited for)."""

SAMPLING_KNOBS: Final = {
    "temperature": float,
    "top_p": float,
    "top_k": int,
    "min_p": float,
    "seed": int,
    "frequency_penalty": float,
    "presence_penalty": float,
    "repetition_penalty": float,
    "ignore_eos": bool,
}
"""Request fields passed to `SamplingParams` under the same name, with their JSON type; both wire
formats read all of them (`top_k`, `min_p`, `repetition_penalty`, `ignore_eos` are vLLM extras)."""

OPENAI_CHAT_ROLES: Final = frozenset({"system", "developer", "user", "assistant"})
"""Roles a Chat Completions message may have (`developer` is rendered as `system`)."""

ANTHROPIC_ROLES: Final = frozenset({"user", "assistant", "system"})
"""Roles of an Anthropic message (anthropic 2.x's `SystemMessageParam` puts system text among the turns)."""

MAX_CHOICES: Final = 16
"""Largest `n` one request may ask for (each choice is an engine request and takes a slot)."""

MAX_TOP_LOGPROBS: Final = 20
"""Most alternatives per token `top_logprobs` (Chat) or `logprobs` (Completions) may ask for (OpenAI's and vLLM's cap)."""

METRICS_PREFIX: Final = "kvwise_"

TTFT_BUCKETS: Final = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                       20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
"""vLLM's `time_to_first_token_seconds` buckets."""

TIME_PER_OUTPUT_TOKEN_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                        0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
"""vLLM's `time_per_output_token_seconds` buckets, with three below 10 ms (a tiny model on a CPU)."""

REQUEST_LATENCY_BUCKETS: Final = (0.001, 0.01, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                                  40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
"""vLLM's request latency buckets (queue, prefill, decode, end-to-end), with three below 0.3 s."""

API_KEY_ENV: Final = "KVWISE_API_KEY"
"""`serve` reads the API key(s) from here when `--api-key` is not given (keeps them out of `ps`)."""

API_KEY_SEPARATOR: Final = ","
"""`--api-key A,B` (or `KVWISE_API_KEY=A,B`) gives two keys, two tenants; a key cannot hold a comma."""

TENANT_STATE: Final = "kvwise.tenant"
"""Key of the request's tenant id in the ASGI scope's `state`, set by the API-key middleware."""

TENANT_HASH_PERSON: Final = b"kvwise-tenant"
"""blake2b personalisation of the key hash that names a tenant."""

TENANT_ID_BYTES: Final = 16
"""Bytes of that hash: a tenant id is twice as many hex digits."""

METRICS_PATH: Final = "/metrics"

METRICS_KEY_ENV: Final = "KVWISE_METRICS_KEY"
"""`serve` reads the metrics key from here when `--metrics-key` is not given."""

OPENAPI_PATH: Final = "/openapi.json"
"""The server's own OpenAPI document (vLLM's path), open like `/health`: it holds no data."""

MAX_JSON_DEPTH: Final = 160
"""Deepest nesting of arrays and objects a request body may have: past the 128 levels that
llguidance's JSON parser (serde_json) takes in a schema, plus the request's own envelope, and far
below where Python's recursion limit (1,000 frames) would break `json.loads` or a schema walk."""

MAX_SCHEMA_DEPTH: Final = 64
"""Deepest nesting of arrays and objects inside one JSON schema (`response_format`, a tool's
parameters): 32 levels of objects, three times OpenAI's structured-output limit of 10."""

MAX_SCHEMA_PROPERTIES: Final = 1000
"""Most object properties one request's schemas may list together (OpenAI allows 5,000). llguidance's
compile time grows with the square of an object's properties: 1,000 compile in ~0.13 s here, 2,000
in 0.56 s, 10,000 in 15 s, so a request past this bound is refused before anything compiles."""

MAX_TOOLS: Final = 128
"""Most tools one request may offer (OpenAI's limit for `tools`)."""

GRAMMAR_COMPILE_SECONDS: Final = 5.0
"""A grammar that has not compiled in this time is refused (400); it compiles on a worker thread,
without the GIL, so the event loop serves everyone else meanwhile."""

GRAMMAR_MAX_SIZE: Final = 200_000
"""llguidance's `max_grammar_size` (symbols; its default is 500,000): a second bound past the schema's own."""

MAX_JSON_INTEGER: Final = 2**63 - 1
"""Largest magnitude an integer field may have: what a torch int64 holds (`top_k: 10**30` is refused)."""

REPETITION_PENALTY_RANGE: Final = (0.0, 2.0)
"""vLLM's `repetition_penalty` range, (0, 2]; 1 is off."""

HEADER_TIMEOUT_SECONDS: Final = 10.0
"""A connection whose request headers are not complete this long after it opened (or after the
request's first byte, on a kept-alive connection) is closed: uvicorn has no header timeout, and
a client trickling header bytes would hold its connection forever (nginx's `client_header_timeout`)."""

MAX_LOGGED_FRAMES: Final = 20
"""Frames of a failed request's traceback written to the log (the innermost ones): a deep
recursion's 1,000-frame traceback is ~150 KB, and a server whose stderr is a pipe nobody reads
blocked its event loop on writing it."""
