"""HTTP retries are the client's own (`sdk.send.retry`): a wrapped client retries exactly as the bare
one, each compared with the installed bare client on the same fault: the same requests, the same
`x-stainless-retry-count` on each, the same waits (its `_calculate_retry_timeout`, `Retry-After`
honoured; recorded from the client's own `time.sleep` / `anyio.sleep`, never slept), the same
`retries_taken`, the same attempts seen by anthropic's middleware; the caller's own retry-count header
stands, and `Policy.retries` is the `max_retries` only of a caller who set none."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from openai.types.chat import ChatCompletion

import sdk
from sdk import semconv as sc
from sdk.send.retry import max_retries_for
from tests.sdk.helpers import collect, resolve
from tests.sdk.telemetry.test_telemetry_spans import Otel, otel  # noqa: F401
from tests.simulator import ProviderSimulator

USER = [{"role": "user", "content": "hi"}]
CLAUDE = "claude-sonnet-4-6"
COUNT = "x-stainless-retry-count"
SEED = 51  # the clients' backoff jitter draws from `random`: seeded alike for the bare and the wrapped run


@pytest.fixture
def client_sleeps(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """Every wait the clients' own retry loops sleep, recorded instead of slept: their `_base_client`
    modules' `time.sleep` and `anyio.sleep` (the only sleeps of those modules)."""
    slept: list[float] = []

    async def asleep(seconds: float) -> None:
        slept.append(seconds)

    for base in (openai._base_client, anthropic._base_client):
        monkeypatch.setattr(base, "time", SimpleNamespace(sleep=slept.append, time=time.time, time_ns=time.time_ns))
        monkeypatch.setattr(base, "anyio", SimpleNamespace(sleep=asleep))
    yield slept


@dataclass(frozen=True, slots=True)
class Run:
    """What one call did on the wire and what the caller got."""

    retry_counts: list[str | None]  # each request's `x-stainless-retry-count`
    sleeps: list[float]
    error: type[BaseException] | None


def _client(simulator: ProviderSimulator, provider: str, mode: str, **options: Any) -> Any:
    if provider == "openai":
        cls: Any = openai.OpenAI if mode == "sync" else openai.AsyncOpenAI
        return cls(base_url=simulator.openai_base_url, api_key="k", **options)
    cls = anthropic.Anthropic if mode == "sync" else anthropic.AsyncAnthropic
    return cls(base_url=simulator.anthropic_base_url, api_key="k", **options)


def _call(client: Any, provider: str, **extra: Any) -> Any:
    if provider == "openai":
        return client.chat.completions.create(model="m", messages=USER, **extra)
    return client.messages.create(model=CLAUDE, max_tokens=64, messages=USER, **extra)


async def _run(
    simulator: ProviderSimulator,
    sleeps: list[float],
    script: Callable[[ProviderSimulator], None],
    call: Callable[[], Any],
) -> Run:
    random.seed(SEED)
    script(simulator)
    error: type[BaseException] | None = None
    try:
        await resolve(call())
    except (openai.APIError, anthropic.APIError) as raised:
        error = type(raised)
    run = Run([request.headers.get(COUNT) for request in simulator.requests], list(sleeps), error)
    simulator.reset()
    sleeps.clear()
    return run


FAULTS: dict[str, Callable[[ProviderSimulator], None]] = {
    "429 twice, retry-after-ms": lambda sim: sim.fail(429, times=2, headers={"retry-after-ms": "5"}),
    "503, Retry-After: 90": lambda sim: sim.fail(503, headers={"retry-after": "90"}),
    "429, Retry-After over two minutes": lambda sim: sim.fail(429, headers={"retry-after": "600"}),
    "500 on every attempt, no hint": lambda sim: sim.fail(500, times=10),
    "529 once": lambda sim: sim.fail(529, headers={"retry-after-ms": "5"}),
    "500, x-should-retry: false": lambda sim: sim.fail(500, headers={"x-should-retry": "false"}),
    "400, x-should-retry: true": lambda sim: sim.fail(400, headers={"x-should-retry": "true"}),
    "reset before the answer": lambda sim: sim.fail(reset=True),
}


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("fault", FAULTS)
async def test_a_wrapped_client_retries_exactly_as_the_bare_one(simulator, mode, client_sleeps, provider, fault):
    bare = _client(simulator, provider, mode)
    expected = await _run(simulator, client_sleeps, FAULTS[fault], lambda: _call(bare, provider))
    wrapped = sdk.wrap(_client(simulator, provider, mode))

    got = await _run(simulator, client_sleeps, FAULTS[fault], lambda: _call(wrapped, provider))

    assert got == expected
    assert len(got.sleeps) == len(got.retry_counts) - 1 and got.retry_counts[0] == "0"


