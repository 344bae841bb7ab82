"""The provider-neutral call: what every middleware step reads and rewrites.

An adapter turns an API's native keyword arguments into a `Call` and back. The prompt is split into
the stability tiers of canonical order (tools, system, history, final user turn); each tier keeps
the native dicts so unknown content shapes (images, audio, tool results) pass through untouched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar


class Api(StrEnum):
    """The intercepted APIs."""

    CHAT = "chat.completions"
    RESPONSES = "responses"
    MESSAGES = "messages"
    COMPLETIONS = "completions"  # legacy text completions (`client.completions.create`)


class Provider(str):
    """Who serves the call: the key of its module in `sdk.providers`, whose facts decide the cache hints.

    Open, not an enum, so that a provider is one new module: it names itself (`Provider("acme")`) and
    registers its facts. The shipped ones are `OPENAI`, `ANTHROPIC` and `OPENAI_COMPATIBLE`; compare with `==`.
    """

    __slots__ = ()

    OPENAI: ClassVar[Provider]
    ANTHROPIC: ClassVar[Provider]
    OPENAI_COMPATIBLE: ClassVar[Provider]


Provider.OPENAI = Provider("openai")
Provider.ANTHROPIC = Provider("anthropic")
Provider.OPENAI_COMPATIBLE = Provider("openai_compatible")


Server = tuple[str | None, int | None]
"""The server a call goes to: host and port as the client's base URL names them (either may be unknown)."""


@dataclass(frozen=True, slots=True)
class OutputCap:
    """The output-token limit a request carries, decided once by the decode limits and read by every later layer.

    `tokens` is the value sent (reasoning and thinking included, where the API counts them in it);
    `param` the native parameter carrying it; `in_extra_body` whether it travels in `extra_body`
    (which the client merges over the named parameters); `source` who set it (a
    `sdk.semconv.CapSource`: "policy", "caller", "adaptive"); `clamped_from` the caller's
    own value where kvwise lowered it (None: kvwise filled a missing limit, or kept the caller's).
    """

    tokens: int
    param: str
    in_extra_body: bool = False
    source: str = "policy"
    clamped_from: int | None = None


STREAM_USAGE_REQUESTED = "stream_usage_requested"
"""The span's change when kvwise sends a stream with `stream_options.include_usage` the caller did not
ask for (`Decisions.stream_usage_added`)."""
STREAM_USAGE_REFUSED = "stream_usage_refused"
"""The span's change when the server refuses `stream_options`: none is added (`Decisions.stream_usage_refused`).
Both live here, beside the decisions they record, so that the Chat adapter that adds the field and
`sdk.send.stream_options` that takes it back share them without importing each other."""


@dataclass(slots=True)
class Decisions:
    """What kvwise decided about one call and why, apart from what it sends: each field is written by the
    step that decides it and read by the later steps and the span (`kvwise.*` request attributes).

    `changes` lists the additions, what kvwise rewrote, for the span alone: no decision reads it.
    `fingerprint` is the hash chain of the call's segments, `prefix_key` the hash of tools and system
    prompt as sent (`sdk.cache.fingerprint`); `break_at` and `break_cause` where and why the cache
    broke since the previous call of its API and model. `stream_usage_added`: kvwise asked the stream
    for its usage (`stream_options.include_usage`) where the caller did not; `stream_usage_refused`:
    the server refuses `stream_options`, so none is added (`sdk.send.stream_options`). `taken_back`:
    a server refused something kvwise added and the call was sent again without it, so `changes`
    grew after the span started (`sdk.send.refusals`); `cap_refused`: what it refused was kvwise's
    output limit (`sdk.decode.limits`). `store_outage`: why the memory's store failed this call
    (`sdk.memory.redis_store`), before its send or at its fan-out join, which then went on with
    in-process memories. `expected_read` the tokens its provider should read from
    the cache (`sdk.cache.expected_reads`), and `read_miss`, once it answered, how many it missed and
    why (None: no miss). `family` is the id of the call's prompt family and `stable_kept` the share of
    its system prompt's stable bytes kept from the family's previous call (`sdk.prompt.families`).
    """

    changes: list[str] = field(default_factory=list)
    fingerprint: str | None = None
    prefix_key: str | None = None
    break_at: str | None = None
    break_cause: str | None = None
    stream_usage_added: bool = False
    stream_usage_refused: bool = False
    taken_back: bool = False
    cap_refused: bool = False
    store_outage: str | None = None
    expected_read: Expectation | None = None
    read_miss: Miss | None = None
    family: str | None = None
    stable_kept: float | None = None


