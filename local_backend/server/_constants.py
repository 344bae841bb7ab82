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

ANTHROPIC_ROLES: Final = frozenset({"user", "assistant"})

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