async def test_a_retry_after_of_90_seconds_is_waited_as_the_bare_client_waits_it(simulator, mode, client_sleeps):
    """Its own `_calculate_retry_timeout` honours up to two minutes (openai 3.x; one minute before): 90 s,
    where kvwise's retries waited about 1 s."""
    script = FAULTS["503, Retry-After: 90"]
    bare = await _run(simulator, client_sleeps, script, lambda: _call(_client(simulator, "openai", mode), "openai"))
    wrapped = sdk.wrap(_client(simulator, "openai", mode))
    got = await _run(simulator, client_sleeps, script, lambda: _call(wrapped, "openai"))
    assert got == bare and got.retry_counts == ["0", "1"]


async def test_the_callers_own_retry_count_header_is_sent_untouched(simulator, mode, client_sleeps):
    header = {"X-Stainless-Retry-Count": "7"}
    script = FAULTS["429 twice, retry-after-ms"]
    bare = await _run(
        simulator,
        client_sleeps,
        script,
        lambda: _call(_client(simulator, "openai", mode), "openai", extra_headers=header),
    )
    wrapped = sdk.wrap(_client(simulator, "openai", mode))
    got = await _run(simulator, client_sleeps, script, lambda: _call(wrapped, "openai", extra_headers=header))
    assert got == bare and got.retry_counts == ["7", "7", "7"]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_raw_response_says_the_retries_taken_as_the_bare_ones_does(
    simulator, mode, client_sleeps, provider, otel
):
    async def retries_taken(client: Any) -> int:
        simulator.fail(503, times=2, headers={"retry-after-ms": "5"})
        resource = client.chat.completions if provider == "openai" else client.messages
        extra = {"model": "m"} if provider == "openai" else {"model": CLAUDE, "max_tokens": 64}
        raw = await resolve(resource.with_raw_response.create(messages=USER, **extra))
        simulator.reset()
        return raw.retries_taken

    bare = await retries_taken(_client(simulator, provider, mode))
    wrapped = sdk.wrap(_client(simulator, provider, mode), tracer_provider=otel.tracer_provider)
    assert await retries_taken(wrapped) == bare == 2
    [span] = [span for span in otel.spans() if span.parent is None]
    assert (span.attributes or {})[sc.KVWISE_ATTEMPTS] == 3  # the client's retries, counted from its answer


async def test_anthropics_middleware_sees_each_attempt_as_it_does_bare(simulator, mode, client_sleeps):
    def client(seen: list[tuple[int, Any]]) -> Any:
        if mode == "sync":

            def note(request: Any, call_next: Any) -> Any:
                seen.append((request.retries_taken, request.cast_to))
                return call_next(request)
        else:

            async def note(request: Any, call_next: Any) -> Any:
                seen.append((request.retries_taken, request.cast_to))
                return await call_next(request)

        return _client(simulator, "anthropic", mode, middleware=[note])

    bare_seen: list[tuple[int, Any]] = []
    wrapped_seen: list[tuple[int, Any]] = []
    script = FAULTS["500 on every attempt, no hint"]
    bare = await _run(simulator, client_sleeps, script, lambda: _call(client(bare_seen), "anthropic"))
    got = await _run(simulator, client_sleeps, script, lambda: _call(sdk.wrap(client(wrapped_seen)), "anthropic"))
    assert got == bare and wrapped_seen == bare_seen == [
        (0, anthropic.types.Message),
        (1, anthropic.types.Message),
        (2, anthropic.types.Message),
    ]
    answers = [await resolve(_call(wrapped, "anthropic")) for wrapped in (client([]), sdk.wrap(client([])))]
    assert type(answers[0]) is type(answers[1]) is anthropic.types.Message


async def test_a_stream_that_anthropics_middleware_made_from_bytes_reads_as_it_does_bare(simulator, mode, otel):
    """A middleware may answer with a response it built itself (a replay, a cache): its HTTP response
    has no request (httpx raises on asking), so no retry count; the caller reads the stream as bare."""

    def client() -> Any:
        made: Any = None

        def answer(request: Any, body: bytes) -> Any:
            cls = anthropic.APIResponse if mode == "sync" else anthropic.AsyncAPIResponse
            raw = httpx2.Response(200, content=body, headers={"content-type": "text/event-stream"})
            return cls(
                raw=raw,
                cast_to=request.cast_to,
                client=made,
                stream=True,
                stream_cls=request.stream_cls,
                options=request.options,
            )

        if mode == "sync":

            def middleware(request: Any, call_next: Any) -> Any:
                return answer(request, call_next(request).http_response.read())
        else:

            async def middleware(request: Any, call_next: Any) -> Any:
                return answer(request, await (await call_next(request)).http_response.aread())

        made = _client(simulator, "anthropic", mode, middleware=[middleware])
        return made

    texts = []
    for make in (lambda bare: bare, lambda bare: sdk.wrap(bare, tracer_provider=otel.tracer_provider)):
        events = await collect(await resolve(_call(make(client()), "anthropic", stream=True)))
        texts.append("".join(event.delta.text for event in events if event.type == "content_block_delta"))
    assert texts[0] == texts[1] == simulator.reply
    [span] = [span for span in otel.spans() if span.parent is None]
    assert (span.attributes or {})[sc.KVWISE_ATTEMPTS] == 1 and sc.ERROR_TYPE not in (span.attributes or {})


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_parsed_answer_counts_the_clients_retries_on_the_span(simulator, mode, client_sleeps, provider, otel):
    """The client's own response wrapper is asked for (`sdk.compat.counting_cast_to`): its `retries_taken` counts."""
    bare = await resolve(_call(_client(simulator, provider, mode), provider))
    wrapped = sdk.wrap(_client(simulator, provider, mode), tracer_provider=otel.tracer_provider)
    simulator.fail(503, times=2, headers={"retry-after-ms": "5"})
    answer = await resolve(_call(wrapped, provider))
    per_answer = {"id", "created"}  # the simulator stamps each answer with its own id and second
    assert type(answer) is type(bare) and answer.model_dump(exclude=per_answer) == bare.model_dump(exclude=per_answer)
    [span] = [span for span in otel.spans() if span.parent is None]
    assert (span.attributes or {})[sc.KVWISE_ATTEMPTS] == 3


