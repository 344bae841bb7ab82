"""Bare client against wrapped client through one framework: record both runs, then compare them.

A scenario is one framework-level task (a plain call, a stream, a tool loop, structured output)
written against a client; `run_pair` plays it once with `sdk.wrap(client, tracer_provider=...)` and
once with the bare client, each on a server whose caches were emptied first, with the same
`Request ID: <uuid>` at the start of the instructions (constant within the run, as an app sets it
per conversation; the same in both runs, because a real tokenizer cuts two IDs into different
numbers of tokens and so moves every cache block boundary after them), and `assert_conforms`
checks what the issue's suite asks:

- the framework-level results and the streamed events are the same;
- the request bodies differ only by the documented rewrites (`normalised` undoes exactly those:
  the context note and the value moved into it, cache hints, canonical tool order, a cap the policy
  filled or lowered, the usage request of a Chat stream) and the wrapped client sends no header the
  bare one does not;
- there is exactly one kvwise CLIENT span per model call, each with `gen_ai.usage.*`, no other
  CLIENT span carrying usage, and no span left open;
- in a tool loop, calls 2..n read at least the bare client's cached tokens.

Input token counts are not compared: the context note's tags add a few tokens by design.
"""

from __future__ import annotations

import inspect
import re
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import sdk
from sdk import semconv as sc
from sdk.prompt.moving import NOTE_CLOSE, NOTE_OPEN
from tests.simulator.records import RecordedRequest

INSTRUCTIONS = "You answer weather questions in one short sentence."
QUESTION = "What is the weather in Paris and in Oslo?"
DOCUMENT = " ".join(f"Report {i}: the forecast service lists cities, skies and winds." for i in range(190))
"""A long user message (~1,900 simulator tokens): its prefix is what a tool loop's next call can read from cache."""
LOCAL_DOCUMENT = " ".join(f"Report {i}: the forecast service lists cities, skies and winds." for i in range(30))
"""The same for the local server (~1,100 of its tokens): the bundled model's context is 2,048."""
LOCAL_MODEL = "tiny"
"""The name `tests.local_backend.serving.served_engine` serves the bundled model under."""
MODEL_PATHS = ("/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/completions")
CAP_KEYS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
CACHE_HINT_KEYS = ("cache_control", "prompt_cache_key")
IGNORED_HEADERS = frozenset({"content-length"})
_NOTE = re.compile(re.escape(NOTE_OPEN) + r".*?" + re.escape(NOTE_CLOSE) + r"\s*", re.DOTALL)
_SIMULATOR_ID = re.compile(r"\b(msg_|cmpl-|chatcmpl-|resp_|call_|toolu_)[0-9a-f]{24}\b")
"""The ids the simulator makes up per answer: the history a framework re-sends carries them."""


@dataclass(frozen=True, slots=True)
class ScenarioOutcome:
    """What a scenario saw at the framework level: its result, its streamed events (framework event
    types and their content, ids left out) and the cached input tokens each model call reported."""

    result: Any
    events: tuple[Any, ...] = ()
    cached: tuple[int, ...] = ()


Scenario = Callable[[Any, str], Awaitable[ScenarioOutcome] | ScenarioOutcome]
"""`scenario(client, instructions)`: the task, through the framework, on `client`."""


class SpanLedger(SpanProcessor):
    """Counts spans started and ended, so a span left open shows."""

    def __init__(self) -> None:
        self.started: dict[int, str] = {}
        self.ended: set[int] = set()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.started[span.context.span_id] = span.name

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None:
            self.ended.add(span.context.span_id)

    @property
    def open(self) -> list[str]:
        return [name for span_id, name in self.started.items() if span_id not in self.ended]


@dataclass(slots=True)
class Run:
    """One play of a scenario: what the framework saw, what the server received, the spans."""

    request_id: str
    outcome: ScenarioOutcome
    requests: list[RecordedRequest]
    spans: list[ReadableSpan] = field(default_factory=list)
    open_spans: list[str] = field(default_factory=list)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [request.body for request in self.requests]


@contextmanager
def recording() -> Iterator[tuple[TracerProvider, InMemorySpanExporter, SpanLedger]]:
    """A real OpenTelemetry SDK provider with an in-memory exporter and a ledger of open spans."""
    exporter, ledger = InMemorySpanExporter(), SpanLedger()
    provider = TracerProvider()
    provider.add_span_processor(ledger)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        yield provider, exporter, ledger
    finally:
        provider.shutdown()


RUN_REQUEST_ID = f"Request ID: {uuid.UUID(int=0x5D1E_7C2B_9A04_4F3E_8B61_2C07_D94A_1E85)}"
EARLIER_REQUEST_ID = f"Request ID: {uuid.UUID(int=0x0B7F_31C8_E256_4A9D_9F13_6E4C_A870_52D1)}"
"""The IDs of a pair's runs and of the wrapped client's earlier conversation: fixed, not drawn per
run, because on the local server the tiny model's greedy answer depends on every prompt byte (with a
drawn ID, a tool loop now and then took another number of model calls)."""


