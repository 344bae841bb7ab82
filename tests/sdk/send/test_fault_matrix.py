"""The SDK against every wire fault the provider simulator scripts: one table, both clients, each
run beside the bare client on the same fault.

Each fault case runs for Chat Completions, Responses and Messages, streamed and not (where the fault
applies), and through anthropic's `messages.stream()` helper, sync and async; the faults of a 200
that breaks (issue 41) also through openai's `chat.completions.stream()`, `parse` and both clients'
`with_raw_response`. Each run checks: how many POSTs reached the simulator (never more than the bare
client's: a request the provider accepted is never sent again), the exception the caller sees (the
bare client's class or a subclass of it, `sdk.StreamTruncated` included; none where the bare client
raises none), what the caller received (a completed answer is the whole reply; partial text comes
with an error, or with an end the bare client accepts too, which the span marks
`kvwise.stream.end_marker=false`), and what the call span recorded (`error.type`,
`kvwise.attempts`). The retries are the client's own, so the waits between attempts are the
client's: recorded from its own sleeps, not slept, and the wrapped run's are the bare run's. The
matrix is printed when the module ends: `pytest -s tests/sdk/send/test_fault_matrix.py`.
"""

from __future__ import annotations

import email.utils
import enum
import random
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import anthropic
import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import sdk
from sdk import semconv as sc
from tests.sdk.helpers import http_library, resolve
from tests.sdk.send.test_retry import client_sleeps  # noqa: F401
from tests.simulator import ProviderSimulator

USER = [{"role": "user", "content": "Tell me something."}]
CLAUDE = "claude-sonnet-4-6"
CUT_AT = 3  # content tokens sent before a mid-stream fault
RETRIES = sdk.Policy().retries
EVERY_ATTEMPT = RETRIES + 1
CALL_TIMEOUT = 10.0  # every client has one, so no case can hang
READ_TIMEOUT = 1.0  # the read-timeout cases' client timeout ...
STALL = 3.0  # ... and how long the simulator stalls: well past it
BACKOFF = (0.0, max(openai._constants.MAX_RETRY_DELAY, anthropic._constants.MAX_RETRY_DELAY))  # the clients' backoff
DATE_AHEAD = 30.0  # an HTTP-date Retry-After this far ahead (under the cap)
DATE_SLACK = 2.0  # an HTTP date counts whole seconds from when each run scripted it: the runs' waits differ by that
QUICK = {"retry-after-ms": "5"}


class Got(enum.Enum):
    """What reached the caller."""

    FULL = "the full reply"
    PARTIAL = "partial text"
    NOTHING = "no text"


ALL_FORMS = (
    "chat",
    "responses",
    "messages",
    "messages.stream",
    "chat.stream",
    "chat.parse",
    "messages.parse",
    "chat.raw",
    "messages.raw",
)
CORE_FORMS = ALL_FORMS[:4]


@dataclass(frozen=True, slots=True)
class FaultCase:
    """One fault and what the SDK must make of it.

    `attempts`: requests the simulator saw; the span's `kvwise.attempts` too, unless `refused` (the
    simulator then sees none and the span counts every try). `raises`: the exception's class name
    per API, None when the call raises nothing (it completes, unless `got` says otherwise). `waits`:
    bounds of every wait between attempts, checked when given (a stream reopened before its first
    content chunk is sent again at once).
    """

    name: str
    script: Callable[[ProviderSimulator], None]
    attempts: int
    raises: Mapping[str, str] | None = None
    got: Got = Got.FULL
    streams: tuple[bool, ...] = (False, True)
    waits: tuple[float, float] | None = None
    refused: bool = False
    timeout: float = CALL_TIMEOUT
    forms: tuple[str, ...] = CORE_FORMS

    @property
    def span_attempts(self) -> int:
        return EVERY_ATTEMPT if self.refused else self.attempts


def same(name: str) -> dict[str, str]:
    """The same exception class name from both clients."""
    return {"chat": name, "messages": name}


def fail(status: int, headers: Mapping[str, str] | None = None, times: int = 1) -> Callable[[ProviderSimulator], None]:
    return lambda sim: sim.fail(status, times=times, headers=headers)


