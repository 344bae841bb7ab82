"""Server tunables: the defaults and bounds an operator may change, and the names an operator types.

Wire literals live in the module that speaks that wire (`openai_routes.SSE_DONE`, `auth`'s headers,
`tool_requests`' roles), the request fields' schema beside the fields table (`fields`), the metric
buckets in `metrics`.
"""

from typing import Final

# Where and how the server listens.

DEFAULT_HOST: Final = "127.0.0.1"
"""Loopback by default: binding elsewhere without `--api-key` opens the model to the network."""

DEFAULT_PORT: Final = 8000

LOOPBACK_HOSTS: Final = frozenset({"127.0.0.1", "::1", "localhost"})
"""Hosts that need no warning when the server runs without an API key, and the Host names such a
server answers to by default (`browser_guard`: a DNS-rebinding page's own name is none of them)."""

HEALTH_PATH: Final = "/health"
"""The one path that never needs the API key (load balancers and readiness probes)."""

METRICS_PATH: Final = "/metrics"

OPENAPI_PATH: Final = "/openapi.json"
"""The server's own OpenAPI document (vLLM's path), open like `/health`: it holds no data."""

API_KEY_ENV: Final = "KVWISE_API_KEY"
"""`serve` reads the API key(s) from here when `--api-key` is not given (keeps them out of `ps`)."""

API_KEY_SEPARATOR: Final = ","
"""`--api-key A,B` (or `KVWISE_API_KEY=A,B`) gives two keys, two tenants; a key cannot hold a comma."""

METRICS_KEY_ENV: Final = "KVWISE_METRICS_KEY"
"""`serve` reads the metrics key from here when `--metrics-key` is not given."""

SHUTDOWN_GRACE_SECONDS: Final = 30
"""On SIGTERM, in-flight requests may finish for this long before the server exits."""

HEADER_TIMEOUT_SECONDS: Final = 10.0
"""A connection whose request headers are not complete this long after it opened (or after the
request's first byte, on a kept-alive connection) is closed: uvicorn has no header timeout, and
a client trickling header bytes would hold its connection forever (nginx's `client_header_timeout`)."""

BODY_TIMEOUT_SECONDS: Final = 30.0
"""A request body (by Content-Length or chunked) not complete this long after its headers gets 408
and its connection is closed: 4 MiB (`MAX_BODY_BYTES`) in 30 s is 140 KB/s, a slow link's pace; a
body trickled at a byte a second, or promised and never sent, once held its connection forever."""

MAX_HEADER_BYTES: Final = 32 * 1024
"""Most bytes a request's line and headers may take (431 past it): uvicorn read a 16 MB header whole
(nginx allows 4 x 8 KB, Node 16 KB)."""

MAX_HEADERS: Final = 100
"""Most header fields one request may send (431 past it; Apache's `LimitRequestFields`)."""

MAX_LOGGED_FRAMES: Final = 20
"""Frames of a failed request's traceback written to the log (the innermost ones): a deep
recursion's traceback holds a thousand frames, and a server whose stderr is a pipe nobody reads
blocked its event loop on writing one whole."""

# How much work one request may ask for.

MAX_BODY_BYTES: Final = 4 * 1024**2
"""Largest request body accepted; a larger one gets 413 (its bytes are read and dropped, never kept)."""

MAX_DRAINED_BODY_BYTES: Final = 64 * 1024**2
"""An oversized body is read and dropped up to this size so the client sees its 413, then the
connection is given up (a client sending more is not waited for)."""

DEFAULT_MAX_QUEUE: Final = 256
"""Requests allowed to wait beyond the engine's batch (`max_num_seqs`); more get 429 / 529 at once."""

OFFLOAD_WORKERS: Final = 2
"""Threads that decode, parse, render and tokenize requests off the event loop (see `offload`)."""

OFFLOAD_MAX_WAITING: Final = 64
"""Requests whose preparation may wait for those threads; more are refused at once (429 / 529)."""