async def test_a_retried_stream_and_a_failed_call_count_the_clients_attempts_on_the_span(
    simulator, mode, client_sleeps, otel
):
    wrapped = sdk.wrap(_client(simulator, "openai", mode), tracer_provider=otel.tracer_provider)
    simulator.fail(503, headers={"retry-after-ms": "5"})
    await collect(await resolve(_call(wrapped, "openai", stream=True)))
    simulator.fail(500, times=10)
    with pytest.raises(openai.InternalServerError):
        await resolve(_call(wrapped, "openai"))
    streamed, failed = sorted((span for span in otel.spans() if span.parent is None), key=lambda span: span.start_time)
    assert (streamed.attributes or {})[sc.KVWISE_ATTEMPTS] == 2 and (failed.attributes or {})[sc.KVWISE_ATTEMPTS] == 3


def _attempt(client: Any, where: str, retries: int | None) -> Any:
    """One chat call, with the caller's `max_retries` (None: none) set `where` the caller sets it."""
    if where == "request":  # the request's own options, as a framework posting through the client sets them
        options = {"max_retries": retries} if retries is not None else {}
        body = {"model": "m", "messages": USER}
        return client.post("/chat/completions", cast_to=ChatCompletion, body=body, options=options)
    if where == "with_options" and retries is not None:
        client = client.with_options(max_retries=retries)
    return client.chat.completions.create(model="m", messages=USER)


@pytest.mark.parametrize("retries", [0, 1, None], ids=["max_retries=0", "max_retries=1", "default"])
@pytest.mark.parametrize("where", ["client", "with_options", "request"])
async def test_a_wrapped_client_makes_the_attempts_the_callers_max_retries_allows(
    simulator, mode, client_sleeps, where, retries
):
    def client() -> Any:
        return _client(
            simulator, "openai", mode, **({"max_retries": retries} if where == "client" and retries is not None else {})
        )

    script = FAULTS["500 on every attempt, no hint"]
    bare = await _run(simulator, client_sleeps, script, lambda: _attempt(client(), where, retries))
    got = await _run(simulator, client_sleeps, script, lambda: _attempt(sdk.wrap(client()), where, retries))
    assert got == bare and len(got.retry_counts) == (2 if retries is None else retries) + 1


async def test_policy_retries_is_the_max_retries_of_a_caller_who_set_none(simulator, mode, client_sleeps):
    script = FAULTS["500 on every attempt, no hint"]
    bare = await _run(
        simulator, client_sleeps, script, lambda: _call(_client(simulator, "openai", mode, max_retries=4), "openai")
    )
    wrapped = sdk.wrap(_client(simulator, "openai", mode), sdk.Policy(retries=4))
    got = await _run(simulator, client_sleeps, script, lambda: _call(wrapped, "openai"))
    assert got == bare and got.retry_counts == ["0", "1", "2", "3", "4"]


DEFAULT = openai.DEFAULT_MAX_RETRIES


@pytest.mark.parametrize(
    ("client_retries", "options", "policy_retries", "expected"),
    [
        (DEFAULT, {}, 7, 7),  # the class default: the caller set none
        (DEFAULT, {}, DEFAULT, None),  # the client makes as many anyway: the options go as written
        (0, {}, 7, None),  # the caller's own stands
        (5, {}, 7, None),
        (DEFAULT, {"max_retries": 0}, 7, None),
        (DEFAULT, {"max_retries": openai.NOT_GIVEN}, 7, 7),
        (DEFAULT, {"max_retries": True}, 7, 7),  # not a count
    ],
)
def test_max_retries_for_gives_policy_retries_only_where_the_caller_set_none(
    client_retries, options, policy_retries, expected
):
    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="k", max_retries=client_retries)
    assert max_retries_for(client, options, policy_retries) == expected