def retry_after_date(sim: ProviderSimulator) -> None:
    sim.fail(429, headers={"retry-after": email.utils.formatdate(time.time() + DATE_AHEAD, usegmt=True)})


def cut(mode: str, times: int = 1, at: int = CUT_AT) -> Callable[[ProviderSimulator], None]:
    return lambda sim: sim.cut_stream_after(at, mode=mode, times=times)  # type: ignore[arg-type]


def inject(kind: str, at_token: int = CUT_AT) -> Callable[[ProviderSimulator], None]:
    return lambda sim: sim.inject_event(kind, at_token=at_token)  # type: ignore[arg-type]


def nothing(sim: ProviderSimulator) -> None:
    """No fault scripted: the case's fault is outside the simulator."""


STREAMS, WHOLE = (True,), (False,)
TRUNCATED = same("StreamTruncated")  # as the client's APIConnectionError, or APITimeoutError for a timeout
NOT_JSON = same("JSONDecodeError")
OVER_TWO_MINUTES = {
    "retry-after": "600"
}  # openai's own retries refuse a Retry-After over 2 minutes; anthropic's wait it out
CASES = [
    FaultCase("429, retry-after: 1 (seconds)", fail(429, {"retry-after": "1"}), 2, waits=(1.0, 1.0)),
    FaultCase("429, retry-after: HTTP date", retry_after_date, 2, waits=(DATE_AHEAD - 10, DATE_AHEAD)),
    FaultCase("429, retry-after-ms: 5", fail(429, QUICK), 2, waits=(0.005, 0.005)),
    FaultCase(
        "429, retry-after over two minutes (openai: not retried)",
        fail(429, OVER_TWO_MINUTES),
        1,
        same("RateLimitError"),
        Got.NOTHING,
        forms=("chat", "responses"),
    ),
    FaultCase(
        "429, retry-after over two minutes (anthropic: retried)",
        fail(429, OVER_TWO_MINUTES),
        2,
        waits=(600.0, 600.0),
        forms=("messages", "messages.stream"),
    ),
    FaultCase(
        "429 without retry-after, every attempt",
        fail(429, times=EVERY_ATTEMPT),
        EVERY_ATTEMPT,
        same("RateLimitError"),
        Got.NOTHING,
        waits=BACKOFF,
    ),
    FaultCase(
        "500, every attempt",
        fail(500, times=EVERY_ATTEMPT),
        EVERY_ATTEMPT,
        same("InternalServerError"),
        Got.NOTHING,
        waits=BACKOFF,
    ),
    FaultCase("502 once", fail(502, QUICK), 2),
    FaultCase("503 once", fail(503, QUICK), 2),
    FaultCase(
        "500 with x-should-retry: false",
        fail(500, {"x-should-retry": "false"}),
        1,
        same("InternalServerError"),
        Got.NOTHING,
    ),
    FaultCase("400 with x-should-retry: true", fail(400, {"x-should-retry": "true", **QUICK}), 2),
    FaultCase(
        "529, every attempt",
        fail(529, QUICK, times=EVERY_ATTEMPT),
        EVERY_ATTEMPT,
        {"chat": "InternalServerError", "messages": "OverloadedError"},
        Got.NOTHING,
    ),
    FaultCase("connection refused", nothing, 0, same("APIConnectionError"), Got.NOTHING, waits=BACKOFF, refused=True),
    FaultCase("reset before the first byte", lambda sim: sim.fail(reset=True), 2),
    FaultCase("reset mid-stream", cut("reset"), 1, TRUNCATED, Got.PARTIAL, STREAMS),
    FaultCase("drop mid-stream", cut("drop"), 1, TRUNCATED, Got.PARTIAL, STREAMS),
    FaultCase("clean end without the final event", cut("end"), 1, None, Got.PARTIAL, STREAMS),
    FaultCase("reset mid-body", cut("reset"), 2, streams=WHOLE),
    FaultCase("drop mid-body", cut("drop"), 2, streams=WHOLE),
    FaultCase("read timeout before the answer", lambda sim: sim.stall(STALL), 2, streams=WHOLE, timeout=READ_TIMEOUT),
    FaultCase(
        "read timeout between chunks",
        lambda sim: sim.stall(STALL, at_token=CUT_AT),
        1,
        TRUNCATED,
        Got.PARTIAL,
        STREAMS,
        timeout=READ_TIMEOUT,
    ),
    FaultCase(
        "bad JSON in a data: line mid-stream", inject("bad_json"), 1, NOT_JSON, Got.PARTIAL, STREAMS, forms=ALL_FORMS
    ),
    FaultCase("unknown event type", inject("unknown"), 1, streams=STREAMS),
    FaultCase(
        "error event mid-stream",
        inject("error"),
        1,
        {"chat": "APIError", "messages": "APIStatusError"},
        Got.PARTIAL,
        STREAMS,
    ),
    # A 200 that breaks before its first content: accepted by the provider, so sent once (issue 41).
    FaultCase(
        "200, role chunk, then the connection closes",
        cut("drop", at=0),
        1,
        TRUNCATED,
        Got.NOTHING,
        STREAMS,
        forms=ALL_FORMS,
    ),
    FaultCase("200, role chunk, then a reset", cut("reset", at=0), 1, TRUNCATED, Got.NOTHING, STREAMS),
    FaultCase("200, role chunk, then the body ends", cut("end", at=0), 1, None, Got.NOTHING, STREAMS, forms=ALL_FORMS),
    FaultCase(
        "200, an invalid first event",
        inject("bad_json", at_token=0),
        1,
        NOT_JSON,
        Got.NOTHING,
        STREAMS,
        forms=ALL_FORMS,
    ),
    FaultCase(
        "200, an HTML page instead of the stream",
        lambda sim: sim.serve_html(times=EVERY_ATTEMPT),
        1,
        None,
        Got.NOTHING,
        STREAMS,
        forms=ALL_FORMS,
    ),
    FaultCase(
        "200, then the server hangs after the headers",
        lambda sim: sim.stall(STALL, times=EVERY_ATTEMPT),
        1,
        TRUNCATED,
        Got.NOTHING,
        STREAMS,
        timeout=READ_TIMEOUT,
        forms=(*CORE_FORMS, "chat.raw"),
    ),
    FaultCase(
        "200, a body that is not JSON",
        cut("end", times=EVERY_ATTEMPT),
        1,
        NOT_JSON,
        Got.NOTHING,
        WHOLE,
        forms=ALL_FORMS,
    ),
]
"""The faults of issue 41's "Why" are the `200, ...` cases and the bad JSON mid-stream; a hanging
server's time to raise is checked against the client's own timeout in `test_a_hanging_stream_raises_
after_the_clients_own_timeout_once`."""