MAX_MESSAGES: Final = 10_000
"""Most messages (or input items) one request may hold: 100,000 empty ones took seconds to walk and
render before the context check refused them (docs/benchmarks.md, `by_hand`); no context this server
serves holds 10,000 turns."""

MAX_COUNTED_BYTES: Final = 256 * 1024
"""Most text bytes `count_tokens` counts (its prompt need not fit the context, so the context bound
does not apply): a count of a few MB held the server for seconds. The bound is low because the
tokenizer's `encode` holds the GIL while it runs (its rate: docs/benchmarks.md, `by_hand`), stalling
the event loop even from a worker thread; 256 KiB is some 64k tokens, eight times the longest
default context."""

MAX_STOP_SEQUENCES: Final = 16
"""Most stop strings one request may give (OpenAI allows 4; vLLM and llama.cpp allow more)."""

MAX_CHOICES: Final = 16
"""Largest `n` one request may ask for (each choice is an engine request and takes a slot)."""

MAX_TOP_LOGPROBS: Final = 20
"""Most alternatives per token `top_logprobs` (Chat) or `logprobs` (Completions) may ask for (OpenAI's and vLLM's
cap)."""

MAX_JSON_DEPTH: Final = 160
"""Deepest nesting of arrays and objects a request body may have: past the 128 levels that
llguidance's JSON parser (serde_json) takes in a schema, plus the request's own envelope, and far
below where Python's recursion limit (1,000 frames) would break `json.loads` or a schema walk."""

MAX_JSON_CONTAINERS: Final = 50_000
"""Most arrays and objects a request body may hold, counted on its bytes before it is parsed: 100,000
empty messages took longer to parse than to refuse; 10,000 messages (`MAX_MESSAGES`), 128 tools and
their schemas' 1,000 properties fit well within it."""

MAX_JSON_INTEGER: Final = 2**63 - 1
"""Largest magnitude an integer field may have: what a torch int64 holds (`top_k: 10**30` is refused)."""

REPETITION_PENALTY_RANGE: Final = (0.0, 2.0)
"""vLLM's `repetition_penalty` range, (0, 2]; 1 is off."""

MAX_TOOLS: Final = 128
"""Most tools one request may offer (OpenAI's limit for `tools`)."""

MAX_SCHEMA_DEPTH: Final = 64
"""Deepest nesting of arrays and objects inside one JSON schema (`response_format`, a tool's
parameters), each `$ref` followed in place: 32 levels of objects, three times OpenAI's
structured-output limit of 10, and far below the chains of object definitions and of bare `$ref`s
on which llguidance's stack overflowed and the process died (docs/benchmarks.md, `by_hand`)."""

MAX_SCHEMA_NODES: Final = 20_000
"""Most values one JSON schema may hold with each `$ref` followed once per use (see `compile_bounds`)."""

MAX_GRAMMAR_BYTES: Final = 32 * 1024
"""Largest GBNF `grammar` text: llama.cpp's own grammars are a few KB; its converter slows with the square of the
rules."""

MAX_GRAMMAR_RULES: Final = 500
"""Most rules one grammar may define: llguidance recursed past its stack on a chain of 5,000
(3,000 compiled); 500 leave six times that room."""

MAX_GRAMMAR_NESTING: Final = 64
"""Deepest nesting of parentheses in a grammar (the GBNF converter recursed past Python's limit at 1,000)."""

MAX_SCHEMA_PROPERTIES: Final = 1000
"""Most object properties one request's schemas may list together (OpenAI allows 5,000). llguidance's
compile time grows with the square of an object's properties, so this bound is what bounds a compile's
time, and a request past it is refused before anything compiles."""

GRAMMAR_COMPILE_SECONDS: Final = 5.0
"""A grammar that has not compiled in this time is refused (400); it compiles on a worker thread,
without the GIL, so the event loop serves everyone else meanwhile."""

GRAMMAR_MAX_SIZE: Final = 200_000
"""llguidance's `max_grammar_size` (symbols; its default is 500,000): a second bound past the schema's own."""