async def _play_once(scenario: Scenario, client: Any, request_id: str) -> ScenarioOutcome:
    outcome = scenario(client, f"{request_id}\n{INSTRUCTIONS}")
    return await outcome if inspect.isawaitable(outcome) else outcome


async def play(
    scenario: Scenario,
    client: Any,
    server: Any,
    request_id: str,
    *,
    wrap: bool,
    policy: sdk.Policy | None = None,
    earlier_conversation: bool = False,
    arm: Callable[[], None] = lambda: None,
) -> Run:
    """Run `scenario` once on `client` (wrapped with `policy` when `wrap`), recording through `server`
    (anything with `requests` and a `reset()` that empties its caches, as the simulator and
    `LocalServer` have). With `earlier_conversation` the client first plays the scenario under
    another request ID, unrecorded: an app's steady state, where kvwise has seen the ID change.
    `arm()` scripts the server after each reset (a loop, faults)."""
    with recording() as (provider, exporter, ledger):
        target = sdk.wrap(client, policy, tracer_provider=provider) if wrap else client
        try:
            if earlier_conversation:
                arm()
                await _play_once(scenario, target, EARLIER_REQUEST_ID)
            server.reset()
            arm()
            exporter.clear()
            outcome = await _play_once(scenario, target, request_id)
        finally:
            closing = client.close()  # an async client left to the garbage collector closes on a dead loop
            if inspect.isawaitable(closing):
                await closing
        requests = [r for r in server.requests if r.method == "POST" and r.path.endswith(MODEL_PATHS)]
        return Run(request_id, outcome, requests, list(exporter.get_finished_spans()), ledger.open)


async def run_pair(
    scenario: Scenario,
    make_client: Callable[[], Any],
    server: Any,
    policy: sdk.Policy | None = None,
    *,
    earlier_conversation: bool = True,
    arm: Callable[[], None] = lambda: None,
) -> tuple[Run, Run]:
    """The wrapped run, then the bare one, on fresh clients from `make_client` (see the module).

    `earlier_conversation` (the default): the wrapped client has served one conversation before,
    under another ID, so kvwise moves this run's ID from its first call on; without it the run is
    the wrapped client's first, where nothing has changed yet and nothing may move."""
    wrapped = await play(
        scenario,
        make_client(),
        server,
        RUN_REQUEST_ID,
        wrap=True,
        policy=policy,
        earlier_conversation=earlier_conversation,
        arm=arm,
    )
    bare = await play(scenario, make_client(), server, RUN_REQUEST_ID, wrap=False, arm=arm)
    return bare, wrapped


async def changing_ids(
    scenario: Scenario, make_client: Callable[[], Any], server: Any, *, wrap: bool, ids: tuple[str, ...] = ()
) -> list[tuple[int, ...]]:
    """Runs of `scenario` on one client (wrapped when `wrap`) from one emptied cache, each under its
    own request ID (`ids`, else two fresh ones: an app's runs, one ID each): each run's cached tokens."""
    server.reset()
    client = make_client()
    target = sdk.wrap(client) if wrap else client
    try:
        return [
            (await _play_once(scenario, target, request_id)).cached
            for request_id in ids or tuple(f"Request ID: {uuid.uuid4()}" for _ in range(2))
        ]
    finally:
        closing = client.close()
        if inspect.isawaitable(closing):
            await closing


async def assert_a_new_id_reads_the_stable_prefix(
    scenario: Scenario, make_client: Callable[[], Any], server: Any
) -> None:
    """A tool loop whose ID changes per run: the wrapped client's second run reads, on its first call,
    at least `STABLE_READ_SHARE` of the stable prefix (what a second run reads there when the ID stays
    the same: the bare client's, or the wrapped one's where the framework marks no breakpoint and the
    bare client reads nothing on Anthropic), where the bare client with a new ID reads nothing; and
    every call reads at least the bare client's cached tokens."""
    same = (RUN_REQUEST_ID, RUN_REQUEST_ID)
    stable = max(
        [(await changing_ids(scenario, make_client, server, wrap=wrap, ids=same))[1][0] for wrap in (False, True)]
    )
    bare = await changing_ids(scenario, make_client, server, wrap=False)
    wrapped = await changing_ids(scenario, make_client, server, wrap=True)
    assert stable > 1000 and bare[1][0] == 0, (stable, bare)
    assert wrapped[1][0] >= STABLE_READ_SHARE * stable, (wrapped, stable)
    for ours, theirs in zip(wrapped, bare):
        assert len(ours) == len(theirs) and all(mine >= its for mine, its in zip(ours, theirs)), (wrapped, bare)