@dataclass(slots=True)
class Call:
    """One request in neutral form, and what kvwise decided about it (`decided`).

    `tools` are native tool definitions; `system` is a list of native text parts
    (`{"type": "text", "text": ...}`); `messages` are the native turns after the system prompt,
    the final user turn included; `params` holds every other native keyword argument.
    `given` names the tier parameters the caller passed (`tools`, `system`, `input`): they are sent
    back even when empty, since `tools=[]` is not an absent `tools`. `cap` is the decode limits' decision
    (None: the request carries no output limit) and `client_stops` the stop sequences kvwise enforces
    itself: both shape what is sent and how it is read. `context_note` holds the lines of the tail note
    (`sdk.prompt.moving`: values that change within a conversation), which the next call of the
    conversation will not re-send where this one has them. `endpoint`: who the call goes to beyond its
    provider and model (its base URL and a hash of its key). `takes`: the keyword parameters the
    client's method takes (None: any), probed from the installed client, so a parameter an older
    release lacks is sent another way or not at all (`sdk.cache.hints`).
    """

    api: Api
    provider: Provider
    model: str
    tools: list[Any]
    system: list[dict[str, Any]]
    messages: list[Any]
    params: dict[str, Any]
    system_was_string: bool = False
    context_note: list[str] = field(default_factory=list)
    client_stops: tuple[str, ...] = ()
    given: frozenset[str] = frozenset()
    cap: OutputCap | None = None
    endpoint: object = None
    takes: frozenset[str] | None = None
    decided: Decisions = field(default_factory=Decisions)

    @property
    def stream(self) -> bool:
        """Whether the caller asked for a stream."""
        return self.params.get("stream") is True

    @property
    def history_end(self) -> int:
        """Index of the final user turn in `messages`: turns before it are history (stable)."""
        for index in range(len(self.messages) - 1, -1, -1):
            message = self.messages[index]
            if isinstance(message, dict) and message.get("role") == "user":
                return index
        return len(self.messages)


@dataclass(slots=True)  # not frozen, as `sdk.lifecycle.CallEnd`: built on every answer, never changed once built
class Usage:
    """Token usage of one call, normalised across APIs.

    `input_tokens` counts ALL input tokens, cached ones included (for Anthropic that is
    input + cache_read + cache_creation), as the GenAI semantic conventions define it.
    `cache_write_1h_tokens` is the part of `cache_write_tokens` written with a one-hour TTL
    (Anthropic's `cache_creation.ephemeral_1h_input_tokens`): those writes cost more.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    cache_write_1h_tokens: int = 0

    @property
    def hit_ratio(self) -> float:
        """Cache-read tokens over all input tokens (0 when there was no input)."""
        return self.cache_read_tokens / self.input_tokens if self.input_tokens else 0.0


@dataclass(frozen=True, slots=True)
class Expectation:
    """The cached tokens a call should read (`sdk.cache.expected_reads`), a miss cause known before its answer
    (a `sdk.semconv.MissCause` value; None: none), and whether the request carries
    breakpoints of an explicit cache (a provider honouring them writes or reads)."""

    tokens: int
    cause: str | None
    explicit: bool


@dataclass(frozen=True, slots=True)
class Miss:
    """A call that read fewer cached tokens than expected: how many it should have read, missed, and why
    (a `sdk.semconv.MissCause` value)."""

    expected: int
    missed: int
    cause: str