@dataclass(frozen=True, slots=True)
class ApiUnderTest:
    """How to call one API and read its answers, whole or streamed."""

    title: str
    client_fixture: str
    module: ModuleType
    create: Callable[[Any, bool], Any]
    text: Callable[[Any], str]
    events: Callable[[Any], AsyncIterator[Any]]
    event_text: Callable[[Any], str]
    is_final: Callable[[Any], bool]
    errors_as: str  # the key of `Case.raises` that holds this API's exception
    streams: tuple[bool, ...] = (False, True)
    unwrap: Callable[[Any], Any] = lambda result: result  # a raw response's `.parse()`


async def events_of(stream: Any) -> AsyncIterator[Any]:
    """The events of a sync or async stream, one at a time (so a later error keeps the earlier ones)."""
    if hasattr(stream, "__aiter__"):
        async for event in stream:
            yield event
    else:
        for event in stream:
            yield event


async def managed_events_of(manager: Any) -> AsyncIterator[Any]:
    """The events of the stream a sync or async `messages.stream()` manager opens."""
    if hasattr(manager, "__aenter__"):
        async with manager as stream:
            async for event in stream:
                yield event
    else:
        with manager as stream:
            for event in stream:
                yield event


def _messages_event_text(event: Any) -> str:
    return event.delta.text if event.type == "content_block_delta" else ""


def _is_message_stop(event: Any) -> bool:
    return event.type == "message_stop"