STABLE_READ_SHARE = 0.9
RETRY_AT_ONCE = {"retry-after-ms": "1"}
"""The header a scripted 429 carries, so every retry (the client's or kvwise's) waits a millisecond."""


async def attempts(scenario: Scenario, client: Any, server: Any, arm: Callable[[], None], *, wrap: bool) -> int:
    """How many model requests `server` received while `scenario` ran on `client` (wrapped when
    `wrap`) against the faults `arm()` scripts; the scenario's own error, if any, is expected."""
    server.reset()
    arm()
    target = sdk.wrap(client) if wrap else client
    try:
        await _play_once(scenario, target, EARLIER_REQUEST_ID)
    except Exception:  # noqa: BLE001 - the scripted faults outlast every retry
        pass
    finally:
        closing = client.close()
        if inspect.isawaitable(closing):
            await closing
    return sum(1 for r in server.requests if r.method == "POST" and r.path.endswith(MODEL_PATHS))


async def attempts_pair(
    scenario: Scenario, make_client: Callable[[], Any], server: Any, arm: Callable[[], None]
) -> tuple[int, int]:
    """Model requests sent under the same faults: by the bare client, then by the wrapped one."""
    bare = await attempts(scenario, make_client(), server, arm, wrap=False)
    return bare, await attempts(scenario, make_client(), server, arm, wrap=True)


# -- comparisons --------------------------------------------------------------------------------


def assert_conforms(bare: Run, wrapped: Run, *, scripted: bool = True, policy: sdk.Policy | None = None) -> None:
    """Every check of the module docstring that applies to any scenario.

    `scripted=False` for a real model (the local server): the two runs' prompts differ by the
    rewrites, so its answers may too; then the results and the model's own turns re-sent in the
    history are not compared, only everything the caller wrote."""
    calls = len(bare.requests)
    assert calls >= 1, "the bare run sent no model request"
    assert len(wrapped.requests) == calls, (len(wrapped.requests), calls)
    if scripted:
        assert wrapped.outcome.result == bare.outcome.result
        assert wrapped.outcome.events == bare.outcome.events
    assert_same_bodies(bare, wrapped, policy or sdk.Policy(), scripted)
    assert_no_new_headers(bare, wrapped)
    assert_one_span_per_call(wrapped, calls)
    assert_instructions_keep_the_id(bare)


def assert_same_bodies(bare: Run, wrapped: Run, policy: sdk.Policy, scripted: bool = True) -> None:
    for index, (before, after) in enumerate(zip(bare.bodies, wrapped.bodies), start=1):
        assert_cap_allowed(before, after, policy)
        ours, theirs = normalised(after, wrapped.request_id, before), normalised(before, bare.request_id, before)
        if not scripted:
            ours, theirs = _model_turns_blanked(ours), _model_turns_blanked(theirs)
        assert ours == theirs, f"call {index}"


def assert_cap_allowed(bare: dict[str, Any], wrapped: dict[str, Any], policy: sdk.Policy) -> None:
    """A cap may be filled where the caller set none, or lowered to the policy's; never raised."""
    for key in CAP_KEYS:
        if key in wrapped:
            limit = bare.get(key)
            assert wrapped[key] <= (limit if limit is not None else policy.max_output_tokens), (
                key,
                wrapped[key],
                limit,
            )


def assert_no_new_headers(bare: Run, wrapped: Run) -> None:
    for before, after in zip(bare.requests, wrapped.requests):
        added = set(after.headers) - set(before.headers) - IGNORED_HEADERS
        assert not added, f"headers the bare client does not send: {sorted(added)}"


def client_spans(run: Run) -> list[ReadableSpan]:
    return [span for span in run.spans if span.kind is SpanKind.CLIENT]


def kvwise_spans(run: Run) -> list[ReadableSpan]:
    return [
        span
        for span in client_spans(run)
        if span.instrumentation_scope is not None and span.instrumentation_scope.name == sc.INSTRUMENTATION_SCOPE
    ]


def assert_one_span_per_call(run: Run, calls: int) -> None:
    assert not run.open_spans, f"spans left open: {run.open_spans}"
    ours = kvwise_spans(run)
    assert len(ours) == calls, [span.name for span in client_spans(run)]
    for span in ours:
        attributes = dict(span.attributes or {})
        assert sc.GEN_AI_USAGE_INPUT_TOKENS in attributes and sc.GEN_AI_USAGE_OUTPUT_TOKENS in attributes, span.name
    with_usage = [span for span in client_spans(run) if sc.GEN_AI_USAGE_INPUT_TOKENS in (span.attributes or {})]
    assert len(with_usage) == calls, "a model call counted twice"


