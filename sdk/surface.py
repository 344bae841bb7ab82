"""Which methods of which client resources go through kvwise, which pass through, and why: one table.

A resource is named by its attribute path from the client (`("chat", "completions")` is
`client.chat.completions`); the same path names it on the sync and async clients, on Azure, Bedrock,
Vertex and Foundry, and under `client.with_raw_response` / `client.with_streaming_response`. The
tables name what the newest supported releases have; a path an older release lacks is simply not
there to intercept (`responses.input_tokens` before openai 2.x).

- `INTERCEPTED`: the methods kvwise replaces. Each runs the call's steps (`sdk.pipeline`) on its arguments, then the
  client's own method, whose send goes through kvwise's retries, telemetry and stream watching.
  `Kind.COUNT` methods count the prompt as kvwise would send it (no output parameters);
  `Kind.BATCH` methods rewrite every request of the batch.
- `REBOUND`: methods kvwise leaves as they are because the client's own code calls an intercepted
  method of the same resource (`chat.completions.stream()` calls `self.create(stream=True)`), like
  the `with_raw_response` wrappers, which openai-python builds by rebinding `create`.
- `ON_WRAPPED_CLIENT`: methods kvwise runs as they are, but with the wrapped client as their
  resource's client, because they make their model calls later through the client
  (`beta.messages.tool_runner()` and `thread()` call `client.beta.messages.create` on each turn).
- `PASS_THROUGH`: resources (or single methods) left to the client, each with the reason.
- `ROUTES`: the same model calls reached below the resources, through the client's own `post` or
  `request` (`SENDS`), as frameworks send them (LiteLLM posts `/chat/completions` itself): each URL
  path names the intercepted method whose request it carries, so it goes through the same steps,
  retries, telemetry and stream watching. A beta twin posts to the same path (OpenAI adds
  `?beta=true`, Anthropic a request qualifier) with the same API and kind. Any other path, or a
  request whose answer the client does not parse into its own types, passes through.

`tests/sdk/surface/test_surface_tree.py` walks the installed clients' resource trees and fails on a method
that takes a `model` and is in none of these, so a client release that adds one is a red test.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from urllib.parse import urlsplit

from sdk.call import Api

Path = tuple[str, ...]


class Kind(enum.Enum):
    """How an intercepted method uses the rewritten request."""

    CALL = "call"  # a model call: the whole request, with the decided cap and stops
    COUNT = "count"  # counts the prompt's tokens: only the parameters the method takes
    BATCH = "batch"  # `requests=[{"custom_id", "params"}]`: each `params` rewritten as a call


@dataclass(frozen=True, slots=True)
class Intercept:
    """One intercepted method of a resource."""

    method: str
    api: Api
    kind: Kind = Kind.CALL


_CHAT = (Intercept("create", Api.CHAT), Intercept("parse", Api.CHAT))
_MESSAGES = (
    Intercept("create", Api.MESSAGES),
    Intercept("stream", Api.MESSAGES),
    Intercept("parse", Api.MESSAGES),
    Intercept("count_tokens", Api.MESSAGES, Kind.COUNT),
)
_BATCHES = (Intercept("create", Api.MESSAGES, Kind.BATCH),)
_RESPONSE_TOKENS = (Intercept("count", Api.RESPONSES, Kind.COUNT),)

INTERCEPTED: dict[str, dict[Path, tuple[Intercept, ...]]] = {
    "openai": {
        ("chat", "completions"): _CHAT,
        ("beta", "chat", "completions"): _CHAT,
        ("responses",): (Intercept("create", Api.RESPONSES), Intercept("parse", Api.RESPONSES)),
        ("responses", "input_tokens"): _RESPONSE_TOKENS,
        ("beta", "responses"): (Intercept("create", Api.RESPONSES),),
        ("beta", "responses", "input_tokens"): _RESPONSE_TOKENS,
        ("completions",): (Intercept("create", Api.COMPLETIONS),),
    },
    "anthropic": {
        ("messages",): _MESSAGES,
        ("messages", "batches"): _BATCHES,
        ("beta", "messages"): _MESSAGES,
        ("beta", "messages", "batches"): _BATCHES,
    },
}

_VIA_CREATE = "calls self.create(stream=True) and wraps the kvwise-watched stream in the client's own stream manager"
REBOUND: dict[str, dict[tuple[str, ...], str]] = {
    "openai": {
        ("chat", "completions", "stream"): _VIA_CREATE,
        ("beta", "chat", "completions", "stream"): _VIA_CREATE,
        ("responses", "stream"): _VIA_CREATE + " (with response_id=..., it re-reads a stored response: pass-through)",
    },
    "anthropic": {},
}

_THREAD = (
    "makes a message thread (the client's own loop, over `client.beta.messages.create`) on the wrapped "
    "client, so each turn it sends goes through kvwise's create"
)
ON_WRAPPED_CLIENT: dict[str, dict[Path, dict[str, str]]] = {
    "openai": {},
    "anthropic": {("beta", "messages"): {"thread": _THREAD, "tool_runner": _THREAD + ", and so does the tool loop's"}},
}
"""Methods run as the client's own with the wrapped client as their resource's client: they send
their model calls later, through the client (not through the resource's `_post`), so kvwise sees
each call the client's own code makes."""

_NO_PROMPT = "no prompt prefix to reorder or cache and no decode to cap"
_SERVER_HELD = (
    "the prompt lives server-side (assistants, threads, sessions): "
    "no request prefix to reorder, nothing to cap per request"
)
_REALTIME = "a WebSocket session, not a request/response call"
_MEDIA = "media generation or transcription: no token prefix cache, no decode loop"
_ADMIN = "account, file and storage management: no model call"

PASS_THROUGH: dict[str, dict[Path, str]] = {
    "openai": {
        ("admin",): _ADMIN,
        ("audio",): _MEDIA,
        (
            "batches",
        ): "the requests are in an uploaded JSONL file, not in the call: lint the file's lines with sdk.lint",
        ("beta", "agents"): _SERVER_HELD,
        ("beta", "assistants"): _SERVER_HELD,
        ("beta", "chatkit"): _SERVER_HELD,
        ("beta", "realtime"): _REALTIME,
        ("beta", "threads"): _SERVER_HELD,
        (
            "beta",
            "responses",
            "compact",
        ): "compaction summarises a stored conversation server-side; it takes no output cap",
        ("beta", "responses", "input_items"): _ADMIN,
        ("beta", "chat", "completions", "list"): "lists stored completions (`model` is a filter)",
        ("beta", "chat", "completions", "messages"): "lists stored messages",
        ("chat", "completions", "list"): "lists stored completions (`model` is a filter)",
        ("chat", "completions", "messages"): "lists stored messages",
        ("containers",): _ADMIN,
        ("content_provenance_checks",): _NO_PROMPT,
        ("conversations",): _SERVER_HELD,
        ("decisions",): "a structured decision endpoint with its own schema, not a chat prompt kvwise can rewrite",
        ("embeddings",): "embeddings: one prefill, no decode; the input order is the caller's meaning",
        ("evals",): _ADMIN,
        ("files",): _ADMIN,
        ("fine_tuning",): "training jobs, not inference calls",
        ("images",): _MEDIA,
        ("live",): _REALTIME,
        ("models",): "model metadata (`model` is the id looked up)",
        ("moderations",): "classification: one prefill, no decode",
        ("realtime",): _REALTIME,
        ("responses", "compact"): "compaction summarises a stored conversation server-side; it takes no output cap",
        ("responses", "input_items"): _ADMIN,
        ("safety",): _NO_PROMPT,
        ("skills",): _ADMIN,
        ("uploads",): _ADMIN,
        ("vector_stores",): _ADMIN,
        ("videos",): _MEDIA,
        ("webhooks",): _ADMIN,
    },
    "anthropic": {
        ("beta", "agents"): _SERVER_HELD,
        ("beta", "compliance"): _ADMIN,
        ("beta", "deployment_runs"): _SERVER_HELD,
        ("beta", "deployments"): _SERVER_HELD,
        ("beta", "dreams"): _SERVER_HELD,
        ("beta", "environments"): _SERVER_HELD,
        ("beta", "files"): _ADMIN,
        ("beta", "memory_stores"): _ADMIN,
        ("beta", "models"): "model metadata",
        ("beta", "organization"): _ADMIN,
        ("beta", "sessions"): _SERVER_HELD,
        ("beta", "skills"): _ADMIN,
        ("beta", "tunnels"): _ADMIN,
        ("beta", "user_profiles"): _ADMIN,
        ("beta", "vaults"): _ADMIN,
        ("beta", "webhooks"): _ADMIN,
        ("completions",): "the legacy Text Completions API (anthropic 0.x): one raw prompt string, no blocks to "
        "mark, for models Anthropic has retired",
        ("files",): _ADMIN,
        ("models",): "model metadata",
        ("organization",): _ADMIN,
        ("skills",): _ADMIN,
        ("user_profiles",): _ADMIN,
    },
}


SENDS = frozenset({"post", "request"})
"""The client's own lower-level sends (sync, and async on the async clients) kvwise intercepts."""

ROUTES: dict[str, dict[str, tuple[Path, str]]] = {
    "openai": {
        "/chat/completions": (("chat", "completions"), "create"),
        "/responses": (("responses",), "create"),
        "/responses/input_tokens": (("responses", "input_tokens"), "count"),
        "/completions": (("completions",), "create"),
    },
    "anthropic": {
        "/v1/messages": (("messages",), "create"),
        "/v1/messages/count_tokens": (("messages",), "count_tokens"),
        "/v1/messages/batches": (("messages", "batches"), "create"),
    },
}
"""URL path (relative to the base URL, without the query) -> the intercepted method sending it."""


def route(package: str, url: str) -> tuple[Path, Intercept] | None:
    """The resource and intercepted method whose request a send to `url` carries (None: pass through)."""
    found = ROUTES[package].get(urlsplit(url).path)
    if found is None:
        return None
    path, method = found
    return path, next(spec for spec in INTERCEPTED[package][path] if spec.method == method)


def intercepted(package: str, path: Path) -> tuple[Intercept, ...]:
    """The intercepted methods of the resource at `path` (empty when it has none)."""
    return INTERCEPTED[package].get(path, ())


def on_wrapped_client(package: str, path: Path) -> dict[str, str]:
    """The methods of the resource at `path` run with the wrapped client (`ON_WRAPPED_CLIENT`)."""
    return ON_WRAPPED_CLIENT[package].get(path, {})


def leads_to_intercepted(package: str, path: Path) -> bool:
    """Whether `path` is an intercepted resource or lies on the way to one (`("beta",)`)."""
    return any(candidate[: len(path)] == path for candidate in INTERCEPTED[package])