APIS = {
    "chat": ApiUnderTest(
        "openai chat",
        "openai_client",
        openai,
        lambda client, stream: client.chat.completions.create(model="m", messages=USER, stream=stream),
        lambda response: response.choices[0].message.content,
        events_of,
        lambda event: (event.choices[0].delta.content or "") if event.choices else "",
        lambda event: bool(event.choices) and event.choices[0].finish_reason is not None,
        "chat",
    ),
    "responses": ApiUnderTest(
        "openai responses",
        "openai_client",
        openai,
        lambda client, stream: client.responses.create(model="gpt-5.4", input="Tell me something.", stream=stream),
        lambda response: response.output_text,
        events_of,
        lambda event: event.delta if event.type == "response.output_text.delta" else "",
        lambda event: event.type in ("response.completed", "response.incomplete"),
        "chat",
    ),
    "messages": ApiUnderTest(
        "anthropic messages",
        "anthropic_client",
        anthropic,
        lambda client, stream: client.messages.create(model=CLAUDE, max_tokens=64, messages=USER, stream=stream),
        lambda response: response.content[0].text,
        events_of,
        _messages_event_text,
        _is_message_stop,
        "messages",
    ),
    "messages.stream": ApiUnderTest(
        "anthropic messages.stream()",
        "anthropic_client",
        anthropic,
        lambda client, _: client.messages.stream(model=CLAUDE, max_tokens=64, messages=USER),
        lambda response: response.content[0].text,
        managed_events_of,
        _messages_event_text,
        _is_message_stop,
        "messages",
        streams=(True,),
    ),
    "chat.stream": ApiUnderTest(
        "openai chat.completions.stream()",
        "openai_client",
        openai,
        lambda client, _: client.chat.completions.stream(model="m", messages=USER),
        lambda response: response.choices[0].message.content,
        managed_events_of,
        lambda event: event.delta if event.type == "content.delta" else "",
        lambda event: (
            event.type == "chunk" and bool(event.chunk.choices) and event.chunk.choices[0].finish_reason is not None
        ),
        "chat",
        streams=(True,),
    ),
    "chat.parse": ApiUnderTest(
        "openai chat.completions.parse()",
        "openai_client",
        openai,
        lambda client, _: client.chat.completions.parse(model="m", messages=USER),
        lambda response: response.choices[0].message.content,
        events_of,
        lambda event: "",
        lambda event: False,
        "chat",
        streams=(False,),
    ),
    "messages.parse": ApiUnderTest(
        "anthropic messages.parse()",
        "anthropic_client",
        anthropic,
        lambda client, _: client.messages.parse(model=CLAUDE, max_tokens=64, messages=USER),
        lambda response: response.content[0].text,
        events_of,
        lambda event: "",
        lambda event: False,
        "messages",
        streams=(False,),
    ),
    "chat.raw": ApiUnderTest(
        "openai chat with_raw_response",
        "openai_client",
        openai,
        lambda client, stream: client.chat.completions.with_raw_response.create(
            model="m", messages=USER, stream=stream
        ),
        lambda response: response.choices[0].message.content,
        events_of,
        lambda event: (event.choices[0].delta.content or "") if event.choices else "",
        lambda event: bool(event.choices) and event.choices[0].finish_reason is not None,
        "chat",
        unwrap=lambda raw: raw.parse(),
    ),
    "messages.raw": ApiUnderTest(
        "anthropic messages with_raw_response",
        "anthropic_client",
        anthropic,
        lambda client, stream: client.messages.with_raw_response.create(
            model=CLAUDE, max_tokens=64, messages=USER, stream=stream
        ),
        lambda response: response.content[0].text,
        events_of,
        _messages_event_text,
        _is_message_stop,
        "messages",
        unwrap=lambda raw: raw.parse(),
    ),
}


@dataclass(frozen=True, slots=True)
class Observed:
    """What one run showed (its waits aside): a line of the printed matrix."""

    attempts: int
    exception: str
    got: Got
    error_type: str
    span_attempts: int


Matrix = dict[tuple[str, str, bool], list[tuple[Observed, list[float]]]]


@dataclass(slots=True)
class Received:
    """What the caller received: text, whether the final event or whole answer came, the exception."""

    text: str = ""
    completed: bool = False
    error: BaseException | None = None

    @property
    def got(self) -> Got:
        if self.completed and self.error is None:
            return Got.FULL
        return Got.PARTIAL if self.text else Got.NOTHING