def span_cached(run: Run) -> list[int]:
    """The cache-read tokens each kvwise span recorded, in call order."""
    ordered = sorted(kvwise_spans(run), key=lambda span: span.start_time or 0)
    return [int((span.attributes or {}).get(sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, 0)) for span in ordered]


def assert_instructions_keep_the_id(bare: Run) -> None:
    """The scenario itself: every bare call's instructions start with the run's request ID."""
    for body in bare.bodies:
        assert instructions_text(body).startswith(bare.request_id), instructions_text(body)[:80]


def assert_cache_holds(bare: Run, wrapped: Run) -> None:
    """A tool loop: calls 2..n of the wrapped run read at least the bare run's cached tokens."""
    assert len(bare.outcome.cached) >= 3, bare.outcome.cached
    assert len(wrapped.outcome.cached) == len(bare.outcome.cached), (wrapped.outcome.cached, bare.outcome.cached)
    for index, (plain, ours) in enumerate(zip(bare.outcome.cached[1:], wrapped.outcome.cached[1:]), start=2):
        assert ours >= plain, (
            f"call {index}: wrapped read {ours} cached tokens, bare {plain} "
            f"({wrapped.outcome.cached} vs {bare.outcome.cached})"
        )
    assert span_cached(wrapped) == list(wrapped.outcome.cached)


def instructions_text(body: dict[str, Any]) -> str:
    """The system prompt or instructions of a request body, as one text."""
    if body.get("instructions"):
        return str(body["instructions"])
    if "system" in body:
        return "".join(part.get("text", "") for part in _parts(body["system"]))
    messages = body.get("messages") or (body["input"] if isinstance(body.get("input"), list) else [])
    for message in messages:
        if message.get("role") in ("system", "developer"):
            return "".join(part.get("text", "") for part in _parts(message.get("content")))
    return ""


def normalised(body: dict[str, Any], request_id: str, bare: dict[str, Any]) -> dict[str, Any]:
    """`body` with exactly the documented rewrites undone (see the module docstring); `bare` is the
    bare client's body for the same call, which says what the caller set."""
    out = {key: _text_free(value, request_id) for key, value in _without_hints(body).items()}
    for key in CAP_KEYS:
        out.pop(key, None)
    if bare.get("stream") and "stream_options" not in bare:
        out.pop("stream_options", None)
    if isinstance(out.get("tools"), list):
        out["tools"] = sorted(out["tools"], key=lambda tool: str((tool.get("function") or tool).get("name")))
    for key in ("messages", "input"):
        if isinstance(out.get(key), list):
            out[key] = [message for message in out[key] if not _emptied(message)]
    if "system" in out:
        out["system"] = _parts(out["system"])
    return out


_MODEL_TURN = "<the model's turn>"


def _model_turns_blanked(body: dict[str, Any]) -> dict[str, Any]:
    """`body` with what the model wrote, and the tool results computed from it, blanked out."""

    def blank(message: Any) -> Any:
        if not isinstance(message, dict):
            return message
        if message.get("role") in ("assistant", "tool") or message.get("type") in (
            "function_call",
            "function_call_output",
        ):
            return {"role": message.get("role"), "type": message.get("type"), "turn": _MODEL_TURN}
        if isinstance(message.get("content"), list):
            parts = [
                {"type": "tool_result", "content": _MODEL_TURN} if part.get("type") == "tool_result" else part
                for part in message["content"]
            ]
            return {**message, "content": parts}
        return message

    out = dict(body)
    for key in ("messages", "input"):
        if isinstance(out.get(key), list):
            out[key] = [blank(message) for message in out[key]]
    return out


def _without_hints(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_hints(item) for key, item in value.items() if key not in CACHE_HINT_KEYS}
    if isinstance(value, list):
        return [_without_hints(item) for item in value]
    return value


def _text_free(value: Any, request_id: str) -> Any:
    """Texts without the context note and the request ID line, wherever they sit; text parts left
    empty by that are dropped; content given as a string becomes one text part."""
    if isinstance(value, str):
        return _SIMULATOR_ID.sub(r"\1<id>", _NOTE.sub("", value).replace(request_id, "")).strip()
    if isinstance(value, list):
        items = [_text_free(item, request_id) for item in value]
        return [item for item in items if not _empty_text_part(item)]
    if isinstance(value, dict):
        out = {key: _text_free(item, request_id) for key, item in value.items()}
        if isinstance(out.get("content"), str) and out.get("role") in ("user", "system", "developer", "assistant"):
            out["content"] = _parts(out["content"])
        return out
    return value


def _empty_text_part(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") in ("text", "input_text") and not item.get("text")


def _parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [part for part in content or [] if isinstance(part, dict)]


def _emptied(message: Any) -> bool:
    """A message that held only the context note."""
    return isinstance(message, dict) and message.get("role") == "user" and message.get("content") == []