@pytest.fixture(scope="module")
def matrix() -> Iterator[Matrix]:
    """Rows collected by every run; printed as one table when the module ends."""
    rows: Matrix = {}
    yield rows
    print("\n" + render(rows))


def render(rows: Matrix) -> str:
    """A Markdown table: one line per case, API and streaming (sync and async merged where they agree)."""
    lines = [
        "| fault | API | streamed | attempts | caller sees | caller got"
        " | span error.type | kvwise.attempts | waits (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    order = {case.name: index for index, case in enumerate(CASES)}
    for (case, api, streamed), runs in sorted(
        rows.items(), key=lambda item: (order[item[0][0]], item[0][1], item[0][2])
    ):
        waits = sorted({f"{wait:.3g}" for _, run_waits in runs for wait in run_waits}, key=float)
        shown = "-" if not waits else waits[0] if len(waits) == 1 else f"{waits[0]}–{waits[-1]}"
        for seen in dict.fromkeys(observed for observed, _ in runs):
            cells = [
                case,
                APIS[api].title,
                "yes" if streamed else "no",
                str(seen.attempts),
                seen.exception,
                seen.got.value,
                seen.error_type,
                str(seen.span_attempts),
                shown,
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


@pytest.fixture
def waits(client_sleeps: list[float]) -> list[float]:  # noqa: F811
    """Every wait the clients' own retries choose, recorded instead of slept (`test_retry.client_sleeps`)."""
    return client_sleeps


@pytest.fixture
def refused_url() -> Iterator[str]:
    """A loopback address whose port is bound but never listens: every connection is refused."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{bound.getsockname()[1]}"


async def call(api: ApiUnderTest, client: Any, stream: bool) -> Received:
    """Make the call as an application would and note what it received, up to any exception."""
    answer = Received()
    try:
        result = await resolve(api.unwrap(await resolve(api.create(client, stream))))
        if not stream:
            answer.text, answer.completed = api.text(result), True
            return answer
        async for event in api.events(result):
            answer.text += api.event_text(event)
            answer.completed = answer.completed or api.is_final(event)
    except Exception as error:  # what the caller sees is the subject of the test
        answer.error = error
    return answer


def call_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    """The call's span: the one root (the client's own span and the phases are its children)."""
    [span] = [span for span in exporter.get_finished_spans() if span.parent is None]
    return span


RUNS = [
    (case, stream, api_name)
    for case in CASES
    for api_name, api in APIS.items()
    for stream in case.streams
    if stream in api.streams and api_name in case.forms
]


@pytest.mark.parametrize(
    ("case", "stream", "api_name"),
    RUNS,
    ids=[f"{case.name}-{api_name}-{'streamed' if stream else 'whole'}" for case, stream, api_name in RUNS],
)
async def test_each_wire_fault_ends_in_the_full_reply_or_the_clients_own_error(
    case: FaultCase,
    stream: bool,
    api_name: str,
    mode: str,
    simulator: ProviderSimulator,
    request: pytest.FixtureRequest,
    waits: list[float],
    refused_url: str,
    matrix: Matrix,
) -> None:
    api = APIS[api_name]
    options: dict[str, Any] = {"timeout": case.timeout}
    if case.refused:
        options["base_url"] = refused_url + ("/v1" if api.module is openai else "")
    bare = request.getfixturevalue(api.client_fixture).with_options(**options)
    case.script(simulator)
    random.seed(case.name)  # the clients' backoff jitter: drawn alike in the bare and the wrapped run
    bare_answer = await call(api, bare, stream)
    bare_posts, bare_waits = len(simulator.requests), list(waits)
    simulator.reset()
    waits.clear()
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    client = sdk.wrap(request.getfixturevalue(api.client_fixture).with_options(**options), tracer_provider=provider)
    case.script(simulator)
    random.seed(case.name)

    answer = await call(api, client, stream)

    attributes = call_span(spans).attributes or {}
    observed = Observed(
        attempts=len(simulator.requests),
        exception=type(answer.error).__name__ if answer.error is not None else "-",
        got=answer.got,
        error_type=str(attributes.get(sc.ERROR_TYPE, "-")),
        span_attempts=int(attributes.get(sc.KVWISE_ATTEMPTS, 0)),
    )
    matrix.setdefault((case.name, api_name, stream), []).append((observed, list(waits)))

    assert observed.attempts <= bare_posts  # what the provider accepted is never sent again
    if bare_answer.error is not None:
        assert isinstance(answer.error, type(bare_answer.error)), (answer.error, bare_answer.error)
    else:  # an end the bare client accepts is an end (issue 51)
        assert answer.error is None, answer.error
    assert waits == pytest.approx(bare_waits, abs=DATE_SLACK)  # the client's own waits, as bare
    bare_as_stated = bare_posts == case.attempts and (
        case.waits is None or all(case.waits[0] <= wait <= case.waits[1] for wait in bare_waits)
    )
    if not bare_as_stated:  # the installed release's own retry rules are not the newest's, which the case states
        assert observed.attempts == bare_posts  # (openai 1.x retries a Retry-After that 3.x refuses): as bare
        return
    assert (observed.attempts, observed.span_attempts, observed.got) == (case.attempts, case.span_attempts, case.got)
    if case.raises is None:
        assert answer.error is None
        assert call_span(spans).status.status_code is not StatusCode.ERROR and sc.ERROR_TYPE not in attributes
        if case.got is Got.FULL:
            assert answer.text == simulator.reply and sc.KVWISE_STREAM_END_MARKER not in attributes
        else:  # a body that ended cleanly without its end marker: the bare client's end, marked on the span
            assert simulator.reply.startswith(answer.text) and answer.text != simulator.reply
            assert attributes[sc.KVWISE_STREAM_END_MARKER] is False
    else:
        expected = case.raises[api.errors_as]
        assert observed.exception == expected
        assert simulator.reply.startswith(answer.text) and answer.text != simulator.reply
        assert call_span(spans).status.status_code is StatusCode.ERROR
        assert observed.error_type == ("stream_truncated" if expected == "StreamTruncated" else expected)
    if case.waits is not None:
        low, high = case.waits
        assert len(waits) == case.span_attempts - 1 and all(low <= wait <= high for wait in waits)


@pytest.mark.parametrize("api_name", ["chat", "messages"])
async def test_a_stream_that_hangs_after_its_headers_raises_the_clients_timeout_after_one_timeout(
    api_name: str,
    mode: str,
    simulator: ProviderSimulator,
    request: pytest.FixtureRequest,
) -> None:
    """The client's own read timeout, once: not kvwise's attempts' worth of them (3 x 5 s on main)."""
    api = APIS[api_name]
    client = sdk.wrap(request.getfixturevalue(api.client_fixture).with_options(timeout=READ_TIMEOUT))
    simulator.stall(STALL, times=EVERY_ATTEMPT)
    started = time.monotonic()
    answer = await call(api, client, stream=True)
    elapsed = time.monotonic() - started
    # the client's timeout, or its transport's where an older release lets that escape (as bare)
    assert isinstance(answer.error, (api.module.APITimeoutError, http_library(api.module).TimeoutException))
    assert isinstance(answer.error, sdk.StreamTruncated)
    assert len(simulator.requests) == 1
    assert elapsed < EVERY_ATTEMPT * READ_TIMEOUT  # one client timeout, where re-sending took one per attempt


@pytest.mark.parametrize("api_name", ["chat", "messages"])
async def test_a_200_html_page_comes_back_as_the_bare_client_gives_it(
    api_name: str,
    mode: str,
    simulator: ProviderSimulator,
    request: pytest.FixtureRequest,
) -> None:
    """A non-streamed 200 whose body is HTML: both clients hand the page over as text; so does kvwise, sent once."""
    api = APIS[api_name]
    bare = request.getfixturevalue(api.client_fixture)
    simulator.serve_html(times=EVERY_ATTEMPT)
    expected = await resolve(api.create(bare, False))
    simulator.reset()
    simulator.serve_html(times=EVERY_ATTEMPT)
    got = await resolve(api.create(sdk.wrap(bare), False))
    assert isinstance(expected, str) and got == expected and len(simulator.requests) == 1
